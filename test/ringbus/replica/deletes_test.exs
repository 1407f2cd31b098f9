defmodule Ringbus.Replica.DeletesTest do
  # Deletes on a replicated channel's machine (`{:delete, seqs}`, machine
  # version 7): decided alike from the state (`Ringbus.Replica.Deleted`),
  # carried out as tombstones on this node's ring, passed by pulls and
  # trims without counting them, and carried by a snapshot.
  use ExUnit.Case, async: true

  import Ringbus.Test.Counts, only: [balanced?: 1, info!: 1]

  alias Ringbus.Replica.{Checkpoints, Deleted, Machine, Versions}

  doctest Ringbus.Replica.Deleted

  setup do
    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, "replica_deletes_"),
          do: Ringbus.delete(name)
    end)
  end

  defp unique, do: "replica_deletes_#{System.unique_integer([:positive])}"

  defp machine(opts),
    do: Machine.init(Map.merge(%{name: :test, channel: unique(), capacity: 10}, Map.new(opts)))

  defp apply_all(state, commands, from) do
    commands
    |> Enum.with_index(from)
    |> Enum.map_reduce(state, fn {cmd, i}, st ->
      {st, reply, _effects} = Machine.apply(%{index: i}, cmd, st)
      {reply, st}
    end)
    |> then(fn {replies, st} -> {st, replies} end)
  end

  test "decisions: only seqs held and not deleted yet; pulls and trims pass the deleted" do
    state = machine(capacity: 10)
    {state, {:ok, 0}, _} = Machine.decide({:push, nil, ~w(a b c d e f)}, 1, state)

    assert {state, {:ok, 2}, [{:delete, [1, 3]}]} =
             Machine.decide({:delete, [1, 3, 3, 6, -1, :x]}, 2, state)

    assert {_, {:ok, 0}, [{:delete, []}]} = Machine.decide({:delete, [1, 3]}, 3, state)

    # The oldest deleted: the tail passes it and the deleted one after it.
    assert {%{tail: 2}, {:ok, 1}, [{:delete, [0]}]} = Machine.decide({:delete, [0]}, 3, state)

    # Two messages from the tail are 0 and 2: the ring passes three seqs.
    assert {state, {:pulled, 0, 2}, [{:pull, 0, 3}]} = Machine.decide({:pull, 2}, 3, state)
    # Held: 4 5 (3 deleted); MAXLEN 1 removes one message, passing seq 3.
    trim = %{strategy: {:maxlen, 1}, approx: false, limit: nil}
    assert {state, {:trimmed, 3, 1}, [{:pull, 3, 2}]} = Machine.decide({:trim, trim}, 4, state)
    assert state.tail == 5
    assert Deleted.prune(state.deleted, state.tail) == Deleted.new()
  end

  test "a version before 7 refuses a delete on every member alike" do
    assert Versions.command(5, {:delete, [1]}) == {:unknown, 5}
    assert Versions.command(7, {:delete, [1]}) == {:delete, [1]}

    name = unique()
    :ok = Ringbus.create(name, capacity: 10)
    state = machine(channel: name)
    {state, [{:ok, 0}]} = apply_all(state, [{:push, nil, ~w(a b)}], 1)

    assert {_, {:error, :badarg}, _} =
             Machine.apply(%{index: 2, machine_version: 5}, {:delete, [0]}, state)

    assert %{deleted: 0, len: 2} = info!(name)
  end

  test "applied on this node's ring: reads skip, pulls pass, replays change nothing" do
    name = unique()
    :ok = Ringbus.create(name, capacity: 10)
    fresh = machine(channel: name)
    commands = [{:push, nil, ~w(a b c d)}, {:delete, [1, 2, 9]}]
    {state, [{:ok, 0}, {:ok, 2}]} = apply_all(fresh, commands, 1)

    assert {:ok, [{0, "a"}, {3, "d"}], 0} = Ringbus.read(name, 0, 10)
    assert %{deleted: 2, len: 2} = i = info!(name)
    assert balanced?(i)

    # A replay of the same entries (Ra recovering) finds them carried out.
    {replayed, [{:ok, 0}, {:ok, 2}]} = apply_all(fresh, commands, 1)
    assert {replayed.head, replayed.deleted} == {state.head, state.deleted}
    assert %{deleted: 2, len: 2, pushed: 4} = info!(name)

    {state, [{:ok, [{0, "a"}]}, {:ok, [{3, "d"}]}]} =
      apply_all(state, [{:pull, 1}, {:pull, 1}], 3)

    assert state.deleted == Deleted.new()
    assert %{deleted: 2, pulled: 2, len: 0, overwritten: 0} = i = info!(name)
    assert balanced?(i)
  end

  test "a snapshot carries the deleted: a new ring rebuilt from it holds the same messages" do
    name = unique()
    :ok = Ringbus.create(name, capacity: 10)
    state = machine(channel: name)
    # With groups, the snapshot holds the ring's messages (`Checkpoints`).
    group = {:groups, [{:infinity, {:create, "g", -1, nil}}]}
    commands = [group, {:push, nil, ~w(a b c d)}, {:delete, [1]}]
    {state, [{:groups, [:ok]}, {:ok, 0}, {:ok, 1}]} = apply_all(state, commands, 1)

    assert {_, [{:release_cursor, 5_000, snapshot}]} = Checkpoints.checkpoint(state, 5_000, 7)

    assert [{0, "a", _, _}, {1, :deleted, _, _}, {2, "c", _, _}, {3, "d", _, _}] =
             snapshot.messages

    other = unique()
    :ok = Ringbus.create(other, capacity: 10)
    assert Checkpoints.load(other, snapshot.messages) == nil
    assert {:ok, [{0, "a"}, {2, "c"}, {3, "d"}], 0} = Ringbus.read(other, 0, 10)
    assert %{deleted: 1, len: 3, next_seq: 4} = info!(other)

    # The state goes on there: its pulls pass the deleted seq.
    st = %{snapshot | channel: other, messages: nil, groups: nil}
    {_, [{:ok, [{0, "a"}, {2, "c"}]}]} = apply_all(st, [{:pull, 2}], 5_001)
    assert %{deleted: 1, pulled: 2, len: 1} = i = info!(other)
    assert balanced?(i)
  end
end
