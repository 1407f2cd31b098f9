defmodule Ringbus.Bench.StatsTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Stats

  doctest Stats

  describe "percentile/2" do
    test "is the nearest-rank sample" do
      sorted = List.to_tuple(Enum.to_list(1..100))

      assert Stats.percentile(sorted, 0.5) == 50
      assert Stats.percentile(sorted, 0.99) == 99
      assert Stats.percentile(sorted, 0.999) == 100
      assert Stats.percentile(sorted, 1.0) == 100
      assert Stats.percentile(sorted, 0.0) == 1
    end

    test "does not round a rank up past float error" do
      sorted = List.to_tuple(Enum.to_list(1..2_000_000))

      assert Stats.percentile(sorted, 0.99999) == 1_999_980
      assert Stats.percentile(sorted, 0.9999) == 1_999_800
      assert Stats.percentile(sorted, 0.99) == 1_980_000
    end

    test "of one sample is that sample, of none is nil" do
      assert Stats.percentile({7}, 0.99999) == 7
      assert Stats.percentile({}, 0.5) == nil
    end
  end

  test "sorted/2 reads and sorts the first samples of an atomics array" do
    samples = Stats.new_samples(5)
    for {v, i} <- Enum.with_index([50, 10, 40, 20, 30], 1), do: :atomics.put(samples, i, v)

    assert Stats.sorted(samples, 5) == {10, 20, 30, 40, 50}
    assert Stats.sorted(samples, 3) == {10, 40, 50}
    assert Stats.sorted(samples, 0) == {}
  end

  test "mean/1, longest/2 and median/1" do
    assert Stats.mean({1, 2, 3, 10}) == 4.0
    assert Stats.mean({}) == nil
    assert Stats.longest({1, 2, 3}, 10) == [1, 2, 3]
    assert Stats.longest({1, 2, 3}, 0) == []
    assert Stats.median([5]) == 5
    assert Stats.median([]) == nil
  end

  test "curve/2 rises to the maximum at log10(n) nines" do
    sorted = List.to_tuple(Enum.to_list(1..1000))
    curve = Stats.curve(sorted, 0.5)

    assert List.first(curve) == {0.0, 1}
    assert List.last(curve) == {3.0, 1000}
    assert {2.0, 990} in curve
    values = Enum.map(curve, &elem(&1, 1))
    assert values == Enum.sort(values)
  end
end
