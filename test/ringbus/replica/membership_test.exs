defmodule Ringbus.Replica.MembershipTest do
  # `Ringbus.add_replica/2` and `remove_replica/2` on real nodes (`:peer`):
  # a new member catches up by snapshot and log and serves reads from its
  # ring, a removed one no longer holds the channel, and the channel takes
  # pushes throughout.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.Peers
  import Peers, only: [eventually: 1]
  alias Ringbus.Test.ClusterProbe, as: Probe
  alias Ringbus.Test.Internals

  @moduletag timeout: 180_000

  test "a member added to a one-replica channel reads every message; removed, it holds none" do
    nodes = Peers.start_joined(3, "replica_members")
    [a, b, c] = nodes

    :ok = Nodes.call(a, Ringbus, :create, ["m", [replicas: 1, capacity: 16]], 30_000)
    :ok = Nodes.call(a, Ringbus, :create, ["plain", [capacity: 16]])

    # More entries than Ra's snapshot interval (4096), one at a time, and a
    # pull: the log is truncated behind a snapshot, so the new member needs
    # both.
    Nodes.call(a, Probe, :push_n, ["m", 5000, 8], 120_000)
    assert {:ok, 4984, _} = Nodes.call(a, Ringbus, :pull, ["m"])
    eventually(fn -> Nodes.call(a, Internals, :snapshot_index, ["m"]) > 0 end)

    pusher = pusher(a, "m", "one")
    assert :ok = Nodes.call(a, Ringbus, :add_replica, ["m", b.node], 60_000)
    acked = stop(pusher)
    assert acked != []

    assert {:ok, %{members: [a_node, b_node]}} = Nodes.call(a, Ringbus, :info, ["m"])
    assert {a_node, b_node} == {a.node, b.node}
    assert "m" in Nodes.call(b, Ringbus, :channels, [])

    # b applied every entry into its own ring: it reads what a reads.
    {:ok, held, lost} = Nodes.call(a, Ringbus, :read, ["m", 0, 100])
    assert length(held) == 16
    assert Enum.take(held, -min(16, length(acked))) == Enum.take(acked, -16)
    eventually(fn -> Nodes.call(b, Ringbus, :read, ["m", 0, 100]) == {:ok, held, lost} end)

    assert {:ok, %{members: [^a_node, ^b_node], role: :follower}} =
             Nodes.call(b, Ringbus, :info, ["m"])

    # Clear errors.
    assert {:error, :already_member} = Nodes.call(a, Ringbus, :add_replica, ["m", b.node])
    assert {:error, :not_member} = Nodes.call(a, Ringbus, :remove_replica, ["m", c.node])
    gone = :"gone@127.0.0.1"
    assert {:error, :node_down} = Nodes.call(a, Ringbus, :add_replica, ["m", gone])
    assert {:error, :not_replicated} = Nodes.call(a, Ringbus, :add_replica, ["plain", b.node])
    assert {:error, :not_replicated} = Nodes.call(c, Ringbus, :add_replica, ["plain", b.node])
    assert {:error, :no_channel} = Nodes.call(a, Ringbus, :add_replica, ["none", b.node])

    # b's catalogue keeps the membership: killed and started again, it is
    # a member with its messages, from its own log.
    Nodes.signal(b, :kill)
    b = Nodes.restart(b)
    on_exit(fn -> Nodes.stop([b]) end)

    eventually(fn ->
      match?({:ok, %{members: [^a_node, ^b_node]}}, Nodes.call(b, Ringbus, :info, ["m"])) and
        Nodes.call(b, Ringbus, :read, ["m", 0, 100]) == {:ok, held, lost}
    end)

    :ok = Nodes.await_links([a, b, c])

    # Removed, from a node that is no member: b holds nothing of it, and
    # reaches it through a like any other node.
    pusher = pusher(a, "m", "two")
    assert :ok = Nodes.call(c, Ringbus, :remove_replica, ["m", b.node], 60_000)
    assert {:error, :last_member} = Nodes.call(a, Ringbus, :remove_replica, ["m", a.node])
    acked = stop(pusher)
    assert acked != []

    assert Nodes.call(b, Ringbus, :channels, []) == []
    assert {:ok, %{members: [^a_node]}} = Nodes.call(a, Ringbus, :info, ["m"])
    {:ok, held, _lost} = Nodes.call(a, Ringbus, :read, ["m", 0, 100])
    assert Enum.take(held, -min(16, length(acked))) == Enum.take(acked, -16)
    assert {:ok, ^held, _} = Nodes.call(b, Ringbus, :read, ["m", 0, 100])

    eventually(fn ->
      match?({:ok, %{members: [^a_node]}}, Nodes.call(c, Ringbus, :info, ["m"]))
    end)
  end

  # Pushes from `n` under tags of `run` until stopped; each push is retried
  # under its tag while its outcome is unknown.
  defp pusher(n, name, run), do: Task.async(fn -> push_loop(n, name, run, 0, []) end)

  defp stop(task) do
    send(task.pid, :stop)
    Task.await(task, 60_000)
  end

  defp push_loop(n, name, run, i, acked) do
    receive do
      :stop -> Enum.reverse(acked)
    after
      0 ->
        payload = "#{run}-#{i}"
        {:ok, seq} = push(n, name, payload, {run, i})
        push_loop(n, name, run, i + 1, [{seq, payload} | acked])
    end
  end

  defp push(n, name, payload, tag) do
    case Nodes.call(n, Ringbus, :push, [name, payload, [producer: tag, timeout: 2000]]) do
      # Unknown, or not done for want of a leader: the tag makes either safe.
      {:error, reason} when reason in [:timeout, :node_busy] -> push(n, name, payload, tag)
      result -> result
    end
  end
end
