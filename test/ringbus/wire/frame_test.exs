defmodule Ringbus.Wire.FrameTest do
  use ExUnit.Case, async: true

  alias Ringbus.Wire.{Examples, Frame, FrameGenerators}

  doctest Frame
  doctest Ringbus.Wire.ErrorCode

  @max 16 * 1024 * 1024

  describe "round trip" do
    test "every frame decodes to itself after encoding" do
      property =
        FrameGenerators.forall(FrameGenerators.frame(), fn frame ->
          bytes = IO.iodata_to_binary(Frame.encode(frame))
          Frame.decode(bytes, @max) == {:ok, frame, ""}
        end)

      assert FrameGenerators.check(property, 3000) == true
    end

    test "every frame type is covered by the generator" do
      tagged = [:tagged_push, :tagged_push_batch]
      all = MapSet.new(Keyword.keys(Frame.opcodes()) ++ tagged)

      # Picks until every type has come, at most 200 lists: a bound that
      # only a generator that cannot make some type reaches.
      generated =
        Enum.reduce_while(1..200, MapSet.new(), fn _, seen ->
          {:ok, frames} = :proper_gen.pick(:proper_types.list(FrameGenerators.frame()), 100)
          seen = Enum.into(frames, seen, &elem(&1, 0))
          if MapSet.equal?(seen, all), do: {:halt, seen}, else: {:cont, seen}
        end)

      assert generated == all
    end

    test "the rest after a frame is returned untouched" do
      bytes = IO.iodata_to_binary([Frame.encode({:ping, 1}), "tail"])
      assert Frame.decode(bytes, @max) == {:ok, {:ping, 1}, "tail"}
    end

    test "an empty token encodes as none" do
      bytes = IO.iodata_to_binary(Frame.encode({:hello, 1, 3, 0, ""}))
      assert {:ok, {:hello, 1, 3, 0, nil}, ""} = Frame.decode(bytes, @max)
    end
  end

  describe "decode/2 errors" do
    test "a length above the maximum is refused from the four length bytes alone" do
      assert Frame.decode(<<1_073_741_824::32>>, @max) == {:error, :frame_too_large}
      assert Frame.decode(<<1_073_741_824::32, 0x04>>, @max) == {:error, :frame_too_large}
    end

    test "incomplete input asks for more" do
      assert Frame.decode(<<>>, @max) == {:more, 4}
      assert Frame.decode(<<0, 0>>, @max) == {:more, 2}
      assert Frame.decode(<<0, 0, 0, 9, 0x04, 1>>, @max) == {:more, 7}
    end

    test "a zero length has no opcode" do
      assert Frame.decode(<<0::32, 1, 2, 3>>, @max) == {:error, :empty_frame}
    end

    test "unknown opcodes" do
      for opcode <- [0x00, 0x0E, 0x0F, 0x1C, 0x7F, 0x80, 0x93, 0xFE] do
        assert Frame.decode(<<1::32, opcode>>, @max) == {:error, {:unknown_opcode, opcode}}
      end
    end

    test "every example one byte short is truncated, one byte long has trailing bytes" do
      for {name, frame, _} <- Examples.all() do
        type = Examples.wire_type(elem(frame, 0))
        <<length::32, body::binary>> = Examples.bytes(frame)

        short = <<length - 1::32, binary_part(body, 0, length - 1)::binary>>
        assert Frame.decode(short, @max) == {:error, {:truncated, type}}, name

        long = <<length + 1::32, body::binary, 0>>
        assert Frame.decode(long, @max) == {:error, {:trailing_bytes, type}}, name
      end
    end

    test "a body that stops inside its fixed fields is truncated" do
      assert Frame.decode(<<2::32, 0x04, 0>>, @max) == {:error, {:truncated, :push}}
      assert Frame.decode(<<3::32, 0x83, 0, 0>>, @max) == {:error, {:truncated, :push_acks}}
    end

    test "a count larger than the entries is truncated, not allocated" do
      bytes = <<16::32, 0x05, 1::32, 0, 1::16, "e", 0xFFFF_FFFF::32, 0::32>>
      assert Frame.decode(bytes, @max) == {:error, {:truncated, :push_batch}}
    end

    test "bad field values" do
      cases = [
        {<<7::32, 0x03, 1::32, 0::16>>, {:bad_field, :delete, :name}},
        {IO.iodata_to_binary([<<263::32, 0x03, 1::32, 256::16>>, :binary.copy("n", 256)]),
         {:bad_field, :delete, :name}},
        {<<0x0C::32, 0x04, 1::32, 0x04, 1::16, "e", 0::32>>, {:bad_field, :push, :flags}},
        # The producer-tag flag with a reserved bit, and with an empty producer id.
        {<<0x18::32, 0x04, 1::32, 0x06, 1::16, "e", 1::16, "p", 0::64, 0::32>>,
         {:bad_field, :push, :flags}},
        {<<0x17::32, 0x04, 1::32, 0x02, 1::16, "e", 0::16, 0::64, 0::32>>,
         {:bad_field, :push, :name}},
        {<<0x17::32, 0x05, 1::32, 0x02, 1::16, "e", 0::16, 0::64, 0::32>>,
         {:bad_field, :push_batch, :name}},
        {<<0x0C::32, 0x05, 1::32, 0x80, 1::16, "e", 0::32>>, {:bad_field, :push_batch, :flags}},
        {<<22::32, 0x02, 1::32, 1::16, "e", 1::32, 2, 0::64, 0>>,
         {:bad_field, :create, :overflow}},
        {<<26::32, 0x0A, 1::32, 0, 1::16, "e", 4, 0::64, 1::32, 1::32>>,
         {:bad_field, :subscribe, :from}},
        {<<26::32, 0x0A, 1::32, 0, 1::16, "e", 1, 5::64, 1::32, 1::32>>,
         {:bad_field, :subscribe, :from}},
        {<<34::32, 0x0A, 1::32, 1, 1::16, "e", 9::64, 4, 0::64, 1::32, 1::32>>,
         {:bad_field, :subscribe, :from}},
        # READ knows three flags (incarnation 0x01, time 0x02, times 0x04),
        # SUBSCRIBE two (incarnation, times 0x04).
        {<<21::32, 0x07, 1::32, 8, 1::16, "e", 0::64, 1::32>>, {:bad_field, :read, :flags}},
        {<<21::32, 0x07, 1::32, 0x0C, 1::16, "e", 0::64, 1::32>>, {:bad_field, :read, :flags}},
        {<<26::32, 0x0A, 1::32, 0x06, 1::16, "e", 1, 0::64, 1::32, 1::32>>,
         {:bad_field, :subscribe, :flags}},
        {<<26::32, 0x0A, 1::32, 0x81, 1::16, "e", 1, 0::64, 1::32, 1::32>>,
         {:bad_field, :subscribe, :flags}},
        {<<15::32, 0x01, 1::32, "XBUS", 1::16, 0::16, 0::16>>, {:bad_field, :hello, :magic}},
        {<<19::32, 0x83, 1::32, 7::32, 103::16, 5::64>>, {:bad_field, :push_acks, :status}},
        {<<9::32, 0xFF, 1::32, 0::16, 0::16>>, {:bad_field, :error, :code}},
        {<<7::32, 0x8B, 1::32, 0::16>>, {:bad_field, :sub_closed, :code}}
      ]

      for {bytes, reason} <- cases do
        assert Frame.decode(bytes, @max) == {:error, reason}
      end
    end
  end

  describe "encode/1" do
    test "returns iodata holding the payload itself, not a copy" do
      payload = :binary.copy("p", 100_000)
      iodata = Frame.encode({:push, 1, :ack, "e", payload})
      assert Enum.any?(binaries(iodata), &:erts_debug.same(&1, payload))
    end

    test "refuses frames with fields out of range" do
      {_, {:info_ok, _, info}, _} = List.keyfind(Examples.all(), "info_ok", 0)

      bad = [
        {:push, 1, :ack, "", "p"},
        {:push, 1, :ack, :binary.copy("n", 256), "p"},
        {:push, -1, :ack, "e", "p"},
        {:push, 1, :maybe, "e", "p"},
        {:read, 1, "e", 0x1_0000_0000_0000_0000, 1},
        {:read, 1, "e", 0, 1, -1},
        {:read, 1, "e", 0, 1, nil},
        {:subscribe, 1, "e", :earliest, 1, 1, 0x1_0000_0000_0000_0000},
        {:subscribed, 1, 1, nil},
        {:info_ok, 1, Map.delete(info, :incarnation)},
        {:create, 1, "e", 0x1_0000_0000, :drop_oldest, nil, nil},
        {:create, 1, "e", 10, :sometimes, nil, nil},
        {:create, 1, "e", 10, :drop_oldest, :infinity, nil},
        {:create, 1, "e", 10, :drop_oldest, 0, nil},
        {:create, 1, "e", 10, :drop_oldest},
        {:create, 1, "e", 10, :drop_oldest, nil, 0},
        {:create, 1, "e", 10, :drop_oldest, nil, 256},
        {:create, 1, "e", 10, :drop_oldest, nil, :three},
        {:create, 1, "e", 10, :drop_oldest, nil},
        {:info_ok, 1, Map.put(info, :color, 1024)},
        {:info_ok, 1, Map.delete(info, :skipped)},
        {:push_batch, 1, :ack, "e", 2, ["a"]},
        {:push_batch, 1, :ack, "e", 1, ["a", "b"]},
        {:read_ok, 1, 1, 0, 1, [:not_a_message]},
        {:error, 1, :no_such_reason, "m"},
        {:nope, 1}
      ]

      for frame <- bad do
        assert_raise ArgumentError, fn -> Frame.encode(frame) end
      end
    end
  end

  defp binaries(binary) when is_binary(binary), do: [binary]
  defp binaries([]), do: []
  defp binaries([head | tail]), do: binaries(head) ++ binaries(tail)

  describe "request?/1" do
    test "requests are below 0x80, server frames above" do
      for {name, frame, _} <- Examples.all() do
        opcode = Frame.opcode(elem(frame, 0))
        assert Frame.request?(frame) == opcode < 0x80, name
      end
    end
  end

  describe "the sizes senders plan with" do
    defp size(frame), do: IO.iodata_length(Frame.encode(frame))

    test "PUSH and PUSH_BATCH: header, name, entries" do
      prefix = Frame.length_prefix_size()
      overhead = Frame.push_overhead()
      entry = Frame.push_batch_entry_overhead()

      assert size({:push, 1, :ack, "ch", "abc"}) == prefix + overhead + 2 + 3

      assert size({:push_batch, 1, :ack, "ch", 2, ["abc", ""]}) ==
               prefix + overhead + 2 + 2 * entry + 3

      # What a frame's length prefix says: all but the prefix itself.
      <<length::32, _::binary>> = IO.iodata_to_binary(Frame.encode({:push, 1, :ack, "ch", "abc"}))
      assert length == overhead + 2 + 3
    end

    test "READ_OK and DELIVER: a message's bytes besides its payload" do
      one = [{1, "abc"}]
      two = [{1, "abc"}, {2, ""}]
      extra = Frame.message_overhead()

      assert size({:deliver, 1, 0, 2, two}) - size({:deliver, 1, 0, 1, one}) == extra
      assert size({:read_ok, 1, 2, 0, 2, two}) - size({:read_ok, 1, 2, 0, 1, one}) == extra
    end

    test "PUSH_ACKS: max_push_acks/1 acks fit max_frame_size, one more does not" do
      max = 4096
      n = Frame.max_push_acks(max)
      acks = for corr <- 1..(n + 1), do: {corr, {:ok, corr}}

      body = fn count ->
        size({:push_acks, count, Enum.take(acks, count)}) - Frame.length_prefix_size()
      end

      assert body.(n) <= max
      assert body.(n + 1) > max
    end

    test "a payload of max_payload_size fits in PULL_OK, READ_OK and DELIVER" do
      max = 4096
      payload = :binary.copy("m", Frame.max_payload_size(max))

      frames = [
        {:pull_ok, 1, 2, payload},
        {:read_ok, 1, 2, 3, 1, [{4, payload}]},
        {:deliver, 1, 2, 1, [{4, payload}]}
      ]

      for frame <- frames, do: assert(size(frame) - Frame.length_prefix_size() <= max)
    end

    test "CREATE carries capacities up to max_capacity/0 and replicas up to max_replicas/0" do
      create = &{:create, 1, "ch", &1, :reject, nil, &2}
      assert size(create.(Frame.max_capacity(), Frame.max_replicas())) > 0
      assert_raise ArgumentError, fn -> Frame.encode(create.(Frame.max_capacity() + 1, nil)) end
      assert_raise ArgumentError, fn -> Frame.encode(create.(1, Frame.max_replicas() + 1)) end
    end
  end

  test "payloads are sub-binaries of the bytes decoded: the codec copies nothing" do
    payload = :binary.copy("m", 100)
    read = FrameGenerators.bytes(for i <- 1..100, do: {:push, i, :ack, "events", payload})
    {:ok, {:push, 1, :ack, "events", decoded}, _rest} = Frame.decode(read, @max)
    assert decoded == payload
    assert :binary.referenced_byte_size(decoded) == byte_size(read)
  end
end
