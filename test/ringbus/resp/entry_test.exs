defmodule Ringbus.Resp.EntryTest do
  # Stream IDs as functions: the tag an incarnation gives them, and what an
  # ID a client gives means against a stream's tag.
  use ExUnit.Case, async: true

  alias Ringbus.Resp.Entry

  test "a tag is the incarnation's low 32 bits, odd, so never 0" do
    assert Entry.tag(0x1234_5678_9ABC_DEF0) == 0x9ABC_DEF1
    assert Entry.tag(0xFFFF_FFFF_0000_0000) == 1
    assert Entry.id(0, 7) == "1-7"
    assert Entry.id_of(41, 7) == {42, 7}
  end

  test "pin/2: the stream's tag and no tag resume, any other tag is another incarnation" do
    assert Entry.pin({5, 7}, 7) == {:ok, {5, 0}}
    assert Entry.pin({5, 0}, 7) == {:ok, {5, 0}}
    assert Entry.pin({5, Entry.max_u64()}, 7) == {:ok, {5, Entry.max_u64()}}
    assert Entry.pin({5, 9}, 7) == {:error, :new_incarnation}
    # No stream: only an ID that states no incarnation.
    assert Entry.pin({5, 0}, nil) == {:ok, {5, 0}}
    assert Entry.pin({5, 7}, nil) == {:error, :new_incarnation}
  end

  test "local/2: an ID of another tag names no entry" do
    assert {5, 7} |> Entry.local(7) |> Entry.seq() == {:ok, 4}
    assert {5, 0} |> Entry.local(7) |> Entry.seq() == {:ok, 4}
    assert {5, 9} |> Entry.local(7) |> Entry.seq() == :none
  end
end
