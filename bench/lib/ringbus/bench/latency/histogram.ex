defmodule Ringbus.Bench.Latency.Histogram do
  @moduledoc """
  Latencies counted into log-linear buckets, in `:counters` (off every
  process heap, written by every connection at once), so memory stays the
  same whatever the number of requests; and the exact maximum beside them.

  Values below 128 have a bucket each; above, a bucket spans 1/64 of its
  value at most (the seven leading bits are kept), so a percentile is the
  upper edge of its bucket: never below the true value, less than 1.6%
  above it.

      iex> h = Ringbus.Bench.Latency.Histogram.new()
      iex> for v <- [100, 200, 300, 1_000_000], do: Ringbus.Bench.Latency.Histogram.record(h, v)
      iex> Ringbus.Bench.Latency.Histogram.percentile(h, 0.5)
      201
      iex> Ringbus.Bench.Latency.Histogram.max(h)
      1_000_000
  """

  import Bitwise

  @mantissa_bits 7
  # Buckets for values up to 2^62: 64 per power of two above 128.
  @buckets 128 + 56 * 64
  @max_value (1 <<< 62) - 1

  @type t :: %{counts: :counters.counters_ref(), max: :atomics.atomics_ref()}

  @doc "An empty histogram."
  @spec new() :: t()
  def new do
    %{counts: :counters.new(@buckets, [:write_concurrency]), max: :atomics.new(1, signed: false)}
  end

  @doc "Counts one value (negative ones as 0)."
  @spec record(t(), integer()) :: :ok
  def record(%{counts: counts, max: max}, value) do
    value = value |> max(0) |> min(@max_value)
    :counters.add(counts, bucket(value) + 1, 1)
    raise_max(max, value)
  end

  defp raise_max(max, value) do
    current = :atomics.get(max, 1)

    cond do
      value <= current -> :ok
      :atomics.compare_exchange(max, 1, current, value) == :ok -> :ok
      true -> raise_max(max, value)
    end
  end

  @doc "Values counted."
  @spec count(t()) :: non_neg_integer()
  def count(%{counts: counts}),
    do: Enum.reduce(1..@buckets, 0, &(&2 + :counters.get(counts, &1)))

  @doc "The largest value counted, exactly (0 when none)."
  @spec max(t()) :: non_neg_integer()
  def max(%{max: max}), do: :atomics.get(max, 1)

  @doc """
  The nearest-rank `p` percentile (`0.0 < p <= 1.0`): the upper edge of the
  bucket that holds it, at most the maximum; `nil` when empty.
  """
  @spec percentile(t(), float()) :: non_neg_integer() | nil
  def percentile(histogram, p) when p > 0 and p <= 1 do
    case count(histogram) do
      0 -> nil
      n -> find(histogram, max(ceil(p * n), 1), 1, 0)
    end
  end

  defp find(%{counts: counts} = h, rank, index, seen) do
    seen = seen + :counters.get(counts, index)

    if seen >= rank,
      do: min(upper(index - 1), max(h)),
      else: find(h, rank, index + 1, seen)
  end

  @doc """
  The bucket of a value: itself below 128, else its seven leading bits and
  their shift.

      iex> Enum.map([0, 127, 128, 129, 130, 255, 256, 260], &Ringbus.Bench.Latency.Histogram.bucket/1)
      [0, 127, 128, 128, 129, 191, 192, 193]
  """
  @spec bucket(non_neg_integer()) :: non_neg_integer()
  def bucket(value) when value < 128, do: value

  def bucket(value) do
    shift = bit_length(value) - @mantissa_bits
    128 + (shift - 1) * 64 + ((value >>> shift) - 64)
  end

  @doc """
  The largest value of a bucket.

      iex> Enum.map([0, 127, 128, 129, 191, 192], &Ringbus.Bench.Latency.Histogram.upper/1)
      [0, 127, 129, 131, 255, 259]
  """
  @spec upper(non_neg_integer()) :: non_neg_integer()
  def upper(bucket) when bucket < 128, do: bucket

  def upper(bucket) do
    shift = div(bucket - 128, 64) + 1
    mantissa = rem(bucket - 128, 64) + 64
    ((mantissa + 1) <<< shift) - 1
  end

  # The bits of a positive value: halving the range at each step (the generator records every reply).
  defp bit_length(value) when value >= 1 <<< 32, do: 32 + bit_length(value >>> 32)
  defp bit_length(value) when value >= 1 <<< 16, do: 16 + bit_length(value >>> 16)
  defp bit_length(value) when value >= 1 <<< 8, do: 8 + bit_length(value >>> 8)
  defp bit_length(value) when value >= 1 <<< 4, do: 4 + bit_length(value >>> 4)
  defp bit_length(value) when value >= 1 <<< 2, do: 2 + bit_length(value >>> 2)
  defp bit_length(value) when value >= 2, do: 2
  defp bit_length(_value), do: 1
end
