defmodule Ringbus.Replica.GroupsTest do
  # Consumer groups of a replicated channel live in its Raft log: every
  # group request is a command each member applies to its own table, so
  # the groups come back from the log after a restart, every member holds
  # the same ones, and a new leader carries on where the old one stood.
  use ExUnit.Case, async: false

  alias Ringbus.Groups
  alias Ringbus.Test.Internals

  @moduletag timeout: 300_000

  setup do
    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, "replica_groups_"),
          do: Ringbus.delete(name)
    end)
  end

  defp unique, do: "replica_groups_#{System.unique_integer([:positive])}"

  test "group requests are commands of the channel's log, many in one" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 100)
    server = Internals.channel!(name).replica.server
    {:ok, 0} = Ringbus.push_many(name, ["a", "b", "c"])

    before = last_index(server)
    :ok = Groups.create(name, "g", from: :earliest)
    assert {:ok, [{0, "a", 1}, {1, "b", 1}]} = Groups.fetch(name, "g", "c1", 2)
    assert last_index(server) - before == 2

    # Concurrent acks, each answered for its own seq (how the writer groups
    # them: `Ringbus.Replica.CommandsTest`).
    tasks = for seq <- [0, 1], do: Task.async(fn -> Groups.ack(name, "g", [seq]) end)
    assert Enum.map(tasks, &Task.await/1) == [{:ok, 1}, {:ok, 1}]
    assert {:ok, [%{name: "g", pending: 0, acked: 2}]} = Groups.info(name)
  end

  test "an ack_fetch is one command of the log: the acks, then the fetch" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 100)
    server = Internals.channel!(name).replica.server
    {:ok, 0} = Ringbus.push_many(name, ["a", "b", "c"])
    :ok = Groups.create(name, "g", from: :earliest)
    assert {:ok, [{0, "a", 1}, {1, "b", 1}]} = Groups.fetch(name, "g", "c1", 2)

    before = last_index(server)
    # Counted as ack/3 counts: 7 is not pending.
    assert {:ok, 2, [{2, "c", 1}]} = Groups.ack_fetch(name, "g", "c1", [0, 1, 7], 10)
    assert last_index(server) - before == 1
    assert %{pending: 1, acked: 2} = figures(name)

    # One that waits: its acks are done before the wait, its answer is the
    # push that ends it.
    waiting = Task.async(fn -> Groups.ack_fetch(name, "g", "c1", [2], 10, timeout: 10_000) end)
    Ringbus.Test.Peers.eventually(fn -> figures(name).acked == 3 end, 5_000)
    {:ok, 3} = Ringbus.push(name, "d")
    assert Task.await(waiting, 5_000) == {:ok, 1, [{3, "d", 1}]}
    # Nothing acked comes again.
    assert Groups.nack(name, "g", [0, 1, 2, 3]) == {:ok, 1}
    assert Groups.fetch(name, "g", "c2", 10) == {:ok, [{3, "d", 2}]}
  end

  test "a restart of the replica layer, its ring and groups lost, brings the groups back from the log" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 8)
    {:ok, 0} = Ringbus.push_many(name, for(i <- 0..9, do: "m#{i}"))
    :ok = Groups.create(name, "g", from: :earliest, ack_wait: 60_000)
    assert {:ok, [{2, "m2", 1}, {3, "m3", 1}, {4, "m4", 1}]} = Groups.fetch(name, "g", "c1", 3)
    assert {:ok, 1} = Groups.ack(name, "g", [3])
    # Enough pushes that the log is released past the group's commands:
    # the groups come back from a snapshot, not only from the entries.
    for i <- 10..4_299, do: {:ok, _} = Ringbus.push(name, "m#{i}")
    server = Internals.channel!(name).replica.server
    # Ra's figures, as of its last tick: a snapshot was taken.
    Ringbus.Test.Peers.eventually(fn -> snapshot_index(server) > 10 end, 5_000)
    before = figures(name)
    assert %{pending: 2, acked: 1, delivered: 4} = before

    :ok = Supervisor.terminate_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)
    :ok = Ringbus.Store.delete(name)
    {:ok, _} = Supervisor.restart_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)

    assert figures(name) == before
    # The pending entries are those of before (3 was acked).
    assert {:ok, 0} = Groups.ack(name, "g", [3])
    assert {:ok, 2} = Groups.ack(name, "g", [2, 4])
  end

  test "a group reading behind the newest messages comes back from a snapshot as it was" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 100)
    :ok = Groups.create(name, "g", from: :earliest, ack_wait: 600_000)
    {:ok, 0} = Ringbus.push_many(name, for(i <- 0..49, do: "m#{i}"))

    # A consumer 50 messages behind, one pending at a time: every fetch
    # reads a message stored 50 pushes before, so fetches after a snapshot
    # read messages stored before it.
    # Three entries each: past the 4,096 entries a snapshot waits for.
    for i <- 50..1_500 do
      {:ok, [{seq, _, 1}]} = Groups.fetch(name, "g", "w", 1)
      if seq > 0, do: {:ok, 1} = Groups.ack(name, "g", [seq - 1])
      {:ok, ^i} = Ringbus.push(name, "m#{i}")
    end

    server = Internals.channel!(name).replica.server
    Ringbus.Test.Peers.eventually(fn -> snapshot_index(server) > 4_096 end, 5_000)
    before = {figures(name), Ringbus.read(name, 0, 200)}
    assert {%{pending: 1, lost: 0}, _} = before

    :ok = Supervisor.terminate_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)
    :ok = Ringbus.Store.delete(name)
    {:ok, _} = Supervisor.restart_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)

    assert {figures(name), Ringbus.read(name, 0, 200)} == before
    # The one pending entry is the one the consumer had, and the next
    # fetch goes on from where it stood.
    {:ok, [{next, "m" <> _, 1}]} = Groups.fetch(name, "g", "w", 1)
    assert {:ok, 1} = Groups.ack(name, "g", [next - 1])
  end

  test "a holding group keeps a replicated reject channel's messages until it acked them, across a restart" do
    name = unique()
    :ok = Ringbus.create(name, replicas: 1, capacity: 2, overflow: :reject)
    :ok = Groups.create(name, "workers", from: :earliest, hold: true)
    {:ok, 0} = Ringbus.push_many(name, ["t0", "t1"])
    assert {:error, :full} = Ringbus.push(name, "t2")
    # The group is the channel's consumer: a pull takes nothing, a trim
    # nothing unacked.
    assert :empty = Ringbus.pull(name)

    assert {:ok, 0} =
             Ringbus.run(name, {:trim, %{strategy: {:maxlen, 0}, approx: false, limit: nil}})

    assert {:ok, [{0, "t0", 1}]} = Groups.fetch(name, "workers", "w", 1)
    assert {:ok, 1} = Groups.ack(name, "workers", [0])
    # t0 made room.
    assert {:ok, 2} = Ringbus.push(name, "t2")
    assert {:ok, %{pushed: 3, pulled: 1, len: 2, overwritten: 0}} = Ringbus.info(name)

    # Enough acked work that the log is released past the group's
    # commands: the group comes back from a snapshot, and holds still.
    for i <- 3..1_450 do
      {:ok, [{seq, _, 1}]} = Groups.fetch(name, "workers", "w", 1)
      {:ok, 1} = Groups.ack(name, "workers", [seq])
      {:ok, ^i} = Ringbus.push(name, "t#{i}")
    end

    server = Internals.channel!(name).replica.server
    Ringbus.Test.Peers.eventually(fn -> snapshot_index(server) > 100 end, 5_000)
    :ok = Supervisor.terminate_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)
    :ok = Ringbus.Store.delete(name)
    {:ok, _} = Supervisor.restart_child(Ringbus.Supervisor, Ringbus.Replica.Supervisor)

    assert {:error, :full} = Ringbus.push(name, "late")
    assert :empty = Ringbus.pull(name)
    assert {:ok, [{seq, _, 1}]} = Groups.fetch(name, "workers", "w", 1)
    assert {:ok, 1} = Groups.ack(name, "workers", [seq])
    assert {:ok, 1_451} = Ringbus.push(name, "late")
  end

  defp figures(name) do
    {:ok, [g]} = Groups.info(name)
    Map.take(g, [:pending, :acked, :delivered, :lost, :redelivered, :dead])
  end

  defp snapshot_index({local, _}) do
    case :ets.lookup(:ra_metrics, local) do
      [{_, _term, snapshot, _applied, _commit, _written, _latency}] -> snapshot
      [] -> 0
    end
  end

  defp last_index(server) do
    {:ok, {{index, _term}, :ok}, _leader} = :ra.local_query(server, fn _ -> :ok end)
    index
  end
