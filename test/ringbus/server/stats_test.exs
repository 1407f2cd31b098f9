defmodule Ringbus.Server.StatsTest do
  # A server's figures and its connections' log lines, driven by a raw client.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog
  import Ringbus.Test.Eventually

  alias Ringbus.Server.Listener
  alias Ringbus.Test.RawClient

  setup do
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    :ok
  end

  defp start_server(opts) do
    server = start_supervised!({Ringbus.Server, [port: 0] ++ opts})
    {server, Ringbus.Server.port(server)}
  end

  # The server's counts, as Ringbus.Metrics finds them.
  defp counts(port) do
    %{counts: counts} = Enum.find(Ringbus.Metrics.snapshot().servers, &(&1.port == port))
    counts
  end

  defp local_port(%{socket: socket}) do
    {:ok, {_ip, port}} = :inet.sockname(socket)
    port
  end

  # Waits until every connection of the server has ended and logged.
  defp await_closed(server) do
    assert eventually(fn -> Ringbus.Server.connections(server) == [] end)
    Logger.flush()
  end

  test "one line when a connection opens and one when it closes, never one per message" do
    {server, port} = start_server(auto_create: [capacity: 100])

    log =
      capture_log(fn ->
        {c, _limits} = RawClient.hello!(port)
        send(self(), {:peer, local_port(c)})
        RawClient.send_frames(c, for(i <- 1..100, do: {:push, i, :ack, "logged", "m"}))
        {[{:push_acks, 100, _}], c} = RawClient.recv(c, 1)
        :ok = RawClient.close(c)
        await_closed(server)
      end)

    assert_received {:peer, peer}
    assert log =~ "Ringbus binary connection from 127.0.0.1:#{peer} opened (tcp)"

    assert log =~
             ~r/Ringbus binary connection from 127\.0\.0\.1:#{peer} closed \(peer_closed\) after \d+ ms: 101 frames in, 2 out, \d+ bytes in, \d+ out/

    assert length(Regex.scan(~r/Ringbus binary connection/, log)) == 2
  end

  test "connections by state, frames in and out, errors by code, closes by reason" do
    {server, port} = start_server(auto_create: false)
    :ok = Ringbus.create("full", capacity: 1, overflow: :reject)

    c = RawClient.connect!(port)
    assert eventually(fn -> counts(port).handshaking == 1 end)
    assert counts(port).open == 0

    RawClient.send_frames(c, [{:hello, 0, 3, 0, nil}])
    {[{:hello_ok, 0, 3, _}], c} = RawClient.recv(c, 1)
    assert %{handshaking: 0, open: 1} = counts(port)

    # Two pushes to a full reject channel (one fails), one to no channel,
    # and a LEN of no channel: three errors, of two codes.
    RawClient.send_frames(c, [
      {:push, 1, :ack, "full", "a"},
      {:push, 2, :ack, "full", "b"},
      {:push, 3, :ack, "missing", "c"}
    ])

    {[{:push_acks, 3, _}], c} = RawClient.recv(c, 1)
    {{:error, 4, :no_channel, _}, c} = RawClient.call(c, {:len, 4, "missing"})

    counts = counts(port)
    assert counts.errors.full == 1
    assert counts.errors.no_channel == 2
    # HELLO, three pushes, LEN; HELLO_OK, PUSH_ACKS, ERROR.
    assert %{frames_in: 5, frames_out: 3} = counts
    assert counts.bytes_in > 0 and counts.bytes_out > 0

    # A frame that is not a request: the server says why and closes.
    RawClient.send_frames(c, [{:pong, 5}])
    assert [{:error, 0, :unknown_opcode, _}] = RawClient.recv_until_closed(c)
    await_closed(server)

    counts = counts(port)
    assert %{handshaking: 0, open: 0, accepted: 1} = counts
    assert counts.closed.unknown_opcode == 1
    assert counts.errors.unknown_opcode == 1
    assert counts.closed.peer_closed == 0
  end

  test "connections refused at max_connections are counted, and logged as one count a second" do
    {server, port} = start_server(max_connections: 1)
    {_held, _} = RawClient.hello!(port)
    {_, listener, _, _} = List.keyfind(Supervisor.which_children(server), {Listener, :binary}, 0)

    log =
      capture_log(fn ->
        for _ <- 1..20 do
          c = RawClient.connect!(port)
          assert [{:error, 0, :server_busy, _}] = RawClient.recv_until_closed(c)
        end

        # The listener logs what it counted once its second is up.
        assert eventually(fn -> :sys.get_state(listener).refused_logged == 20 end, 1_000)
        Logger.flush()
      end)

    assert counts(port).refused == 20
    assert [line] = String.split(log, "\n") |> Enum.filter(&(&1 =~ "refused"))
    assert line =~ "[warning]"

    assert line =~
             "Ringbus refused 20 connections on 127.0.0.1:#{port} (binary) in the last second: " <>
               "max_connections (1) reached"
  end

  test "a client that stops reading is closed at send_timeout, with a warning" do
    {server, port} = start_server(send_timeout: 200, buffer_size: 4096, max_out_bytes: 16_384)

    :ok = Ringbus.create("flood", capacity: 1_000)
    {c, _} = RawClient.hello!(port)
    :ok = :inet.setopts(c.socket, recbuf: 4096)

    {{:subscribed, 1, _sub}, _c} =
      RawClient.call(c, {:subscribe, 1, "flood", :earliest, 10_000, 100})

    log =
      capture_log(fn ->
        # More than every buffer between the two ends holds; the client
        # reads none of it.
        payload = :binary.copy("x", 64 * 1024)
        for _ <- 1..400, do: Ringbus.push("flood", payload)
        assert eventually(fn -> Ringbus.Server.connections(server) == [] end, 2_000)
        Logger.flush()
      end)

    assert log =~ "[warning]"
    assert log =~ "did not read what it was sent within the server's send_timeout (slow consumer)"
    assert log =~ "closed (send_timeout)"
    assert counts(port).closed.send_timeout == 1
  end
end
