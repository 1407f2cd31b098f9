defmodule Ringbus.Bench.Groups.Meter do
  @moduledoc false
  # What one row's producers and consumers share: their counts in
  # `:atomics` (any process of the node that made them writes them) and the
  # push-to-delivery latencies (`Replication.Samples`). A payload carries
  # its push time in its first 8 bytes: OS µs, the clock every node and
  # server of this machine shares, so a delivery on another node or through
  # another server reads its latency off it.

  alias Ringbus.Bench.Replication.Samples

  @budget 1
  @pushed 2
  @acked 3
  @errors 4
  @redelivered 5
  @producers_done 6

  @type t :: %{counts: :atomics.atomics_ref(), samples: Samples.t()}

  @doc "The bytes of a payload's push time; payloads are at least this long."
  @spec stamp_bytes() :: 8
  def stamp_bytes, do: 8

  @doc "A meter for a row of at most `max` messages."
  @spec new(pos_integer()) :: t()
  def new(max) do
    counts = :atomics.new(6, signed: true)
    :ok = :atomics.put(counts, @budget, max)
    %{counts: counts, samples: Samples.new(max)}
  end

  @doc "Takes up to `n` messages from the row's budget; how many it got."
  @spec take(t(), pos_integer()) :: non_neg_integer()
  def take(%{counts: c}, n), do: max(min(n, n + :atomics.sub_get(c, @budget, n)), 0)

  @doc "`n` payloads of `size` bytes stamped with the time now."
  @spec payloads(pos_integer(), pos_integer()) :: [binary()]
  def payloads(size, n) do
    payload = <<System.os_time(:microsecond)::64, :binary.copy("x", size - 8)::binary>>
    List.duplicate(payload, n)
  end

  @doc "When `payload` was pushed (OS µs)."
  @spec pushed_at(binary()) :: integer()
  def pushed_at(<<us::64, _::binary>>), do: us

  @spec pushed(t(), non_neg_integer()) :: :ok
  def pushed(%{counts: c}, n), do: :atomics.add(c, @pushed, n)

  @spec acked(t(), non_neg_integer()) :: :ok
  def acked(%{counts: c}, n), do: :atomics.add(c, @acked, n)

  @doc "Counts a request that failed (a push, a fetch or an ack)."
  @spec error(t()) :: :ok
  def error(%{counts: c}), do: :atomics.add(c, @errors, 1)

  @spec producer_done(t()) :: :ok
  def producer_done(%{counts: c}), do: :atomics.add(c, @producers_done, 1)

  @doc """
  Records a delivery at `now` (OS µs): its latency when it is the
  message's first, a redelivery otherwise.
  """
  @spec delivered(t(), binary(), pos_integer(), integer()) :: :ok
  def delivered(meter, payload, 1, now), do: Samples.add(meter.samples, now - pushed_at(payload))
  def delivered(%{counts: c}, _payload, _deliveries, _now), do: :atomics.add(c, @redelivered, 1)

  @doc "Messages pushed and not yet acked."
  @spec backlog(t()) :: integer()
  def backlog(%{counts: c}), do: :atomics.get(c, @pushed) - :atomics.get(c, @acked)

  @doc "Whether all `producers` are done and every message they pushed is acked."
  @spec drained?(t(), pos_integer()) :: boolean()
  def drained?(%{counts: c} = meter, producers),
    do: :atomics.get(c, @producers_done) >= producers and backlog(meter) <= 0

  @doc "The row's figures over `seconds`: acks per second and the latencies of first deliveries."
  @spec summary(t(), float(), pos_integer()) :: map()
  def summary(%{counts: c, samples: samples}, seconds, size) do
    acked = :atomics.get(c, @acked)
    rate = if seconds > 0, do: acked / seconds, else: 0.0

    samples
    |> Samples.summary(seconds, size)
    |> Map.take([:p50_us, :p99_us, :max_us, :seconds])
    |> Map.merge(%{
      pushed: :atomics.get(c, @pushed),
      acked: acked,
      msgs_per_s: rate,
      errors: :atomics.get(c, @errors),
      redelivered: :atomics.get(c, @redelivered)
    })
  end
end
