defmodule Ringbus.Replica.TimesTest do
  # A replicated channel's messages carry its leader's stamp: every member
  # gives each message the same time, times never decrease in seq order,
  # and a read from a time finds the same message on every member; under
  # max_age, every member expires the same messages, at the leader's timer.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Nodes, Peers}
  import Peers, only: [eventually: 2]

  @moduletag timeout: 300_000

  test "every member gives each message the same time" do
    [a, b, c] = nodes = Peers.start_joined(3, "replica_times")
    :ok = Nodes.call(a, Ringbus, :create, ["t", [replicas: 3, capacity: 10_000]], 30_000)

    # From every member at once, singles and batches, over a few ms.
    nodes
    |> Enum.map(fn n ->
      Task.async(fn ->
        for i <- 1..40 do
          if rem(i, 3) == 0,
            do: {:ok, _} = Nodes.call(n, Ringbus, :push_many, ["t", ["x#{i}", "y#{i}"]]),
            else: {:ok, _} = Nodes.call(n, Ringbus, :push, ["t", "m#{i}"])
        end
      end)
    end)
    |> Task.await_many(60_000)

    count = 3 * (40 + 13)
    read = fn n -> Nodes.call(n, Ringbus, :read, ["t", 0, count, [times: true]]) end

    eventually(
      fn ->
        Enum.all?(nodes, &match?({:ok, [_ | _] = ms, 0} when length(ms) == count, read.(&1)))
      end,
      15_000
    )

    {:ok, timed, 0} = read.(a)
    assert {:ok, ^timed, 0} = read.(b)
    assert {:ok, ^timed, 0} = read.(c)
    times = Enum.map(timed, &elem(&1, 2))
    assert times == Enum.sort(times)
    assert length(Enum.uniq(times)) > 1

    {_, _, t} = Enum.at(timed, div(count, 2))
    first = Enum.find_value(timed, fn {seq, _, at} -> if at >= t, do: seq end)

    for n <- nodes do
      assert {:ok, [{^first, _} | _], 0} = Nodes.call(n, Ringbus, :read, ["t", {:time, t}, 1])

      assert {:ok, %{oldest_time: oldest, newest_time: newest}} =
               Nodes.call(n, Ringbus, :info, ["t"])

      assert {oldest, newest} == {hd(times), List.last(times)}
    end

    # max_age: the leader's timer expires them with no other command, and
    # every member counts the same.
    :ok =
      Nodes.call(b, Ringbus, :create, ["e", [replicas: 3, capacity: 100, max_age: 300]], 30_000)

    {:ok, 0} = Nodes.call(c, Ringbus, :push_many, ["e", ~w(a b c)])
    {:ok, 3} = Nodes.call(a, Ringbus, :push, ["e", "d"])

    expired? = fn n ->
      match?(
        {:ok, %{len: 0, expired: 4, pushed: 4, overwritten: 0}},
        Nodes.call(n, Ringbus, :info, ["e"])
      )
    end

    eventually(fn -> Enum.all?(nodes, expired?) end, 15_000)
    assert {:ok, [], 4} = Nodes.call(b, Ringbus, :read, ["e", 0, 10])
  end
end