end

defmodule Ringbus.Replica.GroupsClusterTest do
  # Three members: a group made through one, consumed through another,
  # acked through the third; the consumer's exit makes its entries due at
  # once; every member holds the same rows; kill -9 of the leader's node
  # loses no group state, redelivers nothing acked, and the restarted
  # member catches up to the same rows.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Nodes, Peers}
  import Peers, only: [eventually: 1, eventually: 2]

  @moduletag timeout: 300_000

  test "groups of a replicated channel are the same on every member and survive the leader's kill" do
    [a, b, c] = nodes = Peers.start_joined(3, "replica_groups")
    :ok = Nodes.call(a, Ringbus, :create, ["q", [replicas: 3, capacity: 1_000]], 30_000)
    {:ok, 0} = Nodes.call(a, Ringbus, :push_many, ["q", for(i <- 0..9, do: "m#{i}")])
    :ok = Nodes.call(b, Ringbus.Groups, :create, ["q", "g", [from: :earliest, ack_wait: 60_000]])

    # The process that fetched through c exits as the call returns: its
    # entries are due at once, not after ack_wait, and go to the next fetch.
    assert {:ok, [{0, "m0", 1}, {1, "m1", 1}, {2, "m2", 1}]} = fetch(c, "c1", 3, 0)
    # Its exit goes through the log: every member sees c1 owned by nobody.
    eventually(fn -> Enum.all?(nodes, &(owner(&1, "c1") == nil)) end, 5_000)
    assert {:ok, [{0, "m0", 2}, {1, "m1", 2}, {2, "m2", 2}]} = fetch(a, "c2", 3, 0)
    assert {:ok, 3} = Nodes.call(b, Ringbus.Groups, :ack, ["q", "g", [0, 1, 2]])
    assert {:ok, [{3, "m3", 1}]} = fetch(b, "c3", 1, 0)
    alike(nodes)

    leader = leader(nodes)
    Nodes.signal(leader, :kill)
    [x, y] = nodes -- [leader]

    # The next leader carries on: 3 is due again (its consumer exited), what
    # was acked is never delivered again, and new entries follow.
    assert {:ok, [{3, "m3", 2}, {4, "m4", 1}, {5, "m5", 1}]} = fetch(x, "c4", 3, 10_000)
    assert {:ok, 3} = Nodes.call(y, Ringbus.Groups, :ack, ["q", "g", [3, 4, 5]], 15_000)

    restarted = Nodes.restart(leader)
    on_exit(fn -> Nodes.stop([restarted]) end)
    nodes = [restarted, x, y]
    :ok = Nodes.join(nodes)
    alike(nodes)

    assert {:ok, [%{acked: 6, redelivered: 4, pending: 0, delivered: 5, lag: 4}]} =
             Nodes.call(restarted, Ringbus.Groups, :info, ["q"], 15_000)
  end

  defp fetch(node, consumer, max, wait),
    do:
      Nodes.call(
        node,
        Ringbus.Groups,
        :fetch,
        ["q", "g", consumer, max, [timeout: wait]],
        wait + 15_000
      )

  defp owner(node, consumer) do
    channel = Nodes.call(node, Ringbus.Test.Internals, :channel!, ["q"])

    for(
      {{:consumer, _, "g", ^consumer}, _seen, owner} <-
        Nodes.call(node, Ringbus.Group, :rows, [channel]),
      do: owner
    )
    |> hd()
  end

  # Every member's rows of the channel's groups are the same.
  defp alike(nodes) do
    eventually(fn ->
      rows =
        for n <- nodes do
          channel = Nodes.call(n, Ringbus.Test.Internals, :channel!, ["q"])
          Nodes.call(n, Ringbus.Group, :rows, [channel])
        end

      match?([r, r, r] when r != [], rows)
    end)
  end

  defp leader(nodes) do
    eventually(fn ->
      Nodes.call(hd(nodes), Ringbus, :info, ["q"]) |> elem(1) |> Map.get(:leader) != nil
    end)

    {:ok, %{leader: node}} = Nodes.call(hd(nodes), Ringbus, :info, ["q"])
    Enum.find(nodes, &(&1.node == node))
  end
end
