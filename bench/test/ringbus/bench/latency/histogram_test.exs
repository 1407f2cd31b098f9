defmodule Ringbus.Bench.Latency.HistogramTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Latency.Histogram

  doctest Histogram

  test "a percentile is within 1/64 above the exact one, and max is exact" do
    h = Histogram.new()
    values = for i <- 1..10_000, do: i * 997
    Enum.each(Enum.shuffle(values), &Histogram.record(h, &1))
    sorted = List.to_tuple(values)

    assert Histogram.count(h) == 10_000
    assert Histogram.max(h) == 9_970_000

    for p <- [0.5, 0.9, 0.99, 0.999, 1.0] do
      exact = elem(sorted, ceil(p * 10_000) - 1)
      got = Histogram.percentile(h, p)
      assert got >= exact and got <= exact * (1 + 1 / 64), "p#{p}: #{got} vs #{exact}"
    end
  end

  test "a bucket keeps a value's seven leading bits, for values of every bit length" do
    import Bitwise

    for bits <- 8..62, v <- [1 <<< (bits - 1), (1 <<< bits) - 1, (1 <<< (bits - 1)) + 12_345] do
      shift = length(Integer.digits(v, 2)) - 7
      assert Histogram.bucket(v) == 128 + (shift - 1) * 64 + ((v >>> shift) - 64), "#{v}"
    end
  end

  test "every bucket's upper edge is the last value that maps to it" do
    for value <- Enum.concat([0..300, 1_000..1_100, [2 ** 40, 2 ** 40 + 12_345]]) do
      b = Histogram.bucket(value)
      assert Histogram.upper(b) >= value
      assert Histogram.bucket(Histogram.upper(b)) == b
      assert Histogram.bucket(Histogram.upper(b) + 1) == b + 1
    end
  end

  test "empty, negative and concurrent records" do
    h = Histogram.new()
    assert Histogram.percentile(h, 0.5) == nil
    Histogram.record(h, -5)
    assert Histogram.percentile(h, 1.0) == 0

    tasks = for _ <- 1..4, do: Task.async(fn -> for v <- 1..1_000, do: Histogram.record(h, v) end)
    Enum.each(tasks, &Task.await/1)
    assert Histogram.count(h) == 4_001
    assert Histogram.max(h) == 1_000
  end
end
