defmodule Ringbus.OpTest do
  # The operation path on this node's channels: each operation as data,
  # run by Ringbus.Op on the channel's handle.
  use ExUnit.Case, async: true
  doctest Ringbus.Op

  alias Ringbus.Op
  alias Ringbus.Test.Internals

  defp channel!(opts) do
    name = "op-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    {name, Internals.channel!(name)}
  end

  defp maxlen(n), do: %{strategy: {:maxlen, n}, approx: false, limit: nil}

  test "a memory channel's operation answers at once; stamped answers carry the incarnation" do
    {_name, ch} = channel!(capacity: 10)
    assert {:reply, {:ok, 0}} = Op.run(ch, {:push, "a"}, :infinity)
    inc = ch.incarnation
    assert {:reply, {:ok, ^inc, {:ok, 1}}} = Op.run(ch, {:stamped, {:push, "b"}}, :infinity)

    assert {:reply, {:ok, ^inc, {:error, :new_incarnation}}} =
             Op.run(ch, {:stamped, {:read, 0, 10, inc + 1}}, :infinity)

    assert {:reply, {:ok, [{0, "a"}, {1, "b"}], 0}} = Op.run(ch, {:read, 0, 10, inc}, :infinity)
  end

  test "a trim is one operation that pulls what Trim names, counted as pulled" do
    {name, ch} = channel!(capacity: 100)
    {:ok, 0} = Ringbus.push_many(name, for(i <- 1..30, do: "m#{i}"))
    assert Op.run!(ch, {:trim, maxlen(5)}) == {:ok, 25}
    assert {:ok, %{len: 5, pulled: 25, first_seq: 25}} = Ringbus.info(name)
  end

  test "a push and its trim leave the channel as one by one would; a batch that would lap is refused" do
    {name, ch} = channel!(capacity: 6)
    {:ok, 0} = Ringbus.push_many(name, ["a", "b", "c", "d", "e"])
    # Held before the push and trimmed after it go first, so nothing is overwritten.
    assert Op.run!(ch, {:push_trim, {:push_many, ["f", "g"], 2, 2}, maxlen(5)}) == {:ok, 5}
    assert {:ok, %{len: 5, pulled: 2, overwritten: 0, next_seq: 7}} = Ringbus.info(name)
    # Seven new ones lap a ring of six before any trim could make room.
    batch = for i <- 1..7, do: "n#{i}"
    assert Op.run!(ch, {:push_trim, {:push_many, batch, 7, 14}, maxlen(5)}) == {:error, :laps}
    assert {:ok, %{len: 5, next_seq: 7}} = Ringbus.info(name)
  end

  test "writes are the pushes, pulls, trims and group requests, stamped or not" do
    assert Op.write?({:push, "a"})
    assert Op.write?(:pull)
    assert Op.write?({:trim, maxlen(1)})
    assert Op.write?({:stamped, {:push_trim, {:push, "a"}, maxlen(1)}})
    refute Op.write?({:read, 0, 1, nil})
    refute Op.write?(:info)
    # A replicated channel runs every group request through its log.
    assert Op.write?({:stamped, {:group, {:info, "g"}}})
  end
end
