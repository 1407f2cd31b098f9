defmodule Ringbus.Bench.Latency.RepliesTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Latency.Replies
  alias Ringbus.Wire.{Decoder, Frame}

  doctest Replies

  test "RESP replies are counted whole, errors apart, the rest kept" do
    data = "$3\r\nabc\r\n-ERR no\r\n:5\r\n+OK\r\n$-1\r\n+PONG\r\n$10\r\nabc"
    assert Replies.resp(data, 0, 0) == {:ok, 6, 1, "$10\r\nabc"}
    assert Replies.resp("-ER", 2, 1) == {:ok, 2, 1, "-ER"}
    assert Replies.resp("", 0, 0) == {:ok, 0, 0, ""}
  end

  test "an XADD reply split at every byte is counted once, when whole" do
    reply = "$15\r\n1700000000000-0\r\n"
    twice = reply <> reply

    for at <- 0..byte_size(twice) do
      <<head::binary-size(at), tail::binary>> = twice
      {:ok, a1, 0, rest} = Replies.resp(head, 0, 0)
      assert {:ok, 2, 0, ""} == Replies.resp(rest <> tail, a1, 0), "split at #{at}"
    end
  end

  test "bytes no RESP reply starts with, or a malformed bulk, are an error" do
    assert {:error, {:unexpected_reply, _}} = Replies.resp("*1\r\n$1\r\nx\r\n", 0, 0)
    assert {:error, {:unexpected_reply, _}} = Replies.resp("$x\r\n", 0, 0)
    assert {:error, {:unexpected_reply, _}} = Replies.resp("$1\r\nabc\r\n", 0, 0)
  end

  test "PUSH_ACKS entries are counted, failed ones apart, across reads" do
    decoder = Decoder.new(Frame.max_error_frame_size(), accept: :responses)

    acks = [{1, {:ok, 10}}, {2, {:error, :forbidden}}, {3, {:ok, 11}}]
    frame = IO.iodata_to_binary(Frame.encode({:push_acks, 3, acks}))

    <<head::binary-size(5), tail::binary>> = frame
    assert {:ok, 0, 0, decoder} = Replies.push(decoder, head)
    assert {:ok, 3, 1, _decoder} = Replies.push(decoder, tail)
  end

  test "a frame other than PUSH_ACKS is an error" do
    decoder = Decoder.new(Frame.max_error_frame_size(), accept: :responses)
    frame = IO.iodata_to_binary(Frame.encode({:ok, 7}))
    assert {:error, {:unexpected_frame, {:ok, 7}}} = Replies.push(decoder, frame)
  end
end
