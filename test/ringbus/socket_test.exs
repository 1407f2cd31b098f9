defmodule Ringbus.SocketTest do
  use ExUnit.Case, async: true

  alias Ringbus.Socket
  alias Ringbus.Wire.FrameGenerators

  doctest Ringbus.Socket

  describe "a server connection's arming" do
    setup do
      server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, buffer_size: 16_384})
      {:ok, port: Ringbus.Server.port(server, :resp), server: server}
    end

    test "asks for many reads while they are small, few once they fill the buffer", %{
      port: port,
      server: server
    } do
      {:ok, client} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
      # Each PING its own read: it is answered before the next is sent.
      for _ <- 1..6 do
        :ok = :gen_tcp.send(client, "PING\r\n")
        {:ok, "+PONG\r\n"} = :gen_tcp.recv(client, 0, 5_000)
      end

      [conn] = Ringbus.Server.connections(server, :resp)
      socket = :sys.get_state(conn).socket
      {:ok, [active: left]} = :inet.getopts(socket, [:active])
      # Armed with 4, then again with the most for small reads after the 4th.
      assert left == 64 - 2

      # Reads that fill the 16 KiB buffer: an arming after them asks for 4.
      # Which armings see only full reads depends on how the bytes arrive,
      # so every arming is traced and some must ask for 4, none for more
      # than 64.
      :erlang.trace_pattern({Ringbus.Socket, :activate, 3}, true, [:local])
      1 = :erlang.trace(conn, true, [:call])
      big = :binary.copy("x", 8 * 1024)
      echo = ["*2\r\n$4\r\nECHO\r\n$8192\r\n", big, "\r\n"]
      # 300 of them are more than 62 reads of 16 KiB: the socket is armed again.
      :ok = :gen_tcp.send(client, List.duplicate(echo, 300))
      # Each reply is "$8192\r\n" <> big <> "\r\n".
      drain(client, 300 * (8 * 1024 + 9))
      :erlang.trace(conn, false, [:call])
      :erlang.trace_pattern({Ringbus.Socket, :activate, 3}, false, [:local])
      armings = armings([])
      assert 4 in armings
      assert Enum.all?(armings, &(&1 in 4..64))
      :gen_tcp.close(client)
    end
  end

  defp armings(acc) do
    receive do
      {:trace, _pid, :call, {Ringbus.Socket, :activate, [_kind, _socket, reads]}} ->
        armings([reads | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  defp drain(_client, left) when left <= 0, do: :ok

  defp drain(client, left) do
    {:ok, data} = :gen_tcp.recv(client, 0, 10_000)
    drain(client, left - byte_size(data))
  end

  describe "slice/2" do
    test "keeps the bytes and their order, in pieces of at most the limit" do
      iodata =
        :proper_types.list(
          :proper_types.frequency([
            {4, :proper_types.binary()},
            {1, :proper_types.integer(0, 255)},
            {1, :proper_types.list(:proper_types.binary())}
          ])
        )

      property =
        FrameGenerators.forall({iodata, :proper_types.integer(1, 40)}, fn {data, limit} ->
          pieces = Socket.slice(data, limit)
          sizes = Enum.map(pieces, &IO.iodata_length/1)

          IO.iodata_to_binary(pieces) == IO.iodata_to_binary(data) and
            Enum.all?(sizes, &(&1 in 1..limit)) and
            Enum.all?(Enum.drop(sizes, -1), &(&1 == limit))
        end)

      assert FrameGenerators.check(property, 500) == true
    end

    test "splits a large binary into sub-binaries of the limit" do
      data = ["head", :binary.copy(<<7>>, 10), ?!]

      assert Socket.slice(data, 4) == [
               ["head"],
               [<<7, 7, 7, 7>>],
               [<<7, 7, 7, 7>>],
               [<<7, 7>>, "!"]
             ]
    end

    test "gives nothing for empty iodata" do
      assert Socket.slice([[], "", []], 8) == []
    end
  end
end
