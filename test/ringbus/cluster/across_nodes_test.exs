defmodule Ringbus.Cluster.AcrossNodesTest do
  # The Ringbus API on three real nodes (`:peer`), none of them this VM.
  # Generous timeouts: these tests check behaviour, the fault tests timing.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Nodes, Peers}
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 60_000

  setup_all do
    nodes = Peers.start_joined(3, "across", net_ticktime: 4, cluster: [call_timeout: 2_000])
    [a, b, c] = nodes
    %{a: a, b: b, c: c, nodes: nodes}
  end

  defp call(n, module, fun, args), do: Nodes.call(n, module, fun, args)

  test "every operation works on a channel of another node, with the same results", ctx do
    %{a: a, b: b, c: c} = ctx
    :ok = call(a, Ringbus, :create, ["ops", [capacity: 4]])

    for n <- [a, b, c], do: assert(call(n, Ringbus.Cluster, :home, ["ops"]) == {:ok, a.node})

    assert call(b, Ringbus, :push, ["ops", "one"]) == {:ok, 0}
    assert call(c, Ringbus, :push_many, ["ops", ["two", "three"]]) == {:ok, 1}
    assert call(c, Ringbus, :push_many, ["ops", []]) == {:ok, 3}

    assert call(b, Ringbus, :read, ["ops", 0, 10]) ==
             {:ok, [{0, "one"}, {1, "two"}, {2, "three"}], 0}

    assert call(c, Ringbus, :len, ["ops"]) == 3
    assert call(b, Ringbus, :pull, ["ops"]) == {:ok, 0, "one"}
    assert call(c, Ringbus, :push_many, ["ops", ["4", "5", "6"]]) == {:ok, 3}

    assert call(c, Ringbus, :read, ["ops", 0, 10]) ==
             {:ok, [{2, "three"}, {3, "4"}, {4, "5"}, {5, "6"}], 2}

    {:ok, local} = call(a, Ringbus, :info, ["ops"])
    assert call(b, Ringbus, :info, ["ops"]) == {:ok, local}
    assert %{pushed: 6, pulled: 1, overwritten: 1, len: 4} = local

    # Times are the home's: a read with times, and from a time, from another node.
    {:ok, timed, 2} = call(a, Ringbus, :read, ["ops", 0, 10, [times: true]])
    assert call(c, Ringbus, :read, ["ops", 0, 10, [times: true]]) == {:ok, timed, 2}
    {_, _, t} = List.last(timed)
    from_t = for {seq, p, at} <- timed, at >= t, do: {seq, p}
    assert call(b, Ringbus, :read, ["ops", {:time, t}, 10]) == {:ok, from_t, 0}
    assert %{newest_time: ^t} = local

    # Errors come back as they would locally.
    assert call(b, Ringbus, :create, ["ops", [capacity: 4]]) == {:error, :exists}
    assert call(b, Ringbus, :push, ["nowhere", "x"]) == {:error, :no_channel}
    assert call(c, Ringbus, :len, ["nowhere"]) == {:error, :no_channel}
    :ok = call(a, Ringbus, :create, ["full", [capacity: 1, overflow: :reject]])
    assert call(b, Ringbus, :push, ["full", "a"]) == {:ok, 0}
    assert call(c, Ringbus, :push, ["full", "b"]) == {:error, :full}
    assert call(c, Ringbus, :pull, ["full"]) == {:ok, 0, "a"}
    assert call(b, Ringbus, :pull, ["full"]) == :empty
    :ok = call(a, Ringbus, :create, ["bytes", [capacity: 10, max_bytes: 10]])

    assert call(b, Ringbus, :push_many, ["bytes", ["aaaa", "bbbb", "cccc"]]) ==
             {:error, :too_large}

    assert call(c, Ringbus, :read, ["bytes", 0, 10]) == {:ok, [], 0}

    # Deleted from another node than its home: gone everywhere.
    assert call(c, Ringbus, :delete, ["ops"]) == :ok
    assert call(b, Ringbus, :push, ["ops", "x"]) == {:error, :no_channel}
    assert call(a, Ringbus, :len, ["ops"]) == {:error, :no_channel}
    assert call(b, Ringbus, :delete, ["ops"]) == {:error, :no_channel}
  end

  test "create with node: homes the channel there, and every node resolves it", ctx do
    %{a: a, b: b, c: c} = ctx
    assert call(a, Ringbus, :create, ["placed", [capacity: 8, node: c.node]]) == :ok

    # Resolved on every node by the time create returned.
    for n <- [a, b, c], do: assert(call(n, Ringbus.Cluster, :home, ["placed"]) == {:ok, c.node})
    assert "placed" in call(c, Ringbus, :channels, [])
    refute "placed" in call(a, Ringbus, :channels, [])

    assert call(b, Ringbus, :create, ["placed", [capacity: 8, node: a.node]]) == {:error, :exists}

    assert call(b, Ringbus, :create, ["elsewhere", [capacity: 8, node: :"nobody@127.0.0.1"]]) ==
             {:error, :node_down}

    assert_raise ArgumentError, ~r/expected :node to be a node name/, fn ->
      call(a, Ringbus, :create, ["bad", [capacity: 8, node: "c"]])
    end
  end

  test "concurrent creates of one name on two nodes: one winner, :exists for the other", ctx do
    %{a: a, b: b, c: c} = ctx
    names = for i <- 1..40, do: "race-#{i}"

    [on_b, on_c] =
      for n <- [b, c] do
        Task.async(fn -> call(n, Probe, :create_all, [names, [capacity: 2]]) end)
      end
      |> Task.await_many(30_000)

    for {{name, from_b}, {name, from_c}} <- Enum.zip(on_b, on_c) do
      assert Enum.sort([from_b, from_c]) == [:ok, {:error, :exists}],
             inspect({name, from_b, from_c})

      winner = if from_b == :ok, do: b.node, else: c.node
      for n <- [a, b, c], do: assert(call(n, Ringbus.Cluster, :home, [name]) == {:ok, winner})
    end
  end

  test "a producer's order is kept across the wire", ctx do
    %{a: a, b: b} = ctx
    :ok = call(a, Ringbus, :create, ["order", [capacity: 10_000]])

    results = call(b, Probe, :push_n, ["order", 2_000, 8])
    assert Enum.map(results, fn {:ok, seq} -> seq end) == Enum.to_list(0..1_999)

    {:ok, messages, 0} = call(a, Ringbus, :read, ["order", 0, 2_000])
    assert Enum.map(messages, fn {_seq, <<i::32, _::binary>>} -> i end) == Enum.to_list(1..2_000)
  end

  test "a remote subscription gets batches within its credit, and an exact lost", ctx do
    %{a: a, b: b} = ctx
    :ok = call(a, Ringbus, :create, ["sub", [capacity: 8]])

    {:ok, pid, {sub_pid, _} = sub} =
      call(b, Probe, :subscriber, ["sub", [from: :earliest, max_credit: 5, max_batch: 5], false])

    assert node(sub_pid) == a.node

    # Five messages fill the credit; the next fifteen wait in the ring, of
    # which it keeps the last eight.
    call(a, Probe, :push_n, ["sub", 5, 4])
    assert await_received(b, pid, 5)
    call(a, Probe, :push_n, ["sub", 15, 4])

    assert call(b, Probe, :received, [pid]).batches |> Enum.flat_map(&elem(&1, 0)) |> length() ==
             5

    assert call(b, Probe, :ack, [pid, 5]) == :ok
    assert await_received(b, pid, 10)
    assert call(b, Probe, :ack, [pid, 5]) == :ok
    assert await_received(b, pid, 13)

    %{batches: batches} = call(b, Probe, :received, [pid])
    seqs = batches |> Enum.flat_map(&elem(&1, 0)) |> Enum.map(&elem(&1, 0))
    lost = batches |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    # 0..4, then 7 overwritten (5..11), then 12..19.
    assert seqs == Enum.to_list(0..4) ++ Enum.to_list(12..19)
    assert lost == 7
    assert length(seqs) + lost == 20

    # Unsubscribed: the subscription ends at its home, and nothing more comes.
    assert call(b, Probe, :unsubscribe, [pid]) == :ok
    assert eventually(fn -> not call(a, Process, :alive?, [sub_pid]) end)
    call(a, Probe, :push_n, ["sub", 3, 4])

    assert call(b, Probe, :received, [pid]).batches |> Enum.flat_map(&elem(&1, 0)) |> length() ==
             13

    assert call(b, Ringbus, :unsubscribe, [sub]) == {:error, :no_subscription}
    send_stop(b, pid)
  end

  test "an unsubscribe answered node_busy was not carried out: the subscription goes on", ctx do
    %{a: a, b: b} = ctx
    :ok = call(a, Ringbus, :create, ["unsub-busy", [capacity: 10]])
    {:ok, pid, _sub} = call(b, Probe, :subscriber, ["unsub-busy", [], true])

    # b's link to a takes nothing for longer than call_timeout (2 s here).
    [{_, link, _, _, _}] = call(b, :ets, :lookup, [:ringbus_cluster_links, a.node])
    :ok = call(b, :sys, :suspend, [link])
    assert call(b, Probe, :unsubscribe, [pid]) == {:error, :node_busy}
    :ok = call(b, :sys, :resume, [link])

    # The link dropped the request it took too late: batches still come.
    {:ok, 0} = call(a, Ringbus, :push, ["unsub-busy", "after"])

    assert eventually(fn ->
             match?(%{batches: [{[{0, "after"}], 0}]}, call(b, Probe, :received, [pid]))
           end)

    assert call(b, Probe, :unsubscribe, [pid]) == :ok
    send_stop(b, pid)
  end

  test "subscriptions/2 surveys a channel of another node at its home", ctx do
    %{a: a, b: b, c: c} = ctx
    :ok = call(a, Ringbus, :create, ["surveyed", [capacity: 10]])
    {:ok, on_b, _} = call(b, Probe, :subscriber, ["surveyed", [from: :earliest], false])
    {:ok, on_c, _} = call(c, Probe, :subscriber, ["surveyed", [max_credit: 7], false])
    {:ok, 0} = call(a, Ringbus, :push, ["surveyed", "x"])
    assert await_received(b, on_b, 1) and await_received(c, on_c, 1)

    # Each has sent "x" and holds the rest of its credit.
    for n <- [a, b, c] do
      assert {:ok, figures} = call(n, Ringbus, :subscriptions, ["surveyed", [timeout: 1_000]])
      assert figures |> Enum.map(&{&1.cursor, &1.credit}) |> Enum.sort() == [{1, 6}, {1, 999}]
      assert Enum.all?(figures, &(node(&1.subscription) == a.node))
    end

    assert call(b, Ringbus, :subscriptions, ["never-created"]) == {:error, :no_channel}
    send_stop(b, on_b)
    send_stop(c, on_c)
  end

  test "Cluster.channels/0 lists every node's channels with their home, on every node", ctx do
    %{a: a, b: b, c: c} = ctx
    :ok = call(a, Ringbus, :create, ["listed-a", [capacity: 4]])
    :ok = call(a, Ringbus, :create, ["listed-c", [capacity: 4, node: c.node]])
    expected = %{"listed-a" => a.node, "listed-c" => c.node}

    for n <- [a, b, c] do
      listed = call(n, Ringbus.Cluster, :channels, [])
      assert Map.take(listed, Map.keys(expected)) == expected
    end

    # Ringbus.channels/0 is this node's own.
    assert "listed-a" in call(a, Ringbus, :channels, [])
    refute "listed-a" in call(b, Ringbus, :channels, [])
  end

  test "remote subscribers learn of a delete; a subscriber's exit ends its subscription", ctx do
    %{a: a, b: b, c: c} = ctx
    :ok = call(c, Ringbus, :create, ["closing", [capacity: 8]])
    {:ok, pid, sub} = call(b, Probe, :subscriber, ["closing", [], true])
    {:ok, gone, {gone_sub_pid, _}} = call(a, Probe, :subscriber, ["closing", [], true])

    call(c, Probe, :push_n, ["closing", 3, 4])
    assert await_received(b, pid, 3)

    send_stop(a, gone)
    assert eventually(fn -> not call(c, Process, :alive?, [gone_sub_pid]) end)

    assert call(a, Ringbus, :delete, ["closing"]) == :ok
    assert eventually(fn -> call(b, Probe, :received, [pid]).closed == :channel_deleted end)
    assert call(b, Ringbus, :ack, [sub, 1]) == :ok
    send_stop(b, pid)
  end

  test "a TCP client connected to any node reaches every channel", ctx do
    %{a: a, b: b, c: c} = ctx
    :ok = call(a, Ringbus, :create, ["tcp-a", [capacity: 100]])
    :ok = call(c, Ringbus, :create, ["tcp-c", [capacity: 100]])
    port = call(b, Probe, :start_server, [])

    {:ok, client} = Ringbus.Client.connect(port: port)
    assert Ringbus.Client.push(client, "tcp-a", "via b") == {:ok, 0}
    assert Ringbus.Client.push_many(client, "tcp-c", ["x", "y"]) == {:ok, 0}
    :ok = call(c, Ringbus, :create, ["tcp-bytes", [capacity: 10, max_bytes: 10]])

    assert Ringbus.Client.push_many(client, "tcp-bytes", ["aaaa", "bbbb", "cccc"]) ==
             {:error, :too_large}

    assert call(c, Ringbus, :info, ["tcp-bytes"]) |> elem(1) |> Map.take([:pushed, :rejected]) ==
             %{pushed: 0, rejected: 3}

    assert Ringbus.Client.read(client, "tcp-c", 0, 10) == {:ok, [{0, "x"}, {1, "y"}], 0}
    # The incarnation is the home's, looked up and checked there.
    {:ok, %{incarnation: inc}} = call(c, Ringbus, :info, ["tcp-c"])
    assert call(b, Ringbus, :incarnation, ["tcp-c"]) == {:ok, inc}

    assert Ringbus.Client.read(client, "tcp-c", 1, 10, incarnation: :any) ==
             {:ok, [{1, "y"}], 0, inc}

    other = if inc == 1, do: 2, else: 1

    assert Ringbus.Client.read(client, "tcp-c", 1, 10, incarnation: other) ==
             {:error, :new_incarnation}

    assert Ringbus.Client.len(client, "tcp-a") == {:ok, 1}
    assert call(a, Ringbus, :read, ["tcp-a", 0, 1]) == {:ok, [{0, "via b"}], 0}

    {:ok, sub} = Ringbus.Client.subscribe(client, "tcp-c", from: :earliest)
    assert_receive {:ringbus, ^sub, [{0, "x"}, {1, "y"}], 0}, 5_000
    call(c, Ringbus, :push, ["tcp-c", "z"])
    assert_receive {:ringbus, ^sub, [{2, "z"}], 0}, 5_000

    # Created through b, by CREATE or by a first push: homed on b.
    assert Ringbus.Client.create(client, "tcp-b", capacity: 10) == :ok
    assert call(a, Ringbus.Cluster, :home, ["tcp-b"]) == {:ok, b.node}
    assert Ringbus.Client.push(client, "tcp-new", "first") == {:ok, 0}
    assert call(c, Ringbus.Cluster, :home, ["tcp-new"]) == {:ok, b.node}
    Ringbus.Client.close(client)
  end

  test "cluster_info shows the members and each link's figures", ctx do
    %{a: a, b: b, c: c} = ctx
    info = call(a, Ringbus, :cluster_info, [])

    assert info.node == a.node
    assert Enum.sort(info.members) == Enum.sort([a.node, b.node, c.node])
    assert hd(info.members) == a.node

    for n <- [b.node, c.node] do
      assert %{state: :up, queued_bytes: q, batches: batches, drops: 0, suspensions: 0} =
               info.links[n]

      assert is_integer(q) and batches > 0
    end

    # The calls a makes to c's channels count at a, by outcome.
    :ok = call(c, Ringbus, :create, ["info-counted", [capacity: 4]])
    before = call(a, Ringbus, :cluster_info, []).links[c.node]
    assert call(a, Ringbus, :push, ["info-counted", "x"]) == {:ok, 0}
    assert call(a, Ringbus, :len, ["info-counted"]) == 1
    after_calls = call(a, Ringbus, :cluster_info, []).links[c.node]
    assert after_calls.calls_ok == before.calls_ok + 2
    assert after_calls.calls_refused == before.calls_refused
    assert after_calls.calls_timeout == before.calls_timeout
  end

  defp await_received(node, pid, count) do
    eventually(fn ->
      call(node, Probe, :received, [pid]).batches |> Enum.flat_map(&elem(&1, 0)) |> length() >=
        count
    end)
  end

  defp eventually(check),
    do: Nodes.wait_until(System.monotonic_time(:millisecond) + 10_000, check) == :ok

  defp send_stop(node, pid), do: call(node, Kernel, :send, [pid, :stop])
end
