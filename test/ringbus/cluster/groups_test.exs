defmodule Ringbus.Cluster.GroupsTest do
  # Consumer groups (`Ringbus.Groups`) on two real nodes (`:peer`): a
  # channel homed on one, its group used from the other, where each call
  # is one request through the link, a fetch that waits waits at the home,
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
