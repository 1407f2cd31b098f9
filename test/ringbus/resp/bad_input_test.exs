defmodule Ringbus.Resp.BadInputTest do
  # Every kind of bad input gets a RESP error and a closed connection, with
  # bounded memory, and the other clients go on as before.
  use ExUnit.Case, async: false

  alias Ringbus.Test.RespClient

  @moduletag timeout: 120_000

  setup do
    opts = [port: 0, resp_port: 0, resp_idle_timeout: 2_000, send_timeout: 1_000]
    server = start_supervised!({Ringbus.Server, opts})
    port = Ringbus.Server.port(server, :resp)
    bystander = RespClient.connect!(port)
    {[{:simple, "PONG"}], bystander} = RespClient.call(bystander, ["PING"])
    on_exit(fn -> Ringbus.delete("bad-s") end)
    {:ok, port: port, server: server, bystander: bystander}
  end

  # Sends `bytes`, expects `-ERR Protocol error: <detail>...` and the close;
  # checks the bystander, the server and the VM's memory.
  defp assert_refused(ctx, bytes, detail) do
    memory = :erlang.memory(:total)
    client = RespClient.connect!(ctx.port)
    RespClient.send_raw(client, bytes)
    reply = RespClient.recv_until_closed(client)
    assert reply =~ "-ERR Protocol error: " <> detail
    assert String.ends_with?(reply, "\r\n")

    {[{:simple, "PONG"}], _} = RespClient.call(ctx.bystander, ["PING"])
    assert Process.alive?(ctx.server)
    assert :erlang.memory(:total) - memory < 50_000_000
  end

  test "unbalanced array and bulk counts", ctx do
    # The bulk says 3 bytes and 5 come before the CRLF.
    assert_refused(
      ctx,
      "*2\r\n$4\r\nECHO\r\n$3\r\nhello\r\n",
      "expected '\\r\\n' after a bulk string"
    )

    # The array says 2 arguments and a command follows the first.
    assert_refused(ctx, "*2\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", "expected '$', got '*'")
  end

  test "a negative or 4 GB bulk length", ctx do
    assert_refused(ctx, "*1\r\n$-5\r\n", "invalid bulk length")
    assert_refused(ctx, "*1\r\n$4294967296\r\n", "invalid bulk length")
  end

  test "a 1 GB declared array is refused before anything is kept", ctx do
    assert_refused(ctx, "*1073741824\r\n$4\r\nPING\r\n", "invalid multibulk length")
  end

  test "an inline line past 64 KiB", ctx do
    assert_refused(ctx, :binary.copy("A", 70_000), "too big inline request")
  end

  test "binary garbage", ctx do
    garbage = :crypto.strong_rand_bytes(4096) |> :binary.replace(["\n", "*", "$"], "x", [:global])
    assert_refused(ctx, "*1\r\n" <> garbage <> "\n", "expected '$'")
    assert_refused(ctx, "GET \"" <> garbage <> "\n", "unbalanced quotes")
  end

  test "the commands before the bad bytes are answered first", ctx do
    client = RespClient.connect!(ctx.port)
    RespClient.send_raw(client, "PING\r\n*1\r\n$4\r\nECHO\r\n*x\r\n")
    reply = RespClient.recv_until_closed(client)

    assert reply ==
             "+PONG\r\n-ERR wrong number of arguments for 'echo' command\r\n" <>
               "-ERR Protocol error: invalid multibulk length\r\n"
  end

  test "a client that never reads its replies is closed, and nobody else waits", ctx do
    Ringbus.create("bad-s", capacity: 1_000)
    big = :binary.copy("x", 60_000)
    Ringbus.push_many("bad-s", List.duplicate(big, 100))

    memory = :erlang.memory(:total)
    before = Ringbus.Server.connections(ctx.server, :resp)

    {:ok, sock} =
      :gen_tcp.connect(~c"127.0.0.1", ctx.port, [:binary, active: false, recbuf: 4096])

    # Each XRANGE answers 6 MB; the client asks for 100 and reads nothing.
    xrange = IO.iodata_to_binary(RespClient.encode(["XRANGE", "bad-s", "-", "+"]))
    :gen_tcp.send(sock, :binary.copy(xrange, 100))

    # The bystander is answered all the while.
    for _ <- 1..5 do
      {[{:simple, "PONG"}], _} = RespClient.call(ctx.bystander, ["PING"])
    end

    # The connection gives up within its send timeout and closes.
    assert Ringbus.Test.Eventually.eventually(fn ->
             Ringbus.Server.connections(ctx.server, :resp) -- before != []
           end)

    [conn] = Ringbus.Server.connections(ctx.server, :resp) -- before
    ref = Process.monitor(conn)
    assert_receive {:DOWN, ^ref, :process, _, _}, 15_000
    assert :erlang.memory(:total) - memory < 200_000_000
    :gen_tcp.close(sock)
    assert Process.alive?(ctx.server)
  end

  test "an idle client is told and closed", ctx do
    client = RespClient.connect!(ctx.port)
    RespClient.send_raw(client, "*2\r\n$4\r\nECHO\r\n")
    assert RespClient.recv_until_closed(client) =~ "-ERR idle timeout"
  end
end
