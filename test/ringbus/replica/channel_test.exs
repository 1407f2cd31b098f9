defmodule Ringbus.Replica.ChannelTest do
  # A replicated channel through the public API: `Ringbus.create(name,
  # replicas: 1, ...)` on this node, writes through Ra, reads on the ring,
  # producer tags, and a restart of the replica layer that rebuilds the
  # ring from the log. (The restart test stops this node's Ra system:
  # nothing else may use it meanwhile, hence async: false.)
  use ExUnit.Case, async: false

  alias Ringbus.Test.Internals

  setup do
    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, "replica_ch_"),
          do: Ringbus.delete(name)
    end)
  end

  defp unique, do: "replica_ch_#{System.unique_integer([:positive])}"

  test "pushes, batches and pulls go through Ra; reads, len and info read the ring" do
    name = unique()
    assert :ok = Ringbus.create(name, replicas: 1, capacity: 3)
    assert {:error, :exists} = Ringbus.create(name, replicas: 1, capacity: 3)

    assert {:ok, 0} = Ringbus.push(name, "a")
    assert {:ok, 1} = Ringbus.push_many(name, ["b", "c", "d"])
    assert {:ok, [{1, "b"}, {2, "c"}, {3, "d"}], 1} = Ringbus.read(name, 0, 10)
    assert {:ok, 1, "b"} = Ringbus.pull(name)
    assert 2 = Ringbus.len(name)

    {:ok, info} = Ringbus.info(name)

    assert %{replicas: 1, members: [node], role: :leader, leader: node, pushed: 4, pulled: 1} =
             info

    assert node == node()
    assert Map.has_key?(info, :term) and Map.has_key?(info, :commit_index)
    assert Map.has_key?(info, :applied_index)

    # The ring takes writes only from the machine: its handle says so.
    assert %{replica: %{members: [_]}} = Internals.channel!(name)
  end

  test "deletes go through Ra as one command: reads skip them, pulls pass them, info counts them" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 10)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c d e))

    assert {:ok, 2} = Ringbus.delete_messages(name, [1, 3, 3, 42])
    assert {:ok, 0} = Ringbus.delete_messages(name, [1])
    assert {:ok, [{0, "a"}, {2, "c"}, {4, "e"}], 0} = Ringbus.read(name, 0, 10)
    assert {:ok, %{deleted: 2, len: 3, pushed: 5}} = Ringbus.info(name)

    assert {:ok, 0, "a"} = Ringbus.pull(name)
    assert {:ok, 2, "c"} = Ringbus.pull(name)
    {:ok, i} = Ringbus.info(name)
    assert %{deleted: 2, pulled: 2, len: 1, overwritten: 0} = i
    assert i.pushed == i.pulled + i.overwritten + i.expired + i.deleted + i.len
  end

  # A trim is one operation where the channel lives: on a replicated
  # channel one command through Ra, however many messages it removes.
  test "XTRIM and XADD MAXLEN over RESP are one Raft entry each, however many entries they remove" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 1_000)
    {:ok, 0} = Ringbus.push_many(name, for(i <- 1..300, do: "m#{i}"))
    port = Ringbus.Test.ClusterProbe.start_resp_server()
    client = Ringbus.Test.RespClient.connect!(port)
    server = Internals.channel!(name).replica.server

    before = last_index(server)
    {[250], client} = Ringbus.Test.RespClient.call(client, ["XTRIM", name, "MAXLEN", "50"])
    assert last_index(server) - before == 1
    assert {:ok, %{len: 50, pulled: 250, first_seq: 250}} = Ringbus.info(name)

    # The push and its trim: two entries, not one per entry trimmed.
    before = last_index(server)

    {[id], client} =
      Ringbus.Test.RespClient.call(client, ["XADD", name, "MAXLEN", "=", "10", "*", "f", "v"])

    assert is_binary(id)
    assert last_index(server) - before == 2
    assert {:ok, %{len: 10, pulled: 291, next_seq: 301}} = Ringbus.info(name)
    Ringbus.Test.RespClient.close(client)
  end

  # The index of the last entry this member applied (a lone member applies
  # each before it answers).
  defp last_index(server) do
    {:ok, {{index, _term}, :ok}, _leader} = :ra.local_query(server, fn _ -> :ok end)
    index
  end

  test "a reject channel refuses what does not fit, as a local one does" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 2, overflow: :reject, max_bytes: 4)
    assert {:ok, 0} = Ringbus.push(name, "ab")
    assert {:error, :too_large} = Ringbus.push(name, "abcde")
    assert {:error, :full} = Ringbus.push_many(name, ["cd", "e"])
    assert {:ok, 1} = Ringbus.push(name, "cd")
    assert {:ok, 0, "ab"} = Ringbus.pull(name)
    assert {:ok, 1, "cd"} = Ringbus.pull(name)
    assert :empty = Ringbus.pull(name)
    assert {:ok, %{rejected: 3, len: 0}} = Ringbus.info(name)
  end

  test "a push under a producer tag stored already is answered as then, and stores nothing" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 10)
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert {:ok, 1} = Ringbus.push(name, ["b", "c"], producer: {"p", 2})
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert {:ok, 1} = Ringbus.push(name, ["b", "c"], producer: {"p", 2}, timeout: 1000)
    assert {:ok, 3} = Ringbus.push(name, "d", producer: {"q", 1})
    assert 4 = Ringbus.len(name)
  end

  test "options are checked" do
    name = unique()
    :ok = Ringbus.create(name, capacity: 10)

    # A memory channel takes producer tags too (Ringbus.Channel.ProducersTest).
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert_raise ArgumentError, ~r/:producer/, fn -> Ringbus.push(name, "a", producer: :me) end

    assert {:ok, 1} = Ringbus.push(name, "a", [])
    assert {:error, :no_channel} = Ringbus.push(unique(), "a", producer: {"p", 1})

    assert_raise ArgumentError, ~r/:replicas/, fn -> Ringbus.create(unique(), replicas: 0) end

    assert_raise ArgumentError, ~r/:node or :replicas/, fn ->
      Ringbus.create(unique(), replicas: 1, node: node(), capacity: 1)
    end

    assert_raise ArgumentError, ~r/:capacity/, fn -> Ringbus.create(unique(), replicas: 1) end

    replicated = unique()
    :ok = Ringbus.create(replicated, replicas: 1, capacity: 1)

    assert_raise ArgumentError, ~r/:producer/, fn ->
      Ringbus.push(replicated, "a", producer: :me)
    end

    # More replicas than nodes: no member is created.
    assert {:error, :node_down} = Ringbus.create(unique(), replicas: 2, capacity: 1)
  end

  test "concurrent pushes each get their own seq, and every acked message is stored" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 10_000)

    seqs =
      1..20
      |> Task.async_stream(
        fn p -> for i <- 1..25, do: {Ringbus.push(name, "#{p}-#{i}"), "#{p}-#{i}"} end,
        max_concurrency: 20,
        # Each push waits for an fsync: on a loaded machine 25 of them in a
        # row may take longer than the stream's default 5 s.
        timeout: 60_000
      )
      |> Enum.flat_map(fn {:ok, results} -> results end)

    assert Enum.all?(seqs, &match?({{:ok, _}, _}, &1))
    by_seq = Map.new(seqs, fn {{:ok, seq}, payload} -> {seq, payload} end)
    assert map_size(by_seq) == 500
    assert {:ok, messages, 0} = Ringbus.read(name, 0, 1000)
    assert Map.new(messages) == by_seq
  end

  test "a deleted channel's server and data go with it; the name can be created again" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 10)
    {:ok, 0} = Ringbus.push(name, "a")
    %{replica: %{server: server}} = Internals.channel!(name)
    assert is_pid(Process.whereis(elem(server, 0)))

    assert :ok = Ringbus.delete(name)
    assert {:error, :no_channel} = Ringbus.push(name, "b")
    assert Process.whereis(elem(server, 0)) == nil

    :ok = Ringbus.create(name, replicas: 1, capacity: 10)
    assert {:ok, [], 0} = Ringbus.read(name, 0, 10)
    assert {:ok, 0} = Ringbus.push(name, "c")
  end

  test "a restart of the replica layer, its ring lost, brings the channel back from its log" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 3)
    {:ok, 0} = Ringbus.push_many(name, ["a", "b", "c", "d"])
    {:ok, 1, "b"} = Ringbus.pull(name)
    {:ok, 4} = Ringbus.push(name, "e", producer: {"p", 1})

    # Ra's server and system stop, and the ring is lost, as on a restart.
    :ok = Supervisor.terminate_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)
    :ok = Ringbus.Store.delete(name)
    assert {:error, :no_channel} = Ringbus.read(name, 0, 10)
    {:ok, _} = Supervisor.restart_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)

    assert {:ok, [{2, "c"}, {3, "d"}, {4, "e"}], 2} = Ringbus.read(name, 0, 10)
    assert {:ok, %{pushed: 5, pulled: 1, replicas: 1}} = Ringbus.info(name)
    # The machine's dedup state came back too, and writes go on.
    assert {:ok, 4} = Ringbus.push(name, "e", producer: {"p", 1})
    assert {:ok, 5} = Ringbus.push(name, "f")
    # The capacity is 3: "f" overwrote "c".
    assert {:ok, 3, "d"} = Ringbus.pull(name)
  end
end
