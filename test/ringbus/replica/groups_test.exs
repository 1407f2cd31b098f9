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

    # Concurrent acks go as few commands as the writer's queue allows.
    tasks = for seq <- [0, 1], do: Task.async(fn -> Groups.ack(name, "g", [seq]) end)
    assert Enum.map(tasks, &Task.await/1) == [{:ok, 1}, {:ok, 1}]
    assert {:ok, [%{name: "g", pending: 0, acked: 2}]} = Groups.info(name)
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
