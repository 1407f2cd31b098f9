defmodule Ringbus.Replica.NodesTest do
  # Replicated channels on real nodes (`:peer`): one that comes back after
  # its node is killed (kill -9) and started again on the same data dir,
  # and one of three replicas that keeps every acked message when its
  # leader's node is killed.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.Peers
  import Peers, only: [eventually: 1]

  @moduletag timeout: 180_000

  test "a node with no replicated channel runs no Raft system and touches no data dir" do
    [n] = Nodes.start(1, "replica_lazy")
    on_exit(fn -> Nodes.stop([n]) end)

    :ok = Nodes.call(n, Ringbus, :create, ["plain", [capacity: 10]])
    assert {:ok, 0} = Nodes.call(n, Ringbus, :push, ["plain", "a"])
    refute File.exists?(n.data_dir)
    assert Nodes.call(n, Process, :whereis, [:ra_ringbus_log_wal]) == nil

    # The first replicated channel starts it.
    :ok = Nodes.call(n, Ringbus, :create, ["durable", [replicas: 1, capacity: 10]])
    assert {:ok, 0} = Nodes.call(n, Ringbus, :push, ["durable", "b"])
    assert File.dir?(n.data_dir)
    assert is_pid(Nodes.call(n, Process, :whereis, [:ra_ringbus_log_wal]))
  end

  test "a durable channel comes back with its messages after its node is killed" do
    [n] = Nodes.start(1, "replica_restart")
    on_exit(fn -> Nodes.stop([n]) end)

    :ok = Nodes.call(n, Ringbus, :create, ["orders", [replicas: 1, capacity: 100]])
    assert {:ok, 0} = Nodes.call(n, Ringbus, :push_many, ["orders", ["a", "b", "c"]])
    assert {:ok, 0, "a"} = Nodes.call(n, Ringbus, :pull, ["orders"])
    assert {:ok, 3} = Nodes.call(n, Ringbus, :push, ["orders", "d", [producer: {"p", 1}]])
    {:ok, %{incarnation: incarnation}} = Nodes.call(n, Ringbus, :info, ["orders"])

    # Every push above was acked: the node dies with no chance to flush.
    Nodes.signal(n, :kill)
    n = Nodes.restart(n)
    on_exit(fn -> Nodes.stop([n]) end)

    # The ring is back at once and fills as Ra replays the log into it.
    eventually(fn ->
      Nodes.call(n, Ringbus, :read, ["orders", 0, 10]) ==
        {:ok, [{1, "b"}, {2, "c"}, {3, "d"}], 1}
    end)

    # Its log survived, so it is the same creation: resuming consumers go on.
    assert {:ok, %{replicas: 1, pulled: 1, incarnation: ^incarnation}} =
             Nodes.call(n, Ringbus, :info, ["orders"])

    assert {:ok, [{3, "d"}], 0} =
             Nodes.call(n, Ringbus, :read, ["orders", 3, 10, [incarnation: incarnation]])

    assert {:ok, 3} = Nodes.call(n, Ringbus, :push, ["orders", "d", [producer: {"p", 1}]])
    assert {:ok, 4} = Nodes.call(n, Ringbus, :push, ["orders", "e"])
  end

  test "three replicas: pushes from any node, reads on each, and a new leader after a kill" do
    nodes = Peers.start_joined(3, "replica_three")
    [a | _] = nodes

    :ok = Nodes.call(a, Ringbus, :create, ["r3", [replicas: 3, capacity: 1000]], 30_000)
    {:ok, info} = Nodes.call(a, Ringbus, :info, ["r3"])
    # The creating node first, then the others in its Node.list/0 order.
    assert info.members == [a.node | Nodes.call(a, Node, :list, [])]
    assert Enum.sort(info.members) == Enum.sort(Enum.map(nodes, & &1.node))

    # Pushes from every node, each with its producer's tags.
    for {n, i} <- Enum.with_index(nodes),
        do: assert({:ok, _} = push(n, "r3", {n.node, 1}, "before-#{i}"))

    for n <- nodes do
      eventually(fn -> Nodes.call(n, Ringbus, :len, ["r3"]) == 3 end)
      assert {:ok, %{replicas: 3, role: role}} = Nodes.call(n, Ringbus, :info, ["r3"])
      assert role in [:leader, :follower]
    end

    # The leader's node dies; a producer on another node retries each push
    # under its tag until it is acked.
    leader =
      Enum.find(nodes, &match?({:ok, %{role: :leader}}, Nodes.call(&1, Ringbus, :info, ["r3"])))

    assert leader
    Nodes.signal(leader, :kill)
    [p, q] = survivors = nodes -- [leader]

    acked =
      for i <- 2..21 do
        assert {:ok, _} = push(p, "r3", {p.node, i}, "after-#{i}")
        "after-#{i}"
      end

    assert {:ok, %{role: :leader}} =
             Enum.find_value(survivors, fn n ->
               info = Nodes.call(n, Ringbus, :info, ["r3"])
               if match?({:ok, %{role: :leader}}, info), do: info
             end) || :no_leader

    # Every acked message is on each survivor, once.
    expected = Enum.sort(["before-0", "before-1", "before-2"] ++ acked)

    for n <- [p, q] do
      eventually(fn -> payloads(n, "r3") == expected end)
    end
  end

  # Pushes under `tag` until acked: a timeout is an unknown outcome, which
  # the tag makes safe to try again; `node_busy` (no leader took it in
  # time) was not done.
  defp push(n, name, tag, payload, deadline \\ nil) do
    deadline = deadline || System.monotonic_time(:millisecond) + 30_000

    case Nodes.call(n, Ringbus, :push, [name, payload, [producer: tag, timeout: 1000]]) do
      {:error, reason} = timeout when reason in [:timeout, :node_busy] ->
        if System.monotonic_time(:millisecond) < deadline,
          do: push(n, name, tag, payload, deadline),
          else: timeout

      result ->
        result
    end
  end

  defp payloads(n, name) do
    {:ok, messages, _lost} = Nodes.call(n, Ringbus, :read, [name, 0, 1000])
    messages |> Enum.map(&elem(&1, 1)) |> Enum.sort()
  end
end
