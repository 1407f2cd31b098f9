defmodule Ringbus.Bench.Stats do
  @moduledoc """
  Latency figures for the benches: samples kept off the heap, percentiles,
  medians across runs and percentile curves for `Ringbus.Bench.Chart`.

  A bench that takes millions of samples must not keep them as a list on the
  heap of the process it measures, or that process's garbage collections show
  up in the figures. `new_samples/1` preallocates an `:atomics` array (eight
  bytes a sample, outside every process heap); the bench puts one duration per
  index and, once the timed part is over, `sorted/2` turns the array into a
  sorted tuple that the other functions read.

      samples = Ringbus.Bench.Stats.new_samples(3)
      :ok = :atomics.put(samples, 1, 30)
      :ok = :atomics.put(samples, 2, 10)
      :ok = :atomics.put(samples, 3, 20)
      sorted = Ringbus.Bench.Stats.sorted(samples, 3)
      #=> {10, 20, 30}
      Ringbus.Bench.Stats.percentile(sorted, 0.5)
      #=> 20

  Percentiles use the nearest-rank method: the `p` percentile of `n` sorted
  samples is the sample of rank `ceil(p * n)`, so it is always a value that
  was observed and `percentile(sorted, 1.0)` is the maximum.
  """

  @typedoc "Samples sorted in ascending order, as returned by `sorted/2`."
  @type sorted :: tuple()

  @typedoc """
  A point of a percentile curve: `{nines, value}`, where `nines` is
  `-log10(1 - p)` (0 is the 0th percentile, 2 is 99%, 5 is 99.999%).
  """
  @type point :: {float(), number()}

  @doc "Preallocates room for `count` non-negative integer samples."
  @spec new_samples(pos_integer()) :: :atomics.atomics_ref()
  def new_samples(count) when is_integer(count) and count > 0,
    do: :atomics.new(count, signed: false)

  @doc "The first `count` samples of an `:atomics` array, sorted in a tuple."
  @spec sorted(:atomics.atomics_ref(), non_neg_integer()) :: sorted()
  def sorted(samples, count) when is_integer(count) and count >= 0 do
    1..count//1
    |> Enum.map(&:atomics.get(samples, &1))
    |> Enum.sort()
    |> List.to_tuple()
  end

  @doc """
  The nearest-rank `p` percentile (`0.0 <= p <= 1.0`) of sorted samples.
  Returns `nil` when there are none.

      iex> Ringbus.Bench.Stats.percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9)
      9
      iex> Ringbus.Bench.Stats.percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99)
      10
      iex> Ringbus.Bench.Stats.percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.0)
      1
  """
  @spec percentile(sorted(), float()) :: number() | nil
  def percentile({}, _p), do: nil

  def percentile(sorted, p) when is_tuple(sorted) and p >= 0 and p <= 1 do
    n = tuple_size(sorted)
    # The epsilon keeps 0.99999 * 2_000_000 from rounding up past its rank.
    rank = (p * n - 1.0e-9) |> Float.ceil() |> trunc() |> max(1) |> min(n)
    elem(sorted, rank - 1)
  end

  @doc """
  The arithmetic mean of sorted samples, or `nil` when there are none.

      iex> Ringbus.Bench.Stats.mean({1, 2, 6})
      3.0
  """
  @spec mean(sorted()) :: float() | nil
  def mean({}), do: nil
  def mean(sorted), do: sum(sorted, tuple_size(sorted), 0) / tuple_size(sorted)

  defp sum(_sorted, 0, acc), do: acc
  defp sum(sorted, i, acc), do: sum(sorted, i - 1, acc + elem(sorted, i - 1))

  @doc """
  The `k` largest samples, in ascending order.

      iex> Ringbus.Bench.Stats.longest({1, 2, 3, 4, 5}, 2)
      [4, 5]
  """
  @spec longest(sorted(), non_neg_integer()) :: [number()]
  def longest(sorted, k) when is_integer(k) and k >= 0 do
    n = tuple_size(sorted)
    for i <- max(n - k, 0)..(n - 1)//1, do: elem(sorted, i)
  end

  @doc """
  The median of a list of numbers (the mean of the two middle ones when the
  list has an even length), or `nil` for an empty list.

      iex> Ringbus.Bench.Stats.median([3, 1, 2])
      2
      iex> Ringbus.Bench.Stats.median([4, 1, 2, 3])
      2.5
  """
  @spec median([number()]) :: number() | nil
  def median([]), do: nil

  def median(values) when is_list(values) do
    sorted = Enum.sort(values)
    n = length(sorted)
    mid = div(n, 2)

    if rem(n, 2) == 1,
      do: Enum.at(sorted, mid),
      else: (Enum.at(sorted, mid - 1) + Enum.at(sorted, mid)) / 2
  end

  @doc """
  Medians position by position across lists of the same length: the median
  longest-ten of several runs, or the median curve.

      iex> Ringbus.Bench.Stats.median_each([[1, 10], [3, 30], [2, 20]])
      [2, 20]
  """
  @spec median_each([[number()]]) :: [number()]
  def median_each(lists) do
    lists |> Enum.zip() |> Enum.map(&median(Tuple.to_list(&1)))
  end

  @doc """
  A percentile curve: the value at every `step` nines from 0 up to the
  maximum, which is placed at `log10(n)` nines (the rank of the last sample).

      iex> Ringbus.Bench.Stats.curve({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5)
      [{0.0, 1}, {0.5, 7}, {1.0, 10}]
  """
  @spec curve(sorted(), float()) :: [point()]
  def curve({}, _step), do: []

  def curve(sorted, step) when is_float(step) and step > 0 do
    n = tuple_size(sorted)
    top = :math.log10(n)
    steps = trunc(Float.floor(top / step + 1.0e-9))

    inner =
      for i <- 0..steps//1, x = i * step, x < top - 1.0e-9 do
        {x, percentile(sorted, 1.0 - :math.pow(10, -x))}
      end

    inner ++ [{top, elem(sorted, n - 1)}]
  end

  @doc """
  `n` split into `k` shares that differ by at most one, larger first: the
  work of each of `k` processes.

      iex> Ringbus.Bench.Stats.shares(10, 4)
      [3, 3, 2, 2]
  """
  @spec shares(non_neg_integer(), pos_integer()) :: [non_neg_integer()]
  def shares(n, k) when is_integer(n) and n >= 0 and is_integer(k) and k > 0 do
    base = div(n, k)
    extra = rem(n, k)
    for i <- 1..k, do: if(i <= extra, do: base + 1, else: base)
  end

  @doc """
  The growth of a time per doubling of a size, from a least-squares line
  through `{size, time}` points on log-log axes: 2.0 for linear growth, 4.0
  for quadratic. Unlike the ratio of two neighbouring points, one noisy
  point moves it little. `nil` with fewer than two points of distinct sizes.

      iex> Ringbus.Bench.Stats.growth_per_doubling([{10, 1.0}, {20, 2.0}, {40, 4.0}])
      2.0
      iex> Ringbus.Bench.Stats.growth_per_doubling([{10, 1.0}, {20, 4.0}, {40, 16.0}])
      4.0
  """
  @spec growth_per_doubling([{number(), number()}]) :: float() | nil
  def growth_per_doubling(points) do
    logs = for {n, t} <- points, n > 0 and t > 0, do: {:math.log2(n), :math.log2(t)}

    {count, sx, sy} =
      Enum.reduce(logs, {0, 0.0, 0.0}, fn {x, y}, {c, sx, sy} -> {c + 1, sx + x, sy + y} end)

    if count < 2 do
      nil
    else
      {mx, my} = {sx / count, sy / count}

      {sxy, sxx} =
        Enum.reduce(logs, {0.0, 0.0}, fn {x, y}, {sxy, sxx} ->
          {sxy + (x - mx) * (y - my), sxx + (x - mx) * (x - mx)}
        end)

      if sxx == 0.0, do: nil, else: Float.round(:math.pow(2, sxy / sxx), 6)
    end
  end
end
