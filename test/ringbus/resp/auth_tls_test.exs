defmodule Ringbus.Resp.AuthTLSTest do
  # The RESP listener takes the binary listener's tokens, grants and TLS.
  use ExUnit.Case, async: false

  # TLS alerts from refused handshakes are expected here.
  @moduletag :capture_log

  alias Ringbus.Test.{RedisTools, RespClient, TLS}

  describe "tokens" do
    setup do
      tokens = %{
        "root" => :all,
        "app" => [read: ["ra."], write: ["ra."], manage: ["ra."]],
        "reader" => [read: :all]
      }

      server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, tokens: tokens})
      on_exit(fn -> Enum.each(["ra.s", "ra-other"], &Ringbus.delete/1) end)
      {:ok, port: Ringbus.Server.port(server, :resp)}
    end

    test "commands wait for AUTH; a wrong token is refused", %{port: port} do
      c = RespClient.connect!(port)
      {[{:error, "NOAUTH Authentication required."}], c} = RespClient.call(c, ~w(XLEN ra.s))
      {[{:error, "NOAUTH HELLO must be called" <> _}], c} = RespClient.call(c, ~w(HELLO 3))
      {[{:error, "WRONGPASS" <> _}], c} = RespClient.call(c, ~w(AUTH nope))
      {[{:error, "WRONGPASS" <> _}], c} = RespClient.call(c, ~w(AUTH someone root))
      {[{:simple, "OK"}], c} = RespClient.call(c, ~w(AUTH root))
      {[0], _} = RespClient.call(c, ~w(XLEN ra.s))
    end

    test "HELLO 3 AUTH default token authenticates and switches to RESP3", %{port: port} do
      c = RespClient.connect!(port)
      {[{:map, hello}], c} = RespClient.call(c, ~w(HELLO 3 AUTH default app SETNAME worker))
      assert {"proto", 3} in hello
      {["worker"], _} = RespClient.call(c, ~w(CLIENT GETNAME))
    end

    test "grants limit a token to its prefixes, for reads and writes", %{port: port} do
      c = RespClient.connect!(port)
      {[{:simple, "OK"}], c} = RespClient.call(c, ~w(AUTH app))
      {[_], c} = RespClient.call(c, ~w(XADD ra.s * f v))
      {[{:error, "NOPERM" <> _}], c} = RespClient.call(c, ~w(XADD ra-other * f v))
      {[{:error, "NOPERM" <> _}], c} = RespClient.call(c, ~w(XRANGE ra-other - +))
      {[{:error, "NOPERM" <> _}], _} = RespClient.call(c, ~w(XREAD STREAMS ra.s ra-other 0 0))

      r = RespClient.connect!(port)
      {[{:simple, "OK"}], r} = RespClient.call(r, ~w(AUTH default reader))
      {[[[_, ["f", "v"]]]], r} = RespClient.call(r, ~w(XRANGE ra.s - +))
      {[{:error, "NOPERM" <> _}], r} = RespClient.call(r, ~w(XADD ra.s * f v))
      {[{:error, "NOPERM" <> _}], _} = RespClient.call(r, ~w(DEL ra.s))

      # Deleting a channel takes the manage grant, which "app" has on "ra." only.
      m = RespClient.connect!(port)
      {[{:simple, "OK"}], m} = RespClient.call(m, ~w(AUTH app))
      {[{:error, "NOPERM" <> _}], m} = RespClient.call(m, ~w(DEL ra-other))
      {[1], _} = RespClient.call(m, ~w(DEL ra.s))
    end

    test "before AUTH, commands are held to small limits", %{port: port} do
      c = RespClient.connect!(port)
      RespClient.send_raw(c, "*1000\r\n")

      assert RespClient.recv_until_closed(c) ==
               "-ERR Protocol error: invalid multibulk length\r\n"
    end

    test "redis-cli authenticates with -a", %{port: port} do
      assert RedisTools.cli!(port, ~w(-a root --no-auth-warning XADD ra.s * f v)) =~
               ~r/\A\d{13}-\d+\n\z/
    end
  end

  test "RESP over TLS" do
    {server_tls, client_tls} = TLS.configs()
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, tls: server_tls})
    on_exit(fn -> Ringbus.delete("rt-tls") end)
    c = RespClient.connect!(Ringbus.Server.port(server, :resp), tls: client_tls)
    {[_], c} = RespClient.call(c, ~w(XADD rt-tls * over tls))
    {[[[_, ["over", "tls"]]]], _} = RespClient.call(c, ~w(XRANGE rt-tls - +))
  end

  test "a stopping server answers what it read, says why and closes" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    c = RespClient.connect!(Ringbus.Server.port(server, :resp))
    {[{:simple, "PONG"}], c} = RespClient.call(c, ~w(PING))
    stop_supervised!(Ringbus.Server)
    assert RespClient.recv_until_closed(c) == "-ERR the server is shutting down\r\n"
  end

  test "a full listener refuses with Redis's error" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, max_connections: 1})
    port = Ringbus.Server.port(server, :resp)
    c = RespClient.connect!(port)
    {[{:simple, "PONG"}], _} = RespClient.call(c, ~w(PING))
    refused = RespClient.connect!(port)
    assert RespClient.recv_until_closed(refused) == "-ERR max number of clients reached\r\n"
    assert %{refused: 1, connections: 1} = Ringbus.Server.stats(server, :resp)
  end
end
