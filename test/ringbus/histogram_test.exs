defmodule Ringbus.HistogramTest do
  # The histogram's arithmetic, on a :counters array of its own.
  use ExUnit.Case, async: true

  alias Ringbus.Histogram

  defp new, do: :counters.new(1 + Histogram.slots(), [])

  test "runs observed by their ages count as each observation made alone" do
    for _ <- 1..200 do
      now = 1_000_000_000

      runs =
        for _ <- 1..:rand.uniform(40), do: {now - :rand.uniform(70_000_000), :rand.uniform(5)}

      # Sorted newest first, as a read returns them, or not at all.
      runs = if :rand.uniform(2) == 1, do: Enum.sort(runs, :desc), else: runs

      by_runs = new()
      :ok = Histogram.observe_ages(by_runs, 2, now, runs)
      alone = new()
      for {at, n} <- runs, do: Histogram.observe(alone, 2, now - at, n)

      assert Histogram.read(by_runs, 2) == Histogram.read(alone, 2)
      assert Histogram.read(by_runs, 2).count == Enum.sum(for {_, n} <- runs, do: n)
    end
  end

  test "buckets are cumulative, the last one +Inf; a time from the future counts as 0" do
    c = new()
    Histogram.observe(c, 1, 3, 2)
    Histogram.observe(c, 1, -5, 1)
    Histogram.observe(c, 1, 100_000_000, 1)

    assert %{buckets: buckets, sum_us: 100_000_006, count: 4} = Histogram.read(c, 1)
    assert length(buckets) == 26
    assert [{1, 1}, {2, 1}, {4, 3} | _] = buckets
    assert {16_777_216, 3} == Enum.at(buckets, 24)
    assert {:infinity, 4} == List.last(buckets)
  end

  test "observing no runs adds nothing" do
    c = new()
    :ok = Histogram.observe_ages(c, 1, 0, [])
    assert Histogram.read(c, 1).count == 0
  end
end
