defmodule Ringbus.GroupTest do
  # A channel's consumer groups as operations (`{:group, request}` through
  # `Ringbus.run/3`), on this node: seqs in, seqs out, as any front end
  # would use them. RESP's commands over them are tested in
  # test/ringbus/resp/ (streams_test, group_home_test, differential_test).
  use ExUnit.Case, async: true

  import Ringbus.Test.Eventually

  alias Ringbus.Test.Internals

  # A channel of a fresh name with `count` messages "m0", "m1"..., and its handle.
  defp channel(count, opts \\ [capacity: 100]) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    for i <- 0..(count - 1)//1, do: {:ok, ^i} = Ringbus.push(name, "m#{i}")
    {name, Internals.channel!(name)}
  end

  defp run(name, request), do: Ringbus.run(name, {:group, request})

  defp whole(incarnation), do: {0xFFFF_FFFF_FFFF_FFFF, incarnation}

  test "a group hands each new entry to one consumer, keeps it pending until acked" do
    {name, _} = channel(5)
    assert run(name, {:create, "g", -1, nil}) == :ok
    assert run(name, {:create, "g", -1, nil}) == {:error, :exists}
    assert run(name, {:read, "g", "a", 2, false}) == {:ok, [{0, "m0"}, {1, "m1"}]}
    assert run(name, {:read, "g", "b", 10, false}) == {:ok, [{2, "m2"}, {3, "m3"}, {4, "m4"}]}
    assert run(name, {:read, "g", "b", 10, false}) == {:ok, []}
    assert run(name, {:read, "none", "b", 10, false}) == {:error, :no_group}

    assert run(name, {:pending, "g"}) == {:ok, {5, 0, 4, [{"a", 2}, {"b", 3}]}}
    assert run(name, {:ack, "g", [0, 3, 3, 9]}) == {:ok, 2}
    assert {:ok, [{1, "a", _, 1}, {2, "b", _, 1}]} = run(name, {:pending, "g", 0, 2, 10, nil, 0})
    assert {:ok, [{2, "b", _, 1}, {4, "b", _, 1}]} = run(name, {:pending, "g", 0, 9, 10, "b", 0})
    assert run(name, {:pending, "g", 0, 9, 10, nil, 60_000}) == {:ok, []}

    assert {:ok, %{last: 4, entries_read: 5, pending: 3, lost: 0}} = run(name, {:info, "g"})
    assert {:ok, [{"a", 1, _}, {"b", 2, _}]} = run(name, {:consumers, "g"})
    assert run(name, :count) == {:ok, 1}

    # {:groups, n}: the group with up to n of its pending entries and of each consumer's.
    assert {:ok, [%{name: "g", lag: 0, pending: 3, entries: [{1, "a", _, 1}], consumers: cs}]} =
             run(name, {:groups, 1})

    assert [%{name: "a", pending: 1, entries: [{1, _, 1}]}, %{name: "b", entries: [{2, _, 1}]}] =
             cs

    assert run(name, {:delete_consumer, "g", "b"}) == {:ok, 2}
    assert run(name, {:create_consumer, "g", "b"}) == {:ok, :created}
    assert run(name, {:create_consumer, "g", "b"}) == {:ok, :exists}
    assert run(name, {:destroy, "g"}) == {:ok, true}
    assert run(name, {:destroy, "g"}) == {:ok, false}
    assert run(name, :count) == {:ok, 0}
  end

  test "positions: the channel's last, set again, and entries lost to the ring" do
    {name, _} = channel(10, capacity: 4, overflow: :drop_oldest)
    assert run(name, {:create, "end", :last, nil}) == :ok
    assert {:ok, %{last: 9, entries_read: 10}} = run(name, {:info, "end"})
    assert run(name, {:read, "end", "c", 10, true}) == {:ok, []}

    # From the start: six entries are gone from a ring of four, and counted.
    assert run(name, {:create, "start", -1, nil}) == :ok
    assert run(name, {:read, "start", "c", 10, true}) == {:ok, for(i <- 6..9, do: {i, "m#{i}"})}
    assert {:ok, %{last: 9, entries_read: 4, lost: 6, pending: 0}} = run(name, {:info, "start"})

    assert run(name, {:set_id, "start", 7, 3}) == :ok
    assert run(name, {:read, "start", "c", 10, true}) == {:ok, [{8, "m8"}, {9, "m9"}]}
    assert run(name, {:set_id, "none", 7, nil}) == {:error, :no_group}
  end

  test "a consumer reads its pending entries again; one that waited takes what is new" do
    {name, _} = channel(3)
    :ok = run(name, {:create, "g", -1, nil})
    {:ok, [_, _, _]} = run(name, {:read, "g", "c", 10, false})
    assert run(name, {:history, "g", "c", 1, 10}) == {:ok, [{1, "m1"}, {2, "m2"}]}
    assert {:ok, [{1, "c", _, 2}, {2, "c", _, 2}]} = run(name, {:pending, "g", 1, 2, 10, nil, 0})

    # Taken by a consumer that waited: the new entry, the consumer not seen again.
    {:ok, 3} = Ringbus.push(name, "m3")
    assert run(name, {:take, "g", "late", 10, false}) == {:ok, [{3, "m3"}]}
    assert {:ok, [{"c", 3, _}]} = run(name, {:consumers, "g"})
    assert run(name, {:history, "g", "other", 0, 10}) == {:ok, []}
    assert {:ok, [{"c", 3, _}, {"other", 0, _}]} = run(name, {:consumers, "g"})
  end

  test "pending entries the ring no longer holds: read as nil, dropped by claims" do
    {name, _} = channel(3, capacity: 3, overflow: :drop_oldest)
    :ok = run(name, {:create, "g", -1, nil})
    {:ok, [_, _, _]} = run(name, {:read, "g", "c", 10, false})
    for i <- 3..4, do: {:ok, ^i} = Ringbus.push(name, "m#{i}")

    assert run(name, {:history, "g", "c", 0, 10}) == {:ok, [{0, nil}, {1, nil}, {2, "m2"}]}
    # The cursor is the pending entry after the last looked at, as Redis's.
    assert run(name, {:autoclaim, "g", "d", 0, 0, 1, false}) == {:ok, {1, [], [0]}}
    opts = %{time: nil, retry: nil, force: false, justid: false, last: nil}
    assert run(name, {:claim, "g", "d", [1, 2], 0, opts}) == {:ok, [{2, "m2"}]}
    assert run(name, {:pending, "g"}) == {:ok, {1, 2, 2, [{"d", 1}]}}
  end

  test "claims by idle time, with FORCE, JUSTID and a position moved up" do
    {name, _} = channel(4)
    :ok = run(name, {:create, "g", -1, nil})
    {:ok, [_, _, _, _]} = run(name, {:read, "g", "a", 10, false})
    opts = %{time: nil, retry: nil, force: false, justid: false, last: nil}

    assert run(name, {:claim, "g", "b", [0, 1], 60_000, opts}) == {:ok, []}
    assert run(name, {:claim, "g", "b", [0, 1], 0, opts}) == {:ok, [{0, "m0"}, {1, "m1"}]}
    assert {:ok, [{0, "b", _, 2}]} = run(name, {:pending, "g", 0, 0, 1, nil, 0})

    assert run(name, {:claim, "g", "c", [2], 0, %{opts | justid: true, retry: 7}}) ==
             {:ok, [2]}

    assert {:ok, [{2, "c", _, 7}]} = run(name, {:pending, "g", 2, 2, 1, nil, 0})

    # An entry in no PEL: claimed only with FORCE.
    {:ok, _} = run(name, {:ack, "g", [3]})
    assert run(name, {:claim, "g", "d", [3], 0, opts}) == {:ok, []}
    assert run(name, {:claim, "g", "d", [3], 0, %{opts | force: true}}) == {:ok, [{3, "m3"}]}

    assert run(name, {:claim, "g", "d", [], 0, %{opts | last: 40}}) == {:ok, []}
    assert {:ok, %{last: 40}} = run(name, {:info, "g"})

    # Autoclaim: at most `count` of the entries idle enough.
    assert run(name, {:autoclaim, "g", "e", 0, 0, 1, false}) == {:ok, {1, [{0, "m0"}], []}}
    assert run(name, {:autoclaim, "g", "e", 0, 2, 10, true}) == {:ok, {nil, [2, 3], []}}
  end

  test "autoclaim looks at ten times its count at most, and says where to go on" do
    {name, _} = channel(12)
    :ok = run(name, {:create, "g", -1, nil})
    {:ok, _} = run(name, {:read, "g", "a", 12, false})
    assert run(name, {:autoclaim, "g", "b", 60_000, 0, 1, true}) == {:ok, {10, [], []}}
    assert run(name, {:autoclaim, "g", "b", 0, 10, 1, true}) == {:ok, {11, [10], []}}
    assert run(name, {:autoclaim, "g", "b", 0, 11, 1, true}) == {:ok, {nil, [11], []}}
  end

  test "seqs of another incarnation: a position is refused, an entry names nothing" do
    {name, channel} = channel(2)
    other = channel.incarnation + 1
    assert run(name, {:create, "g", {-1, whole(other)}, nil}) == {:error, :new_incarnation}
    assert run(name, {:create, "g", {-1, whole(channel.incarnation)}, nil}) == :ok
    {:ok, [_, _]} = run(name, {:read, "g", "c", 10, false})
    assert run(name, {:history, "g", "c", {0, whole(other)}, 10}) == {:error, :new_incarnation}

    assert run(name, {:ack, "g", [{0, whole(other)}, {1, whole(channel.incarnation)}]}) ==
             {:ok, 1}

    # Part of an incarnation: its bits under the mask.
    low = Bitwise.band(channel.incarnation, 0xFFFF)
    assert run(name, {:ack, "g", [{0, {0xFFFF, low}}]}) == {:ok, 1}
  end

  test "a read through a room answers the first entry, then what fits a quarter of it" do
    {name, channel} = channel(0)
    for i <- 0..3, do: {:ok, ^i} = Ringbus.push(name, String.duplicate("#{i}", 100))
    :ok = run(name, {:create, "g", -1, nil})
    read = {:group, {:read, "g", "c", 10, false}}
    assert {:reply, {:ok, [{0, _}, {1, _}]}} = Ringbus.Op.run(channel, read, 800)
    assert {:reply, {:ok, [{2, _}]}} = Ringbus.Op.run(channel, read, 4)
    assert {:reply, {:ok, [{3, _}]}} = Ringbus.Op.run(channel, read, :infinity)
  end

  test "bounds: 64 groups a channel, 1,024 consumers a group" do
    {name, _} = channel(0)
    for i <- 1..64, do: :ok = run(name, {:create, "g#{i}", -1, nil})
    assert run(name, {:create, "g65", -1, nil}) == {:error, {:too_many_groups, 64}}
    assert {:ok, true} = run(name, {:destroy, "g64"})
    assert run(name, {:create, "g65", -1, nil}) == :ok

    for i <- 1..1024, do: {:ok, :created} = run(name, {:create_consumer, "g1", "c#{i}"})
    assert run(name, {:create_consumer, "g1", "c1"}) == {:ok, :exists}

    assert run(name, {:create_consumer, "g1", "c1025"}) ==
             {:error, {:too_many_consumers, 1024}}
  end

  test "a channel's groups go with it, and one created again has none" do
    {name, channel} = channel(1)
    :ok = run(name, {:create, "g", -1, nil})
    {:ok, [_]} = run(name, {:read, "g", "c", 1, false})

    mine = fn ->
      Enum.filter(Ringbus.Group.summary(), &(&1.incarnation == channel.incarnation))
    end

    assert [%{group: "g", pending: 1, consumers: 1}] = mine.()

    :ok = Ringbus.delete(name)
    assert eventually(fn -> mine.() == [] end)

    # The group's row goes first, then its consumers', pending and due rows
    # (`Ringbus.Group.Table.drop/2`): every one of them goes.
    assert eventually(fn ->
             rows = :ets.tab2list(Ringbus.Group.Table.table())
             not Enum.any?(rows, &(elem(elem(&1, 0), 1) == channel.incarnation))
           end)

    :ok = Ringbus.create(name, capacity: 10)
    assert run(name, :count) == {:ok, 0}
    assert run(name, {:info, "g"}) == {:error, :no_group}
  end
end
