defmodule Ringbus.Wire.VectorsTest do
  # The test vectors of docs/PROTOCOL.md and test/fixtures/protocol/.
  use ExUnit.Case, async: true

  alias Ringbus.Wire.{Decoder, ErrorCode, Examples, Frame}

  @doc_path "docs/PROTOCOL.md"
  @regenerate "run bin/protocol-vectors to regenerate them from the encoder"

  defp fixture_files, do: Path.wildcard(Path.join(Examples.fixtures_dir(), "*"))

  test "there is one fixture file per example, and nothing else" do
    names = for file <- fixture_files(), do: Path.basename(file)
    expected = for {name, _, _} <- Examples.all(), do: name <> ".hex"
    assert Enum.sort(names) == Enum.sort(expected), @regenerate
  end

  test "every fixture decodes to its frame, and the encoder gives back its exact bytes" do
    for {name, frame, _} <- Examples.all() do
      bytes = Examples.unhex(File.read!(Path.join(Examples.fixtures_dir(), name <> ".hex")))

      assert Frame.decode(bytes, byte_size(bytes)) == {:ok, frame, ""}, name
      assert {:ok, [^frame], _} = Decoder.feed(Decoder.new(byte_size(bytes)), bytes)
      assert IO.iodata_to_binary(Frame.encode(frame)) == bytes, "#{name}: " <> @regenerate
    end
  end

  test "every opcode has an example" do
    covered = MapSet.new(Examples.all(), fn {_, frame, _} -> Frame.opcode(elem(frame, 0)) end)
    assert covered == MapSet.new(Keyword.values(Frame.opcodes()))
    assert :tagged_push in Enum.map(Examples.all(), fn {_, frame, _} -> elem(frame, 0) end)
  end

  test "the document's test vectors are the fixtures" do
    doc = File.read!(@doc_path)
    assert Examples.current_doc_section(doc) == Examples.doc_section(), @regenerate

    for {name, frame, _} <- Examples.all() do
      assert doc =~ "`#{name}.hex`"
      assert doc =~ String.trim_trailing(Examples.hex(Examples.bytes(frame)))
    end
  end

  test "the document lists every opcode and every error code" do
    doc = File.read!(@doc_path)

    for {type, opcode} <- Frame.opcodes() do
      hex = opcode |> Integer.to_string(16) |> String.pad_leading(2, "0") |> String.downcase()
      assert doc =~ "| 0x#{hex} | `#{Examples.opcode_name(type)}`", "opcode #{type}"
    end

    for {reason, code, _} <- ErrorCode.all() do
      closes = if ErrorCode.closes_connection?(reason), do: "yes", else: "no"
      assert doc =~ "| #{code} | `#{reason}` | #{closes} |", "error #{reason}"
    end
  end

  test "the document's meaning of each error names every limit its code's text names" do
    rows = for "| " <> _ = line <- String.split(File.read!(@doc_path), "\n"), do: line

    for {reason, code, text} <- ErrorCode.all() do
      [row] = Enum.filter(rows, &String.starts_with?(&1, "| #{code} | `#{reason}` |"))

      for [limit] <- Regex.scan(~r/\b[a-z]+(?:_[a-z]+)+\b/, text) do
        assert row =~ "`#{limit}`", "section 9 says #{reason} without #{limit}"
      end
    end
  end

  # Vectors written by hand, byte by byte, from the field tables: they check
  # the codec against the document, not against itself.
  @by_hand "test/fixtures/protocol_by_hand"

  @hand_written [
    {"hello.hex", {:hello, 7, 3, 0, "abc"}},
    {"push_batch.hex", {:push_batch, 9, :no_ack, "q", 2, ["xy", ""]}},
    {"info_ok.hex",
     {:info_ok, 3,
      %{
        capacity: 16,
        overflow: :drop_oldest,
        max_bytes: nil,
        len: 2,
        first_seq: 5,
        next_seq: 7,
        pushed: 7,
        pulled: 3,
        overwritten: 2,
        rejected: 0,
        skipped: 0,
        bytes: 10,
        bytes_pushed: 35,
        incarnation: 0x0123_4567_89AB_CDEF
      }}},
    {"error.hex", {:error, 0, :frame_too_large, "too big"}},
    {"group_fetch.hex", {:group_fetch, 5, "q", "g", "worker-15", 10, 5000}},
    {"group_messages.hex", {:group_messages, 5, true, 2, [{7, "a", 1}, {8, "bc", 3}]}}
  ]

  test "the hand-written vectors decode to the frames their comments describe, and back" do
    assert Enum.sort(File.ls!(@by_hand)) == Enum.sort(Enum.map(@hand_written, &elem(&1, 0)))

    for {file, frame} <- @hand_written do
      text = File.read!(Path.join(@by_hand, file))
      bytes = text |> String.replace(~r/#[^\n]*/, "") |> Examples.unhex()

      assert Frame.decode(bytes, byte_size(bytes)) == {:ok, frame, ""}, file
      assert IO.iodata_to_binary(Frame.encode(frame)) == bytes, file
    end
  end
end
