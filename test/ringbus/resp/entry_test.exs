defmodule Ringbus.Resp.EntryTest do
  # Stream IDs as a client writes them, and payloads as field/value pairs.
  use ExUnit.Case, async: true

  alias Ringbus.Resp.Entry

  test "an ID is ms-seq, or ms alone with the sequence a range's side gives, each a u64" do
    assert Entry.parse("5-3") == {:ok, {5, 3}}
    assert Entry.parse("5") == {:ok, {5, 0}}
    assert Entry.parse("5", Entry.max_u64()) == {:ok, {5, Entry.max_u64()}}
    assert Entry.parse("18446744073709551615-18446744073709551615") == {:ok, Entry.max_id()}
    assert Entry.parse("18446744073709551616-0") == :error
    assert Entry.parse("-1-0") == :error
    assert Entry.parse("5-") == :error
    assert Entry.parse("a-1") == :error
    assert Entry.format({1_795_749_558_346, 12}) == "1795749558346-12"
  end

  test "pairs read back as written; other payloads read as one payload pair" do
    for pairs <- [["a", "1"], ["a", "", "b", "2"], ["payload", <<0xFF, "RBX", 1, 0, 0, 0, 1>>]] do
      assert pairs |> Entry.encode() |> Entry.decode() == pairs
    end

    assert Entry.encode(["payload", "raw"]) == "raw"
    assert Entry.decode("raw") == ["payload", "raw"]
  end
end
