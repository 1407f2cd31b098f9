defmodule Ringbus.Server.PushBatchMemoryTest do
  # docs/PROTOCOL.md, section 7, "Memory": a PUSH_BATCH costs the server
  # about its bytes, whatever its count. A large batch is kept as the bytes
  # it came in until the channel stores it. (async: false: it measures the
  # node's memory.)
  use ExUnit.Case, async: false

  alias Ringbus.Test.RawClient

  @moduletag timeout: 120_000

  # The bound the protocol documents for a 16 MiB frame: the frame, the
  # chunk the channel keeps, and room for the rest.
  @bound 100_000_000

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, max_frame_size: 16 * 1024 * 1024})
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
    {:ok, server: server, port: Ringbus.Server.port(server)}
  end

  # A PUSH_BATCH of as many empty payloads as `max` holds, written from the
  # field table: corr, flags, name, count, then a u32 length of 0 each.
  defp empty_batch(max, name) do
    count = div(max - (1 + 4 + 1 + 2 + byte_size(name) + 4), 4)

    body = [
      <<0x05, 1::32, 0, byte_size(name)::16>>,
      name,
      <<count::32>>,
      :binary.copy(<<0::32>>, count)
    ]

    {count, IO.iodata_to_binary([<<IO.iodata_length(body)::32>> | body])}
  end

  # The most `:erlang.memory(:total)` reached until told to stop.
  defp sample_peak do
    spawn_link(fn -> sample(0) end)
  end

  defp sample(peak) do
    receive do
      {:stop, from} -> send(from, {:peak, peak})
    after
      1 -> sample(max(peak, :erlang.memory(:total)))
    end
  end

  defp peak(sampler) do
    send(sampler, {:stop, self()})
    assert_receive {:peak, peak}
    peak
  end

  test "a 16 MiB PUSH_BATCH of 4 million empty payloads holds the node's memory under 100 MB, and the connection's heap goes back down",
       %{server: server, port: port} do
    {c, %{max_frame_size: max}} = RawClient.hello!(port)
    [conn] = Ringbus.Server.connections(server)
    {count, frame} = empty_batch(max, "mem-batch")
    assert count > 4_000_000

    :erlang.garbage_collect()
    base = :erlang.memory(:total)
    sampler = sample_peak()
    RawClient.send_raw(c, frame)

    assert {[{:push_acks, 1, [{1, {:ok, 0}}]}], _c} = RawClient.recv(c, 1, 60_000)
    grew = peak(sampler) - base
    assert grew < @bound, "the node's memory grew by #{div(grew, 1_000_000)} MB"

    # The channel (auto-created, drop_oldest) keeps its capacity's worth.
    {:ok, info} = Ringbus.info("mem-batch")
    assert %{next_seq: ^count, len: len, overwritten: overwritten} = info
    assert len + overwritten == count

    # After the frame, the connection collects: its heap and the binaries
    # it references are small again while it stays open.
    _ = :sys.get_state(conn)
    {:memory, heap} = Process.info(conn, :memory)
    {:binary, binaries} = Process.info(conn, :binary)
    referenced = binaries |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    assert heap < 8_000_000, "the connection holds #{heap} bytes of heap"
    assert referenced < 1_000_000, "the connection references #{referenced} bytes of binaries"
  end

  describe "a packed batch (more than 64 payloads) is stored as a batch of the list would be" do
    setup %{port: port} do
      {c, _limits} = RawClient.hello!(port)
      {:ok, c: c}
    end

    @payloads for i <- 1..100, do: "m#{i}"

    test "on a reject channel: whole, or refused whole as full", %{c: c} do
      :ok = Ringbus.create("packed-reject", capacity: 150, overflow: :reject)
      frame = {:push_batch, 1, :ack, "packed-reject", 100, @payloads}
      assert {{:push_acks, 1, [{1, {:ok, 0}}]}, c} = RawClient.call(c, frame)

      assert {{:push_acks, 1, [{2, {:error, :full}}]}, _c} =
               RawClient.call(c, put_elem(frame, 1, 2))

      assert {:ok, messages, 0} = Ringbus.read("packed-reject", 0, 1000)
      assert Enum.map(messages, &elem(&1, 1)) == @payloads
      assert {:ok, %{rejected: 100, len: 100}} = Ringbus.info("packed-reject")
    end

    test "on a drop_oldest channel with max_bytes, and on a replicated one", %{c: c} do
      :ok = Ringbus.create("packed-bytes", capacity: 1000, max_bytes: 10_000)
      :ok = Ringbus.create("packed-replicated", capacity: 1000, replicas: 1)
      on_exit(fn -> Ringbus.delete("packed-replicated") end)

      for {name, corr} <- [{"packed-bytes", 1}, {"packed-replicated", 2}] do
        assert {{:push_acks, 1, [{^corr, {:ok, 0}}]}, _} =
                 RawClient.call(c, {:push_batch, corr, :ack, name, 100, @payloads})

        assert {:ok, messages, 0} = Ringbus.read(name, 0, 1000)
        assert Enum.map(messages, &elem(&1, 1)) == @payloads
      end
    end

    test "tagged: stored once however often it is sent", %{c: c} do
      frame = {:tagged_push_batch, 1, :ack, "packed-tagged", {"p", 1}, 100, @payloads}
      assert {{:push_acks, 1, [{1, {:ok, 0}}]}, c} = RawClient.call(c, frame)
      assert {{:push_acks, 1, [{1, {:ok, 0}}]}, _c} = RawClient.call(c, frame)
      assert {:ok, %{next_seq: 100}} = Ringbus.info("packed-tagged")
    end
  end
end
