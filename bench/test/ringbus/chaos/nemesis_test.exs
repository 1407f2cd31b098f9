defmodule Ringbus.Chaos.NemesisTest do
  use ExUnit.Case, async: true

  alias Ringbus.Chaos.Nemesis

  test "a seed gives one schedule, bounded in time, that kills only the killable" do
    steps = Nemesis.schedule(3, [:a, :b, :c], [:c], 60_000)
    assert steps == Nemesis.schedule(3, [:a, :b, :c], [:c], 60_000)
    assert steps != Nemesis.schedule(4, [:a, :b, :c], [:c], 60_000)

    for {:kill, node, _} <- steps, do: assert(node == :c)
    for {:partition, a, b, _} <- steps, do: assert(a != b)

    kinds = steps |> Enum.map(&elem(&1, 0)) |> MapSet.new()
    assert MapSet.equal?(kinds, MapSet.new([:stall, :kill, :partition, :pause]))
    assert Enum.any?(steps, &match?({:stall, _, ms} when ms <= 200, &1))
    assert Enum.any?(steps, &match?({:stall, _, ms} when ms >= 1_000, &1))

    # The steps fill the time asked, give or take the last one.
    total = steps |> Enum.map(&List.last(Tuple.to_list(&1))) |> Enum.sum()
    assert total >= 60_000 and total < 60_000 + 4_000
  end

  test "the schedule's length is bounded whatever the time" do
    assert Enum.count(Nemesis.schedule(1, [:a, :b], [], 100_000_000)) <= 1_000
  end

  test "the task refuses bad seeds" do
    assert_raise Mix.Error, ~r/--seed/, fn -> Mix.Tasks.Ringbus.Chaos.run(["--seed", "3..1"]) end
    assert_raise Mix.Error, ~r/--seed/, fn -> Mix.Tasks.Ringbus.Chaos.run(["--seed", "x"]) end
  end
end
