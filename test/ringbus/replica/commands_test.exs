defmodule Ringbus.Replica.CommandsTest do
  # The writer's group commit as functions: queued requests become as few
  # machine commands as their order allows, and replies become answers.
  use ExUnit.Case, async: true

  alias Ringbus.Replica.Commands

  test "runs of pushes and of pulls become one command each, in order" do
    requests = [
      {:a, {:push, nil, ["x"], 1}},
      {:b, {:push, {:p, 1}, ["y", "z"], 2}},
      {:c, :pull},
      {:d, :pull},
      {:e, {:push, nil, ["w"], 1}}
    ]

    assert Commands.group(requests) == [
             {{:push_batches, [{nil, ["x"]}, {{:p, 1}, ["y", "z"]}]}, [:a, :b]},
             {{:pull, 2}, [:c, :d]},
             {{:push_batches, [{nil, ["w"]}]}, [:e]}
           ]
  end

  test "a run of group requests becomes one command, one answer each, in order" do
    requests = [
      {:a, {:group, 100, {:ack, "g", [1]}}},
      {:b, {:group, :infinity, {:info, "g"}}},
      {:c, :pull},
      {:d, {:group, 100, {:ack, "g", [2]}}}
    ]

    assert [
             {{:groups, [{100, {:ack, "g", [1]}}, {:infinity, {:info, "g"}}]} = first, [:a, :b]},
             {{:pull, 1}, [:c]},
             {{:groups, [{100, {:ack, "g", [2]}}]}, [:d]}
           ] = Commands.group(requests)

    assert Commands.answers(first, [:a, :b], {:groups, [{:ok, 1}, {:error, :no_group}]}) ==
             [{:a, {:ok, 1}}, {:b, {:error, :no_group}}]

    many = for i <- 1..600, do: {i, {:group, 100, {:ack, "g", [i]}}}
    assert [{{:groups, first}, _}, {{:groups, rest}, _}] = Commands.group(many)
    assert {length(first), length(rest)} == {512, 88}
  end

  test "a command holds at most 512 requests and 4 MiB, but always one" do
    many = for i <- 1..600, do: {i, {:push, nil, ["x"], 1}}
    assert [{{:push_batches, first}, _}, {{:push_batches, rest}, _}] = Commands.group(many)
    assert {length(first), length(rest)} == {512, 88}

    big = :binary.copy("x", 3 * 1024 * 1024)
    bigs = for i <- 1..3, do: {i, {:push, nil, [big], byte_size(big)}}
    assert [{_, [1]}, {_, [2]}, {_, [3]}] = Commands.group(bigs)
  end

  test "replies become one answer per request" do
    assert Commands.answers({:push_batches, [:x, :y]}, [:a, :b], [{:ok, 0}, {:error, :full}]) ==
             [{:a, {:ok, 0}}, {:b, {:error, :full}}]

    # Fewer messages than pullers: the last ones find the channel empty.
    assert Commands.answers({:pull, 3}, [:a, :b, :c], {:ok, [{4, "m"}, {5, "n"}]}) ==
             [{:a, {:ok, 4, "m"}}, {:b, {:ok, 5, "n"}}, {:c, :empty}]

    assert Commands.answers(:junk, [:a], {:error, :badarg}) == [{:a, {:error, :badarg}}]
  end
end
