defmodule Ringbus.Cluster.GroupsTest do
  # Consumer groups (`Ringbus.Groups`) on two real nodes (`:peer`): a
  # channel homed on one, its group used from the other, where each call
  # is one request through the link, a fetch that waits waits at the home,
  # and a consumer whose process exits on the other node, or whose node
  # is killed, has its messages delivered again at once.

  # and a consumer whose process exits on the other node has its message
  # delivered again at once; the same over the binary protocol, through a
  # server on the node that is not the home.
  use ExUnit.Case, async: true

  import Ringbus.Test.Eventually

  alias Ringbus.Test.{Nodes, Peers}
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 60_000

  setup_all do
    [a, b] = Peers.start_joined(2, "cgroups", net_ticktime: 4, cluster: [call_timeout: 2_000])
    %{a: a, b: b}
  end

  test "a group used through another node: one round trip each, a fetch that waits at the home",
       %{a: a, b: b} do
    :ok = Nodes.call(a, Ringbus, :create, ["cg", [capacity: 100]])
    :ok = Nodes.call(b, Ringbus.Groups, :create, ["cg", "g", [from: :earliest]])

    before = calls(b, a.node)
    fetch = ["cg", "g", "c", 10, [timeout: 10_000]]
    waiting = Task.async(fn -> Nodes.call(b, Ringbus.Groups, :fetch, fetch, 15_000) end)

    # Pushed once the fetch waits at the home, in the waiters table.
    %{waiters: waiters} = Nodes.call(a, Ringbus.Test.Internals, :channel!, ["cg"])
    assert eventually(fn -> Nodes.call(a, :ets, :info, [waiters, :size]) > 0 end)
    {:ok, 0} = Nodes.call(a, Ringbus, :push, ["cg", "x"])
    assert Task.await(waiting, 15_000) == {:ok, [{0, "x", 1}]}
    assert calls(b, a.node) - before == 1

    assert Nodes.call(b, Ringbus.Groups, :ack, ["cg", "g", [0]]) == {:ok, 1}
    assert calls(b, a.node) - before == 2
    assert {:ok, [%{acked: 1, pending: 0}]} = Nodes.call(b, Ringbus.Groups, :info, ["cg"])
  end

  test "a consumer whose process exits on another node: its message is delivered again at once",
       %{a: a, b: b} do
    :ok = Nodes.call(a, Ringbus, :create, ["cg-exit", [capacity: 100]])
    :ok = Nodes.call(a, Ringbus.Groups, :create, ["cg-exit", "g", [from: :earliest]])
    {:ok, 0} = Nodes.call(a, Ringbus, :push, ["cg-exit", "job"])

    {pid, answer} = Nodes.call(b, Probe, :group_fetcher, ["cg-exit", "g", "w1", 1])
    assert answer == {:ok, [{0, "job", 1}]}
    assert Nodes.call(a, Ringbus.Groups, :fetch, ["cg-exit", "g", "w2", 1]) == {:ok, []}

    true = Nodes.call(b, Process, :exit, [pid, :kill])
    fetch = ["cg-exit", "g", "w2", 1, [timeout: 10_000]]
    assert Nodes.call(a, Ringbus.Groups, :fetch, fetch, 15_000) == {:ok, [{0, "job", 2}]}
  end

  test "a consumer whose whole node is killed (kill -9): its messages are delivered again at once, not after ack_wait" do
    [home, doomed] =
      Peers.start_joined(2, "cgdown", net_ticktime: 4, cluster: [call_timeout: 2_000])

    :ok = Nodes.call(home, Ringbus, :create, ["cg-down", [capacity: 100]])
    :ok = Nodes.call(home, Ringbus.Groups, :create, ["cg-down", "g", [from: :earliest]])
    {:ok, 0} = Nodes.call(home, Ringbus, :push_many, ["cg-down", ["a", "b"]])

    {_pid, answer} = Nodes.call(doomed, Probe, :group_fetcher, ["cg-down", "g", "w1", 2])
    assert answer == {:ok, [{0, "a", 1}, {1, "b", 1}]}
    assert Nodes.call(home, Ringbus.Groups, :fetch, ["cg-down", "g", "w2", 2]) == {:ok, []}

    waiting =
      Task.async(fn -> timed_fetch(home, ["cg-down", "g", "w2", 2, [timeout: 10_000]]) end)

    # Killed once that fetch waits at the home, in the waiters table.
    %{waiters: waiters} = Nodes.call(home, Ringbus.Test.Internals, :channel!, ["cg-down"])
    assert eventually(fn -> Nodes.call(home, :ets, :info, [waiters, :size]) > 0 end)
    :ok = Nodes.signal(doomed, :kill)
    {ms, answer} = Task.await(waiting, 15_000)
    # ack_wait is 30 s by default: the owner's node going, seen at the home,
    # made them due and woke the fetch.
    assert answer == {:ok, [{0, "a", 2}, {1, "b", 2}]}
    assert ms < 5_000

    assert {:ok, [%{pending: 2, redelivered: 2}]} =
             Nodes.call(home, Ringbus.Groups, :info, ["cg-down"])
  end

  defp timed_fetch(node, args) do
    {us, answer} = :timer.tc(fn -> Nodes.call(node, Ringbus.Groups, :fetch, args, 15_000) end)
    {div(us, 1000), answer}
  end

  test "a push subscription from another node: credit back by acks there; its exit frees its messages",
       %{a: a, b: b} do
    :ok = Nodes.call(a, Ringbus, :create, ["cg-push", [capacity: 100]])
    :ok = Nodes.call(a, Ringbus.Groups, :create, ["cg-push", "g", [from: :earliest]])
    {:ok, _} = Nodes.call(a, Ringbus, :push_many, ["cg-push", ["a", "b", "c"]])

    {pid, {:ok, _sub}} =
      Nodes.call(b, Probe, :group_subscriber, ["cg-push", "g", "w1", [max_credit: 2]])

    # At most its credit: a third message does not come within 200 ms.
    assert batches(b, pid, 3, 200) == [{0, "a"}, {1, "b"}]

    assert Nodes.call(b, Ringbus.Groups, :ack, ["cg-push", "g", [0]]) == {:ok, 1}
    assert batches(b, pid, 1) == [{2, "c"}]
    # Woken at the home by a push there, once it has credit.
    {:ok, 3} = Nodes.call(a, Ringbus, :push, ["cg-push", "d"])
    assert batches(b, pid, 1, 200) == []
    assert Nodes.call(b, Ringbus.Groups, :ack, ["cg-push", "g", [1, 2]]) == {:ok, 2}
    assert batches(b, pid, 1) == [{3, "d"}]

    assert Nodes.call(a, Ringbus.Groups, :fetch, ["cg-push", "g", "w2", 10]) == {:ok, []}
    true = Nodes.call(b, Process, :exit, [pid, :kill])
    fetch = ["cg-push", "g", "w2", 10, [timeout: 10_000]]
    assert Nodes.call(a, Ringbus.Groups, :fetch, fetch, 15_000) == {:ok, [{3, "d", 2}]}
  end

  defp batches(node, pid, count, wait \\ 5_000),
    do: Nodes.call(node, Probe, :group_batches, [pid, count, wait], wait + 5_000)

  test "over the binary protocol, through a node that is not the home: a fetch that waits, " <>
         "and the connection as its consumer's owner",
       %{a: a, b: b} do
    :ok = Nodes.call(a, Ringbus, :create, ["cg-wire", [capacity: 100]])
    port = Nodes.call(b, Probe, :start_server, [])
    c1 = Ringbus.Client.connect!(port: port)
    c2 = Ringbus.Client.connect!(port: port)
    :ok = Ringbus.Client.Groups.create(c1, "cg-wire", "g", from: :earliest, ack_wait: 60_000)

    fetch = fn c, consumer, wait ->
      Ringbus.Client.Groups.fetch(c, "cg-wire", "g", consumer, 1, timeout: wait)
    end

    waiting = Task.async(fn -> fetch.(c1, "w1", 10_000) end)
    %{waiters: waiters} = Nodes.call(a, Ringbus.Test.Internals, :channel!, ["cg-wire"])
    assert eventually(fn -> Nodes.call(a, :ets, :info, [waiters, :size]) > 0 end)
    {:ok, 0} = Nodes.call(a, Ringbus, :push, ["cg-wire", "x"])
    assert Task.await(waiting, 15_000) == {:ok, [{0, "x", 1}]}

    # c1's connection, on b, owns w1 at the home, a: the message is not due.
    assert fetch.(c2, "w2", 0) == {:ok, []}
    :ok = Ringbus.Client.close(c1)
    assert fetch.(c2, "w2", 10_000) == {:ok, [{0, "x", 2}]}
    Ringbus.Client.close(c2)
  end

  defp calls(from, to) do
    %{links: %{^to => link}} = Nodes.call(from, Ringbus.Cluster, :info, [])
    link.calls_ok + link.calls_refused + link.calls_timeout
  end
end
