defmodule Ringbus.Server.LimitsTest do
  # The server's limits, end to end: a client that stops reading, the output
  # bound, the credit cap, and frames within max_frame_size.
  use ExUnit.Case, async: false

  alias Ringbus.Test.{Internals, RawClient}

  import Ringbus.Test.Eventually

  setup do
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
  end

  defp start_server(opts) do
    server = start_supervised!({Ringbus.Server, [port: 0] ++ opts})
    {server, Ringbus.Server.port(server)}
  end

  test "a client that stops reading: the output stays bounded, and send_timeout closes it" do
    max_out = 64 * 1024

    {server, port} =
      start_server(
        buffer_size: 8 * 1024,
        max_out_bytes: max_out,
        send_timeout: 1_000,
        max_credit: 100_000
      )

    # A client with a small receive buffer that never reads once subscribed.
    {:ok, socket} =
      :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false, recbuf: 4096, sndbuf: 4096])

    frames = [{:hello, 0, 3, 0, nil}, {:subscribe, 1, "flood", :latest, 100_000, 256}]
    :ok = Ringbus.create("flood", capacity: 100_000)
    :ok = :gen_tcp.send(socket, Enum.map(frames, &Ringbus.Wire.Frame.encode/1))

    assert eventually(fn ->
             match?([conn] when is_pid(conn), Ringbus.Server.connections(server))
           end)

    [conn] = Ringbus.Server.connections(server)
    assert eventually(fn -> subscribed?(conn) end)
    ref = Process.monitor(conn)

    # 40 MB of deliveries, far more than every buffer on the way holds.
    payload = :binary.copy("x", 1024)
    for _ <- 1..40, do: {:ok, _} = Ringbus.push_many("flood", List.duplicate(payload, 1_000))

    # The connection waits on its socket, whose queue stays near the bound...
    assert eventually(fn -> Process.info(conn, :status) == {:status, :suspended} end)
    [port_id] = for p <- elem(Process.info(conn, :links), 1), is_port(p), do: p
    {:queue_size, queued} = :erlang.port_info(port_id, :queue_size)
    # The bound, and at most two writes past it: one DELIVER of 256 messages.
    deliver = 17 + 256 * (12 + 1024)
    assert queued <= max_out + 2 * deliver
    {:memory, memory} = Process.info(conn, :memory)
    assert memory < 16 * 1024 * 1024

    # ...until send_timeout closes it.
    assert_receive {:DOWN, ^ref, :process, _, _}, 10_000
    :gen_tcp.close(socket)
  end

  defp subscribed?(conn), do: map_size(:sys.get_state(conn).session.subs) == 1

  test "CREDIT beyond max_credit is capped" do
    {server, port} = start_server(max_credit: 10)
    {c, %{max_credit: 10}} = RawClient.hello!(port)
    :ok = Ringbus.create("capped", capacity: 1_000)
    {:ok, 0} = Ringbus.push_many("capped", Enum.map(1..100, &"#{&1}"))

    {{:subscribed, 1, sub}, c} = RawClient.call(c, {:subscribe, 1, "capped", :earliest, 1, 100})
    assert {[{:deliver, ^sub, 0, 1, [{0, "1"}]}], c} = RawClient.recv(c, 1)

    RawClient.send_frames(c, [{:credit, 2, sub, 1_000_000}])
    {delivered, c} = recv_deliveries(c, sub, 10, 0)
    assert delivered == 10

    # Every message the subscription could send has reached the socket (its
    # process and the connection's have handled all they were sent): no more.
    [conn] = Ringbus.Server.connections(server)
    [handle] = Map.values(:sys.get_state(conn).session.subs)
    :sys.get_state(Internals.subscription_pid(handle))
    :sys.get_state(conn)
    assert {{:pong, 3}, _} = RawClient.call(c, {:ping, 3})
  end

  defp recv_deliveries(c, _sub, want, got) when got >= want, do: {got, c}

  defp recv_deliveries(c, sub, want, got) do
    {[{:deliver, ^sub, 0, n, _}], c} = RawClient.recv(c, 1)
    recv_deliveries(c, sub, want, got + n)
  end

  test "READ_OK and DELIVER stay within max_frame_size, one message at least" do
    {_server, port} = start_server(max_frame_size: 1024)
    {c, %{max_payload_size: max_payload}} = RawClient.hello!(port)
    c = RawClient.limit(c, 1024)
    :ok = Ringbus.create("fit", capacity: 100)

    payloads = [:binary.copy("a", 500), :binary.copy("b", max_payload), "c", "d"]
    {:ok, 0} = Ringbus.push_many("fit", payloads)

    assert {{:read_ok, 1, 0, 1, [{0, _}]}, c} = RawClient.call(c, {:read, 1, "fit", 0, 10})
    assert {{:read_ok, 2, 0, 1, [{1, _}]}, c} = RawClient.call(c, {:read, 2, "fit", 1, 10})

    assert {{:read_ok, 3, 0, 2, [{2, "c"}, {3, "d"}]}, c} =
             RawClient.call(c, {:read, 3, "fit", 2, 10})

    {{:subscribed, 4, sub}, c} = RawClient.call(c, {:subscribe, 4, "fit", :earliest, 10, 10})
    {frames, _} = RawClient.recv(c, 3)
    assert Enum.map(frames, fn {:deliver, ^sub, 0, n, _} -> n end) == [1, 1, 2]
  end

  test "a client with a small max_frame_size server gets every ack of a long pipeline" do
    {_server, port} = start_server(max_frame_size: 1024)
    client = Ringbus.Client.connect!(port: port)

    # The connection, held while the pushes queue up, writes them all at once,
    # so the server reads acks for more entries than one frame holds.
    :ok = :sys.suspend(client.pid)
    for i <- 1..200, do: {:ok, _} = Ringbus.Client.push_async(client, "acks", "#{i}")
    :ok = :sys.resume(client.pid)

    frames = await_acks(client, 200, [])
    acks = Enum.concat(frames)
    assert Enum.map(acks, fn {_corr, {:ok, seq}} -> seq end) == Enum.to_list(0..199)

    # One owner message per PUSH_ACKS frame: the acks were split, cut where
    # a frame holds (1024 - 5) div 14 = 72 entries.
    assert length(frames) > 1
    assert Enum.all?(frames, &(length(&1) <= 72))
    assert Enum.any?(frames, &(length(&1) == 72))
  end

  # The entries of each PUSH_ACKS frame, in order.
  defp await_acks(_client, 0, frames), do: :lists.reverse(frames)

  defp await_acks(client, left, frames) do
    receive do
      {:ringbus_acks, ^client, acks} -> await_acks(client, left - length(acks), [acks | frames])
      {:ringbus_down, ^client, reason} -> flunk("the client went down: #{inspect(reason)}")
    after
      5_000 -> flunk("#{left} acks missing")
    end
  end
end
