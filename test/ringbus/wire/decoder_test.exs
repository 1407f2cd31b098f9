defmodule Ringbus.Wire.DecoderTest do
  use ExUnit.Case, async: true

  alias Ringbus.Wire.{Decoder, Entries, Frame, FrameGenerators}

  doctest Decoder
  doctest Entries

  @max 16 * 1024 * 1024

  # Feeds `chunks` one after the other; returns all frames and the last state.
  defp feed_all(decoder, chunks) do
    Enum.reduce(chunks, {[], decoder}, fn chunk, {frames, decoder} ->
      {:ok, new, decoder} = Decoder.feed(decoder, chunk)
      {[new | frames], decoder}
    end)
    |> then(fn {frames, decoder} -> {frames |> Enum.reverse() |> Enum.concat(), decoder} end)
  end

  # Cuts `bytes` at offsets taken from `sizes`, cycling; every byte is kept.
  defp chunks(bytes, []), do: [bytes]
  defp chunks(bytes, sizes), do: chunks(bytes, sizes, sizes, [])

  defp chunks(<<>>, _sizes, _all, acc), do: Enum.reverse(acc)
  defp chunks(bytes, [], all, acc), do: chunks(bytes, all, all, acc)

  defp chunks(bytes, [size | sizes], all, acc) do
    size = min(size, byte_size(bytes))
    <<chunk::binary-size(size), rest::binary>> = bytes
    chunks(rest, sizes, all, [chunk | acc])
  end

  describe "feed/2" do
    test "the same bytes split at random offsets give the same frames" do
      sizes =
        :proper_types.list(
          :proper_types.frequency([
            {4, :proper_types.integer(1, 8)},
            {4, :proper_types.integer(1, 200)},
            {1, :proper_types.integer(1, 5000)}
          ])
        )

      property =
        FrameGenerators.forall({:proper_types.list(FrameGenerators.frame()), sizes}, fn {frames,
                                                                                         sizes} ->
          bytes = FrameGenerators.bytes(frames)
          {decoded, decoder} = feed_all(Decoder.new(@max), chunks(bytes, sizes))
          decoded == frames and Decoder.buffered(decoder) == 0
        end)

      assert FrameGenerators.check(property, 1000) == true
    end

    test "with :group_pushes, the frames expand to the same frames, however split" do
      # Runs of acked pushes to a few channels, among other frames.
      push =
        :proper_types.bind(
          {FrameGenerators.u32(), :proper_types.elements(["a", "b"]), FrameGenerators.payload()},
          fn {corr, name, payload} -> {:push, corr, :ack, name, payload} end,
          false
        )

      frames =
        :proper_types.list(:proper_types.frequency([{6, push}, {1, FrameGenerators.frame()}]))

      sizes = :proper_types.list(:proper_types.integer(1, 300))

      property =
        FrameGenerators.forall({frames, sizes, :proper_types.integer(0, 100)}, fn {frames, sizes,
                                                                                   group} ->
          bytes = FrameGenerators.bytes(frames)
          {decoded, _} = feed_all(Decoder.new(@max, group_pushes: group), chunks(bytes, sizes))

          grouped_right? =
            Enum.all?(decoded, fn
              {:pushes, _name, count, bytes, corrs, payloads} ->
                count == length(corrs) and count == length(payloads) and
                  bytes == payloads |> Enum.map(&byte_size/1) |> Enum.sum() and
                  Enum.all?(payloads, &(byte_size(&1) <= group))

              {:push, _, :ack, _, _payload} ->
                # Not grouped: too large, or the decoder had to join it.
                true

              _other ->
                true
            end)

          Decoder.expand(decoded) == frames and grouped_right?
        end)

      assert FrameGenerators.check(property, 500) == true

      # In one read, a run to one channel is one element.
      bytes = FrameGenerators.bytes(for c <- 1..3, do: {:push, c, :ack, "a", "x"})

      assert {:ok, [{:pushes, "a", 3, 3, [3, 2, 1], ["x", "x", "x"]}], _} =
               Decoder.feed(Decoder.new(@max, group_pushes: 10), bytes)
    end

    test "one byte at a time" do
      frames = [{:ping, 1}, {:push, 2, :ack, "e", "payload"}, {:ok, 3}]
      bytes = FrameGenerators.bytes(frames)

      {decoded, decoder} = feed_all(Decoder.new(@max), for(<<b <- bytes>>, do: <<b>>))
      assert decoded == frames
      assert Decoder.buffered(decoder) == 0
    end

    test "all frames of one read come back together, in order" do
      frames = for i <- 1..50, do: {:push, i, :no_ack, "events", "m#{i}"}
      assert {:ok, ^frames, _} = Decoder.feed(Decoder.new(@max), FrameGenerators.bytes(frames))
    end

    test "an empty read changes nothing" do
      decoder = Decoder.new(@max)
      assert {:ok, [], ^decoder} = Decoder.feed(decoder, "")
    end
  end

  describe "large frames" do
    test "are collected over many reads and joined once" do
      payload = :crypto.strong_rand_bytes(3 * 1024 * 1024)
      frames = [{:ping, 1}, {:push, 2, :ack, "big", payload}, {:ping, 3}]
      bytes = FrameGenerators.bytes(frames)

      {decoded, decoder} =
        Enum.reduce(chunks(bytes, [1460]), {[], Decoder.new(@max)}, fn chunk, {acc, decoder} ->
          before = Decoder.buffered(decoder)
          {:ok, new, decoder} = Decoder.feed(decoder, chunk)

          # While a frame is incomplete the decoder holds exactly the bytes it was fed.
          if new == [], do: assert(Decoder.buffered(decoder) == before + byte_size(chunk))
          {acc ++ new, decoder}
        end)

      assert decoded == frames
      assert Decoder.buffered(decoder) == 0

      # The joined frame is the payload's own binary: one copy, no wasted bytes.
      [_, {:push, 2, :ack, "big", decoded_payload}, _] = decoded
      assert :binary.referenced_byte_size(decoded_payload) == byte_size(payload) + 15
    end

    test "a frame exactly at the maximum is accepted, one byte more is not" do
      frame = {:push, 1, :ack, "e", :binary.copy("x", 1000)}
      <<length::32, _::binary>> = bytes = FrameGenerators.bytes([frame])

      assert {:ok, [^frame], _} = Decoder.feed(Decoder.new(length), bytes)
      assert Decoder.feed(Decoder.new(length - 1), bytes) == {:error, :frame_too_large, []}
    end
  end

  describe "errors" do
    test "the header of a 1 GB frame is refused before any body is buffered" do
      header = <<1_073_741_824::32, 0x04>>
      assert Decoder.feed(Decoder.new(@max), header) == {:error, :frame_too_large, []}
    end

    test "a length prefix split across reads is checked when its last byte comes" do
      {:ok, [], decoder} = Decoder.feed(Decoder.new(@max), <<0x40, 0>>)
      assert Decoder.buffered(decoder) == 2
      assert Decoder.feed(decoder, <<0, 0, 0x04>>) == {:error, :frame_too_large, []}
    end

    test "the frames before a bad one are returned with the error" do
      good = [{:ping, 1}, {:ping, 2}]

      bytes =
        FrameGenerators.bytes(good) <> <<1::32, 0x44>> <> FrameGenerators.bytes([{:ping, 3}])

      assert Decoder.feed(Decoder.new(@max), bytes) == {:error, {:unknown_opcode, 0x44}, good}
    end

    test "garbage" do
      http = "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
      assert Decoder.feed(Decoder.new(65_550), http) == {:error, :frame_too_large, []}

      assert Decoder.feed(Decoder.new(@max), <<0::32>>) == {:error, :empty_frame, []}

      assert Decoder.feed(Decoder.new(@max), <<3::32, 0x04, 0xAA, 0xBB>>) ==
               {:error, {:truncated, :push}, []}
    end

    test "a truncated body found only when a large frame completes" do
      # A PUSH whose payload length claims more than the frame holds.
      body = <<0x04, 1::32, 0, 1::16, "e", 10_000::32>> <> :binary.copy("x", 5000)
      bytes = <<byte_size(body)::32, body::binary>>

      decoder = Decoder.new(@max)
      [first, second] = chunks(bytes, [3000])
      assert {:ok, [], decoder} = Decoder.feed(decoder, first)
      assert Decoder.feed(decoder, second) == {:error, {:truncated, :push}, []}
    end

    test "error codes to answer with" do
      assert Decoder.error_code(:frame_too_large) == :frame_too_large
      assert Decoder.error_code({:unknown_opcode, 0x44}) == :unknown_opcode
      assert Decoder.error_code(:empty_frame) == :bad_frame
      assert Decoder.error_code({:bad_field, :hello, :magic}) == :bad_frame
    end
  end

  describe ":first and :accept" do
    test "the first frame has its own limit and every later byte the other, however split" do
      hello = {:hello, 1, 3, 0, :binary.copy("t", 0xFFFF)}
      big = {:push, 2, :ack, "e", :binary.copy("x", 70_000)}
      bytes = FrameGenerators.bytes([hello, big])
      decoder = Decoder.new(@max, first: 65_550)

      # The largest HELLO fits the first limit; the push after it is over that
      # limit but within the other, in one read or split anywhere.
      for at <- [0, 3, 4, 5, 65_553, 65_554, 65_555, 65_560, byte_size(bytes) - 1] do
        <<a::binary-size(at), b::binary>> = bytes
        {:ok, first, decoder} = Decoder.feed(decoder, a)
        {:ok, second, _} = Decoder.feed(decoder, b)
        assert first ++ second == [hello, big], "split at #{at}"
      end

      assert {:error, :frame_too_large, []} =
               Decoder.feed(Decoder.new(@max, first: 65_550), FrameGenerators.bytes([big]))
    end

    test "a first frame above max_frame_size but within :first is taken, however split" do
      hello = {:hello, 1, 1, 0, :binary.copy("t", 60_000)}
      bytes = FrameGenerators.bytes([hello, {:ping, 2}])
      decoder = Decoder.new(1024, first: 65_550)

      for at <- [1, 4, 5, 1_000, 60_000, byte_size(bytes) - 1] do
        <<a::binary-size(at), b::binary>> = bytes
        {:ok, first, decoder} = Decoder.feed(decoder, a)
        {:ok, second, _} = Decoder.feed(decoder, b)
        assert first ++ second == [hello, {:ping, 2}], "split at #{at}"
      end
    end

    test "a frame of the other direction is an unknown opcode, whatever its body" do
      server = Decoder.new(@max, accept: :requests)
      client = Decoder.new(@max, accept: :responses)

      # 0x81 (HELLO_OK) with a 4-byte body that does not parse as HELLO_OK.
      assert Decoder.feed(server, <<0, 0, 0, 5, 0x81, 0, 0, 0, 1>>) ==
               {:error, {:unknown_opcode, 0x81}, []}

      assert Decoder.feed(client, IO.iodata_to_binary(Frame.encode({:ping, 1}))) ==
               {:error, {:unknown_opcode, 0x0D}, []}

      assert {:ok, [{:pong, 1}], _} =
               Decoder.feed(client, IO.iodata_to_binary(Frame.encode({:pong, 1})))
    end
  end

  describe ":pack_batches" do
    test "a batch of more payloads than the count comes as Entries; expand/1 gives the frames back" do
      property =
        FrameGenerators.forall(
          {:proper_types.list(FrameGenerators.frame()),
           :proper_types.list(:proper_types.integer(1, 300)), :proper_types.integer(0, 3)},
          fn {frames, sizes, pack} ->
            bytes = FrameGenerators.bytes(frames)
            {decoded, _} = feed_all(Decoder.new(@max, pack_batches: pack), chunks(bytes, sizes))

            packed_right? =
              Enum.all?(decoded, fn
                {:push_batch, _, _, _, count, payloads} ->
                  packed_right?(count, payloads, pack)

                {:tagged_push_batch, _, _, _, _, count, payloads} ->
                  packed_right?(count, payloads, pack)

                _other ->
                  true
              end)

            Decoder.expand(decoded) == frames and packed_right?
          end
        )

      assert FrameGenerators.check(property, 300) == true
    end

    test "a packed batch encodes to the bytes it came in" do
      frame = {:tagged_push_batch, 3, :no_ack, "events", {"p", 9}, 3, ["a", "", "bcd"]}
      bytes = FrameGenerators.bytes([frame])
      assert {:ok, [packed], _} = Decoder.feed(Decoder.new(@max, pack_batches: 1), bytes)

      assert {:tagged_push_batch, 3, :no_ack, "events", {"p", 9}, 3, %Entries{} = entries} =
               packed

      assert {entries.count, entries.bytes, entries.largest} == {3, 4, 3}
      assert IO.iodata_to_binary(Frame.encode(packed)) == bytes
    end

    test "a batch that is cut short or runs on is refused as without packing" do
      body = IO.iodata_to_binary(Frame.encode({:push_batch, 1, :ack, "e", 2, ["ab", "c"]}))
      <<_length::32, body::binary>> = body

      for cut <- 1..(byte_size(body) - 1) do
        <<short::binary-size(cut), _::binary>> = body
        assert Frame.decode_body(short, :requests, 0) == Frame.decode_body(short, :requests)
      end

      longer = body <> "x"
      assert Frame.decode_body(longer, :requests, 0) == {:error, {:trailing_bytes, :push_batch}}
      assert Frame.decode_body(longer, :requests) == {:error, {:trailing_bytes, :push_batch}}
    end
  end

  defp packed_right?(count, payloads, pack) when count > pack do
    match?(%Entries{count: ^count}, payloads) and
      payloads.bytes == payloads |> Enum.map(&byte_size/1) |> Enum.sum() and
      payloads.largest == payloads |> Enum.map(&byte_size/1) |> Enum.max(fn -> 0 end)
  end

  defp packed_right?(_count, payloads, _pack), do: is_list(payloads)

  test "frames decoded here are what Frame.decode/2 gives" do
    frame = {:read_ok, 1, 5, 0, 2, [{0, "a"}, {1, "b"}]}
    bytes = FrameGenerators.bytes([frame])
    assert {:ok, [decoded], _} = Decoder.feed(Decoder.new(@max), bytes)
    assert {:ok, ^decoded, ""} = Frame.decode(bytes, @max)
  end
end
