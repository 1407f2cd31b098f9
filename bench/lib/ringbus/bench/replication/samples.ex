defmodule Ringbus.Bench.Replication.Samples do
  @moduledoc false
  # The confirm latencies of one row, in µs, in an `:atomics` array (off
  # every heap, written by any process of the node that made it), then the
  # row's figures. Holds the first `max` samples: a row is bounded in count.

  alias Ringbus.Bench.Stats

  @type t :: %{max: pos_integer(), at: :atomics.atomics_ref(), samples: :atomics.atomics_ref()}

  @type summary :: %{
          count: non_neg_integer(),
          errors: non_neg_integer(),
          seconds: float(),
          msgs_per_s: float(),
          mb_per_s: float(),
          p50_us: non_neg_integer() | nil,
          p99_us: non_neg_integer() | nil,
          max_us: non_neg_integer() | nil
        }

  @spec new(pos_integer()) :: t()
  def new(max),
    do: %{max: max, at: :atomics.new(2, signed: false), samples: Stats.new_samples(max)}

  @doc "Records one acked message that took `us` from send to ack."
  @spec add(t(), non_neg_integer()) :: :ok
  def add(%{max: max, at: at, samples: samples}, us) do
    i = :atomics.add_get(at, 1, 1)
    if i <= max, do: :atomics.put(samples, i, max(us, 0)), else: :ok
  end

  @doc "Records a send that was answered with an error or not at all."
  @spec error(t()) :: :ok
  def error(%{at: at}), do: :atomics.add(at, 2, 1)

  @doc "The figures of `samples` over `seconds` with `payload`-byte messages."
  @spec summary(t(), float(), pos_integer()) :: summary()
  def summary(%{max: max, at: at, samples: samples}, seconds, payload) do
    count = min(:atomics.get(at, 1), max)
    sorted = Stats.sorted(samples, count)
    rate = if seconds > 0, do: count / seconds, else: 0.0

    %{
      count: count,
      errors: :atomics.get(at, 2),
      seconds: seconds,
      msgs_per_s: rate,
      mb_per_s: rate * payload / 1_048_576,
      p50_us: Stats.percentile(sorted, 0.5),
      p99_us: Stats.percentile(sorted, 0.99),
      max_us: Stats.percentile(sorted, 1.0)
    }
  end

  @doc "Monotonic µs."
  @spec now() :: integer()
  def now, do: System.monotonic_time(:microsecond)
end
