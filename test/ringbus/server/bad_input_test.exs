defmodule Ringbus.Server.BadInputTest do
  # Every kind of bad input gets an ERROR frame with its code and a closed
  # connection, and touches nothing beyond that connection.
  use ExUnit.Case, async: false

  alias Ringbus.Test.RawClient
  alias Ringbus.Wire.Frame

  import Ringbus.Test.Eventually

  setup do
    opts = [port: 0, handshake_timeout: 300, idle_timeout: 1_000]
    server = start_supervised!({Ringbus.Server, opts})
    port = Ringbus.Server.port(server)
    {bystander, _} = RawClient.hello!(port)
    # The bystander's channel and its subscription, to check after each case.
    Ringbus.delete("bystander")
    :ok = Ringbus.create("bystander", capacity: 100)

    {{:subscribed, 1, sub}, bystander} =
      RawClient.call(bystander, {:subscribe, 1, "bystander", :latest, 100, 100})

    [conn] = Ringbus.Server.connections(server)
    on_exit(fn -> Ringbus.delete("bystander") end)
    {:ok, port: port, server: server, bystander: {bystander, conn, sub}, tree: tree(server)}
  end

  # The server's own processes: none may restart because of a client.
  defp tree(server), do: for({id, pid, _, _} <- Supervisor.which_children(server), do: {id, pid})

  # Sends `bytes`, expects an ERROR with `code` and then the close; checks that
  # nothing beyond that connection moved: the server's processes, the other
  # connection, its subscription, and the VM's memory.
  defp assert_refused(ctx, bytes, code, opts \\ []) do
    memory = :erlang.memory(:total)
    client = RawClient.connect!(ctx.port)
    if opts[:hello], do: RawClient.send_frames(client, [{:hello, 0, 3, 0, nil}])
    RawClient.send_raw(client, bytes)
    frames = RawClient.recv_until_closed(client)

    assert [{:error, _corr, ^code, message} | _] =
             Enum.reject(frames, &match?({:hello_ok, _, _, _}, &1))

    assert is_binary(message) and message != ""
    assert_untouched(ctx)
    assert :erlang.memory(:total) - memory < 50_000_000
  end

  defp assert_untouched(%{bystander: {bystander, conn, sub}} = ctx) do
    assert tree(ctx.server) == ctx.tree
    # The refused connection's process ends just after its socket closes.
    assert eventually(fn -> Ringbus.Server.connections(ctx.server) == [conn] end)
    {:ok, seq} = Ringbus.push("bystander", "still here")
    assert {[{:deliver, ^sub, 0, 1, [{^seq, "still here"}]}], _} = RawClient.recv(bystander, 1)
  end

  test "garbage bytes (an HTTP request)", ctx do
    assert_refused(ctx, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", :frame_too_large)
  end

  test "an unknown opcode before and after HELLO", ctx do
    assert_refused(ctx, <<0, 0, 0, 5, 0x77, 0, 0, 0, 1>>, :unknown_opcode)
    assert_refused(ctx, <<0, 0, 0, 5, 0x77, 0, 0, 0, 1>>, :unknown_opcode, hello: true)
  end

  test "a response opcode sent as a request", ctx do
    assert_refused(ctx, Frame.encode({:pong, 1}), :unknown_opcode, hello: true)
  end

  test "a frame whose body is shorter than its fields", ctx do
    assert_refused(ctx, <<0, 0, 0, 3, 0x0D, 0, 1>>, :bad_frame, hello: true)
  end

  test "an oversized length prefix is refused before anything is read", ctx do
    assert_refused(ctx, <<0xFFFFFFFF::32, 0x04>>, :frame_too_large, hello: true)
  end

  test "a frame before HELLO", ctx do
    assert_refused(ctx, Frame.encode({:ping, 1}), :not_hello_first)
  end

  test "a second HELLO", ctx do
    assert_refused(ctx, Frame.encode({:hello, 1, 3, 0, nil}), :bad_frame, hello: true)
  end

  test "an unknown protocol version: version 1's clients", ctx do
    assert_refused(ctx, Frame.encode({:hello, 1, 1, 0, nil}), :bad_version)
  end

  test "a client that never finishes HELLO times out", ctx do
    hello = IO.iodata_to_binary(Frame.encode({:hello, 0, 3, 0, nil}))
    assert_refused(ctx, binary_part(hello, 0, 6), :handshake_timeout)
  end

  test "a slowloris client trickling one frame runs into the idle timeout", ctx do
    client = RawClient.connect!(ctx.port)
    RawClient.send_frames(client, [{:hello, 0, 3, 0, nil}])
    {[{:hello_ok, 0, 3, _}], client} = RawClient.recv(client, 1)
    ping = IO.iodata_to_binary(Frame.encode({:ping, 1}))

    # One byte every 300 ms: each byte arrives well within the idle timeout,
    # but the frame as a whole does not.
    trickle =
      Task.async(fn ->
        for <<byte <- ping>>, do: RawClient.send_raw(client, <<byte>>) && Process.sleep(300)
      end)

    assert [{:error, 0, :idle_timeout, _}] = RawClient.recv_until_closed(client)
    Task.shutdown(trickle, :brutal_kill)

    # The bystander has idled out by now too; a new connection is served.
    {fresh, _} = RawClient.hello!(ctx.port)
    assert {{:pong, 2}, _} = RawClient.call(fresh, {:ping, 2})
  end

  test "a client that closes mid-frame leaves the others alone", ctx do
    client = RawClient.connect!(ctx.port)
    RawClient.send_frames(client, [{:hello, 0, 3, 0, nil}])
    {[{:hello_ok, _, _, _}], client} = RawClient.recv(client, 1)

    RawClient.send_raw(
      client,
      binary_part(IO.iodata_to_binary(Frame.encode({:push, 1, :ack, "x", "abc"})), 0, 9)
    )

    RawClient.close(client)
    assert_untouched(ctx)
  end

  test "a server opcode, whatever its body, is an unknown opcode", ctx do
    # HELLO_OK's opcode with a body that does not parse as HELLO_OK.
    assert_refused(ctx, <<0, 0, 0, 5, 0x81, 0, 0, 0, 1>>, :unknown_opcode, hello: true)
    assert_refused(ctx, <<0, 0, 0, 5, 0x81, 0, 0, 0, 1>>, :unknown_opcode)
  end
end
