defmodule Ringbus.Histogram do
  @moduledoc false
  # A latency histogram kept in `:counters` slots, so that whoever observes
  # adds to it without a process: the server's push-to-ack time and the
  # channels' push-to-delivery time. One layout for all: a bucket per power
  # of 2 µs, le = 2^i µs for i in 0..24 (1 µs to about 17 s), then +Inf,
  # then the sum (µs) and the count of the observations. A histogram takes
  # `slots/0` slots of an array, from `base`.

  @top 24
  @sum @top + 2
  @count @top + 3

  @type counters :: :counters.counters_ref()

  @typedoc "Cumulative buckets `{le_us | :infinity, count}`, with sum (µs) and count."
  @type t :: %{
          buckets: [{pos_integer() | :infinity, non_neg_integer()}],
          sum_us: non_neg_integer(),
          count: non_neg_integer()
        }

  @doc "Slots a histogram takes."
  @spec slots() :: pos_integer()
  def slots, do: @count + 1

  @doc "The bucket of `us` µs: the least `i` with `us <= 2^i`, or 25 (+Inf)."
  @spec bucket(non_neg_integer()) :: non_neg_integer()
  def bucket(us) when us <= 1, do: 0
  def bucket(us), do: min(bits(us - 1, 0), @top + 1)

  defp bits(0, n), do: n
  defp bits(x, n), do: bits(Bitwise.bsr(x, 1), n + 1)

  @doc "Observes `us` µs, `n` times."
  @spec observe(counters(), pos_integer(), integer(), pos_integer()) :: :ok
  def observe(counters, base, us, n) do
    us = max(us, 0)
    :counters.add(counters, base + bucket(us), n)
    :counters.add(counters, base + @sum, us * n)
    :counters.add(counters, base + @count, n)
  end

  @doc """
  Observes the age at `now` (µs) of each run `{at, n}` of `n` observations
  made at `at`: one counter add per bucket the runs fall in (runs sorted by
  time share their buckets), plus the sum and count.
  """
  @spec observe_ages(counters(), pos_integer(), integer(), [{integer(), pos_integer()}]) :: :ok
  def observe_ages(_counters, _base, _now, []), do: :ok
  def observe_ages(counters, base, now, runs), do: ages(counters, base, now, runs, -1, 0, 0, 0)

  defp ages(counters, base, now, [{at, n} | rest], b, in_b, sum, count) do
    us = max(now - at, 0)
    # Most runs fall in the bucket of the one before.
    if b >= 0 and us <= Bitwise.bsl(1, b) and (b == 0 or us > Bitwise.bsl(1, b - 1)) do
      ages(counters, base, now, rest, b, in_b + n, sum + us * n, count + n)
    else
      if in_b > 0, do: :counters.add(counters, base + b, in_b)
      ages(counters, base, now, rest, bucket(us), n, sum + us * n, count + n)
    end
  end

  defp ages(counters, base, _now, [], b, in_b, sum, count) do
    :counters.add(counters, base + b, in_b)
    :counters.add(counters, base + @sum, sum)
    :counters.add(counters, base + @count, count)
  end

  @doc "The histogram from `base`, its buckets cumulative as Prometheus wants them."
  @spec read(counters(), pos_integer()) :: t()
  def read(counters, base) do
    {buckets, _} =
      Enum.map_reduce(0..(@top + 1), 0, fn i, total ->
        total = total + :counters.get(counters, base + i)
        {{if(i > @top, do: :infinity, else: Bitwise.bsl(1, i)), total}, total}
      end)

    %{
      buckets: buckets,
      sum_us: :counters.get(counters, base + @sum),
      count: :counters.get(counters, base + @count)
    }
  end
end
