defmodule Ringbus.SocketTest do
  use ExUnit.Case, async: true

  alias Ringbus.Socket.{TCP, TLS}

  doctest Ringbus.Socket

  describe "every transport" do
    for transport <- [TCP, TLS] do
      @transport transport
      test "#{inspect(transport)}: its socket's messages carry the tags messages/0 names" do
        {server, client} = pair(@transport)
        {data, passive, closed, _error} = @transport.messages()

        {:ok, {_, client_port}} = @transport.sockname(client)
        assert {:ok, {{127, 0, 0, 1}, ^client_port}} = @transport.peername(server)

        :ok = @transport.setopts(server, active: 1)
        :ok = @transport.send(client, "hello")
        assert_receive {^data, ^server, "hello"}, 5_000
        assert_receive {^passive, ^server}, 5_000
        assert @transport.queued(server) >= 0

        :ok = @transport.setopts(server, active: true)
        :ok = @transport.close(client)
        assert_receive {^closed, ^server}, 5_000
        :ok = @transport.close(server)
      end
    end
  end

  # A connected pair over `transport`, both ends owned by the caller.
  defp pair(transport) do
    {server_opts, client_opts} =
      if transport == TLS, do: Ringbus.Test.TLS.configs(), else: {[], []}

    base = [:binary, active: false, ip: {127, 0, 0, 1}]
    {:ok, listen} = transport.listen(0, base ++ server_opts)
    {:ok, {_, port}} = transport.sockname(listen)
    test = self()

    acceptor =
      Task.async(fn ->
        {:ok, socket} = transport.accept(listen, 5_000)
        {:ok, socket} = transport.handshake(socket, 5_000)
        :ok = transport.controlling_process(socket, test)
        socket
      end)

    {:ok, client} =
      transport.connect(~c"localhost", port, [:binary, active: false] ++ client_opts, 5_000)

    server = Task.await(acceptor)
    :ok = transport.close(listen)
    {server, client}
  end

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
      :erlang.trace_pattern({Ringbus.Socket.TCP, :setopts, 2}, true, [])
      1 = :erlang.trace(conn, true, [:call])
      big = :binary.copy("x", 8 * 1024)
      echo = ["*2\r\n$4\r\nECHO\r\n$8192\r\n", big, "\r\n"]
      # 300 of them are more than 62 reads of 16 KiB: the socket is armed again.
      :ok = :gen_tcp.send(client, List.duplicate(echo, 300))
      # Each reply is "$8192\r\n" <> big <> "\r\n".
      drain(client, 300 * (8 * 1024 + 9))
      :erlang.trace(conn, false, [:call])
      :erlang.trace_pattern({Ringbus.Socket.TCP, :setopts, 2}, false, [])
      armings = armings([])
      assert 4 in armings
      assert Enum.all?(armings, &(&1 in 4..64))
      :gen_tcp.close(client)
    end
  end

  defp armings(acc) do
    receive do
      {:trace, _pid, :call, {Ringbus.Socket.TCP, :setopts, [_socket, [active: reads]]}} ->
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
end
