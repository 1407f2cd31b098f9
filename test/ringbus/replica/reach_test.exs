defmodule Ringbus.Replica.ReachTest do
  # A replicated channel from a node that is not one of its members: every
  # operation goes through the cluster links to a member, and its name is
  # taken on every node, also after a restart of every node.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.Peers
  import Peers, only: [eventually: 1]
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 180_000

  test "a non-member pushes, reads, pulls, subscribes and gets info and the incarnation; the name is taken everywhere" do
    nodes = Peers.start_joined(3, "replica_reach")
    [a | _] = nodes

    opts = [replicas: 2, capacity: 3, overflow: :reject]
    :ok = Nodes.call(a, Ringbus, :create, ["r", opts], 30_000)
    {:ok, %{members: members}} = Nodes.call(a, Ringbus, :info, ["r"])
    [x] = Enum.reject(nodes, &(&1.node in members))

    # The name resolves on the non-member as soon as create returns.
    assert Nodes.call(x, Ringbus.Cluster, :home, ["r"]) |> elem(0) == :ok
    assert Nodes.call(x, Ringbus, :channels, []) == []

    assert {:ok, 0} = Nodes.call(x, Ringbus, :push, ["r", "a"])
    assert {:ok, 1} = Nodes.call(x, Ringbus, :push_many, ["r", ["b", "c"]])
    # A certain error comes back as the member's answer.
    assert {:error, :full} = Nodes.call(x, Ringbus, :push, ["r", "d"])
    assert {:ok, 0, "a"} = Nodes.call(x, Ringbus, :pull, ["r"])
    assert {:ok, 3} = Nodes.call(x, Ringbus, :push, ["r", "d", [producer: {"p", 1}]])
    # A resend of the tag is answered with the first seq, and stores nothing.
    assert {:ok, 3} = Nodes.call(x, Ringbus, :push, ["r", "d", [producer: {"p", 1}]])

    # Every member applied what the non-member wrote.
    for n <- nodes -- [x] do
      eventually(fn ->
        Nodes.call(n, Ringbus, :read, ["r", 0, 10]) == {:ok, [{1, "b"}, {2, "c"}, {3, "d"}], 1}
      end)
    end

    assert {:ok, [{1, "b"}, {2, "c"}, {3, "d"}], 1} = Nodes.call(x, Ringbus, :read, ["r", 0, 10])
    assert 3 = Nodes.call(x, Ringbus, :len, ["r"])

    assert {:ok, %{replicas: 2, members: ^members, pushed: 4, pulled: 1, rejected: 1}} =
             Nodes.call(x, Ringbus, :info, ["r"])

    # The incarnation is the members' (drawn once at create), looked up and
    # checked at a member.
    {:ok, %{incarnation: inc}} = Nodes.call(hd(nodes -- [x]), Ringbus, :info, ["r"])
    assert {:ok, ^inc} = Nodes.call(x, Ringbus, :incarnation, ["r"])
    assert {:ok, %{incarnation: ^inc}} = Nodes.call(x, Ringbus, :info, ["r"])

    assert {:ok, [{1, "b"}], 1} = Nodes.call(x, Ringbus, :read, ["r", 0, 1, [incarnation: inc]])

    assert {:error, :new_incarnation} =
             Nodes.call(x, Ringbus, :read, ["r", 0, 1, [incarnation: inc + 1]])

    # A subscription from the non-member, homed on a member, acked back.
    {:ok, pid, {sub_pid, _}} =
      Nodes.call(x, Probe, :subscriber, [
        "r",
        [from: :earliest, max_credit: 2, max_batch: 2],
        true
      ])

    assert node(sub_pid) in members

    eventually(fn ->
      Nodes.call(x, Probe, :received, [pid]).batches
      |> Enum.flat_map(&elem(&1, 0)) == [{1, "b"}, {2, "c"}, {3, "d"}]
    end)

    # The name is taken on every node, for either kind of channel.
    for n <- nodes do
      assert {:error, :exists} = Nodes.call(n, Ringbus, :create, ["r", [capacity: 5]])

      assert {:error, :exists} =
               Nodes.call(n, Ringbus, :create, ["r", [replicas: 1, capacity: 5]])
    end

    # A delete from the non-member deletes every member's, and frees the name.
    assert :ok = Nodes.call(x, Ringbus, :delete, ["r"], 30_000)

    for n <- nodes do
      eventually(fn -> Nodes.call(n, Ringbus, :len, ["r"]) == {:error, :no_channel} end)
    end

    assert :ok = Nodes.call(x, Ringbus, :create, ["r", [capacity: 5]])
  end

  test "after every node is killed and started again, the members' syncs name the channel to all" do
    nodes = Peers.start_joined(3, "replica_resync")
    [a | _] = nodes

    :ok = Nodes.call(a, Ringbus, :create, ["s", [replicas: 2, capacity: 8]], 30_000)
    assert {:ok, 0} = Nodes.call(a, Ringbus, :push, ["s", "a"])
    {:ok, %{members: members}} = Nodes.call(a, Ringbus, :info, ["s"])

    # No directory keeps the name: only the members' catalogues do.
    for n <- nodes, do: Nodes.signal(n, :kill)
    nodes = Enum.map(nodes, &Nodes.restart/1)
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)

    for n <- nodes do
      eventually(fn -> Nodes.call(n, Ringbus, :read, ["s", 0, 10]) == {:ok, [{0, "a"}], 0} end)
      assert {:error, :exists} = Nodes.call(n, Ringbus, :create, ["s", [capacity: 5]])
      assert {:ok, %{members: ^members}} = Nodes.call(n, Ringbus, :info, ["s"])
    end
  end
end
