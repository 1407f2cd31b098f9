defmodule Ringbus.Bench.Latency.Schedule do
  @moduledoc """
  The open-loop schedule of `Ringbus.Bench.Latency`: when each request is
  meant to leave, whatever happened to the ones before it.

  Request `i` (0-based, over all connections) is due `i / rate` seconds
  after the start, and goes over connection `rem(i, connections)`; so the
  `k`-th request of connection `c` is request `c + k * connections`. A
  request's latency runs from that intended time to its reply, not from
  when it was actually written: a server (or a generator) that stalls
  delays every request due meanwhile, and each of them counts the stall.
  Measuring from the actual send instead is coordinated omission (see
  wrk2's README): the requests a stall held back would never be timed.

      iex> s = Ringbus.Bench.Latency.Schedule.new(1_000, 10, 4)
      iex> Ringbus.Bench.Latency.Schedule.intended(s, 1, 2)
      9_000_000
      iex> Ringbus.Bench.Latency.Schedule.latency(s, 1, 2, 9_250_000)
      250_000

  Times are nanoseconds since the start. Everything here is pure.
  """

  @enforce_keys [:rate, :total, :connections]
  defstruct [:rate, :total, :connections]

  @type t :: %__MODULE__{
          rate: pos_integer(),
          total: pos_integer(),
          connections: pos_integer()
        }

  @second 1_000_000_000
  # The send lag (p99.9) above which a run is behind: its latencies would be the generator's.
  @max_send_lag 1_000_000

  @doc "`total` requests at `rate` a second over `connections` connections."
  @spec new(pos_integer(), pos_integer(), pos_integer()) :: t()
  def new(rate, total, connections)
      when is_integer(rate) and rate > 0 and is_integer(total) and total > 0 and
             is_integer(connections) and connections > 0 do
    %__MODULE__{rate: rate, total: total, connections: connections}
  end

  @doc """
  The requests connection `c` sends in all.

      iex> s = Ringbus.Bench.Latency.Schedule.new(100, 10, 4)
      iex> Enum.map(0..3, &Ringbus.Bench.Latency.Schedule.count(s, &1))
      [3, 3, 2, 2]
  """
  @spec count(t(), non_neg_integer()) :: non_neg_integer()
  def count(%__MODULE__{total: total, connections: n}, c), do: max(div(total - c + n - 1, n), 0)

  @doc "When the `k`-th request of connection `c` is due (ns since the start)."
  @spec intended(t(), non_neg_integer(), non_neg_integer()) :: non_neg_integer()
  def intended(%__MODULE__{rate: rate, connections: n}, c, k),
    do: div((c + k * n) * @second, rate)

  @doc """
  When request `i` (over all connections) is due (ns since the start).

      iex> s = Ringbus.Bench.Latency.Schedule.new(4_000, 10, 3)
      iex> Ringbus.Bench.Latency.Schedule.at(s, 7)
      1_750_000
  """
  @spec at(t(), non_neg_integer()) :: non_neg_integer()
  def at(%__MODULE__{rate: rate}, i), do: div(i * @second, rate)

  @doc """
  How many requests, over all connections, are due by `elapsed` ns: those
  with an intended time at or before it, at most `total`.

      iex> s = Ringbus.Bench.Latency.Schedule.new(4_000, 10, 3)
      iex> for t <- [-1, 0, 249_999, 250_000, 60_000_000_000], do: Ringbus.Bench.Latency.Schedule.due_total(s, t)
      [0, 1, 1, 2, 10]
  """
  @spec due_total(t(), integer()) :: non_neg_integer()
  def due_total(_schedule, elapsed) when elapsed < 0, do: 0

  def due_total(%__MODULE__{rate: rate, total: total}, elapsed),
    do: min(div(elapsed * rate, @second) + 1, total)

  @doc "The latency of that request, answered at `received` (ns since the start)."
  @spec latency(t(), non_neg_integer(), non_neg_integer(), integer()) :: integer()
  def latency(schedule, c, k, received), do: received - intended(schedule, c, k)

  @doc """
  How many of connection `c`'s requests are due by `elapsed` ns: all of
  those with an intended time at or before it, at most `count/2`.

      iex> s = Ringbus.Bench.Latency.Schedule.new(1_000, 10, 2)
      iex> for t <- [0, 999_999, 1_000_000, 2_000_000, 60_000_000_000],
      ...>   do: {Ringbus.Bench.Latency.Schedule.due(s, 0, t), Ringbus.Bench.Latency.Schedule.due(s, 1, t)}
      [{1, 0}, {1, 0}, {1, 1}, {2, 1}, {5, 5}]
  """
  @spec due(t(), non_neg_integer(), integer()) :: non_neg_integer()
  def due(_schedule, _c, elapsed) when elapsed < 0, do: 0

  def due(%__MODULE__{rate: rate, connections: n} = schedule, c, elapsed) do
    # Requests 0..last are due overall; those of connection c are c, c + n, ...
    last = min(div(elapsed * rate, @second), schedule.total - 1)
    if last < c, do: 0, else: min(div(last - c, n) + 1, count(schedule, c))
  end

  @doc """
  The rate a run achieved: requests after the first over the time from the
  first's intended time to the last one's actual send. A generator that
  kept up sends the last on time, and achieves the target rate.

      iex> s = Ringbus.Bench.Latency.Schedule.new(1_000, 11, 2)
      iex> Ringbus.Bench.Latency.Schedule.achieved(s, 10_000_000)
      1000.0
      iex> Ringbus.Bench.Latency.Schedule.achieved(s, 20_000_000)
      500.0
  """
  @spec achieved(t(), non_neg_integer()) :: float()
  def achieved(%__MODULE__{total: 1, rate: rate}, _last_send), do: rate / 1
  def achieved(_schedule, 0), do: 0.0
  def achieved(%__MODULE__{total: total}, last_send), do: (total - 1) * @second / last_send

  @doc """
  Whether a run fell behind, so that its latencies say more about the
  generator than about the server: it achieved more than 2% below its
  target, or the 99.9th percentile of its requests' send lag (actual write
  after intended time, `send_lag` ns) exceeds 1 ms. The generator reads
  and writes in one loop, so a generator late on reading replies is late
  on its writes too, and this catches both.

      iex> s = Ringbus.Bench.Latency.Schedule.new(1_000, 11, 2)
      iex> Ringbus.Bench.Latency.Schedule.behind?(s, 985.0, 20_000)
      false
      iex> Ringbus.Bench.Latency.Schedule.behind?(s, 975.0, 20_000)
      true
      iex> Ringbus.Bench.Latency.Schedule.behind?(s, 1_000.0, 1_000_001)
      true
  """
  @spec behind?(t(), float(), non_neg_integer()) :: boolean()
  def behind?(%__MODULE__{rate: rate}, achieved, send_lag),
    do: achieved < rate * 0.98 or send_lag > @max_send_lag
end
