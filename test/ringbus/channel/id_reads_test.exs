defmodule Ringbus.Channel.IdReadsTest do
  # Where a Redis stream ID falls among a channel's seqs, found where the
  # channel lives by binary search: each side of a range, an exact entry,
  # and the name a seq the ring dropped goes by.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.{GivenIds, IdReads, Ring}
  alias Ringbus.Test.Internals

  @max 0xFFFF_FFFF_FFFF_FFFF

  setup do
    ch = Internals.temp_channel!(capacity: 8)

    for id <- [{5, 0}, {5, 1}, {7, 0}, {@max, @max}],
        do: {:ok, _, ^id} = GivenIds.push(ch, "x", id)

    %{ch: ch}
  end

  test "each side of a range is the seq it bounds", %{ch: ch} do
    # Seqs 0..3 hold 5-0, 5-1, 7-0, max-max.
    assert IdReads.bounds(ch, [
             {:from, {5, 1}},
             {:after, {5, 1}},
             {:through, {5, 1}},
             {:before, {5, 1}}
           ]) ==
             [1, 2, 1, 0]

    assert IdReads.bounds(ch, [
             {:from, {6, 0}},
             {:after, {6, 0}},
             {:through, {6, 0}},
             {:before, {6, 0}}
           ]) ==
             [2, 2, 1, 1]

    assert IdReads.bounds(ch, [{:from, {0, 0}}, {:through, {4, @max}}, {:after, {5, @max}}]) == [
             0,
             -1,
             2
           ]

    assert IdReads.bounds(ch, [{:after, {@max, @max}}, {:through, {@max, @max}}]) == [4, 3]
    assert IdReads.bounds(ch, [{:entry, {7, 0}}, {:entry, {6, 0}}]) == [2, :none]
  end

  test "a read gives each message its ID; a dropped seq is named 0-<seq + 1> and found again", %{
    ch: ch
  } do
    assert {[{0, "x", {5, 0}}, {1, "x", {5, 1}}], 2, 0, 2} = IdReads.read(ch, 0, 2)
    assert {:ok, 2} = Ring.trim(ch, %{strategy: {:min_seq, 2}, approx: false, limit: nil})
    assert IdReads.ids_of(ch, [1, 2]) == [{0, 2}, {7, 0}]
    assert IdReads.bounds(ch, [{:entry, {0, 2}}, {:entry, {0, 3}}]) == [1, :none]
  end

  test "a trim notes the highest ID it removed", %{ch: ch} do
    assert IdReads.put_info(%{}, ch).max_removed_id == {0, 0}

    assert {:ok, 2} =
             Ringbus.Group.GoneIds.trim(ch, %{strategy: {:min_seq, 2}, approx: false, limit: nil})

    info = IdReads.put_info(%{}, ch)
    assert info.max_removed_id == {5, 1}
    assert info.first_id == {7, 0}
    assert info.last_id == {@max, @max}
  end
end
