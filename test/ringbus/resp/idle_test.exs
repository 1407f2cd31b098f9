defmodule Ringbus.Resp.IdleTest do
  # RESP clients may idle as with Redis's `timeout 0`, whatever the binary
  # protocol's idle timeout; `:resp_idle_timeout` bounds them.
  use ExUnit.Case, async: false

  alias Ringbus.Test.RespClient

  test "the RESP idle timeout is off by default, and :resp_idle_timeout sets it" do
    # The binary protocol's idle timeout does not reach RESP clients.
    lax = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, idle_timeout: 50}, id: :lax)

    strict =
      start_supervised!({Ringbus.Server, port: 0, resp_port: 0, resp_idle_timeout: 50},
        id: :strict
      )

    idle = RespClient.connect!(Ringbus.Server.port(lax, :resp))
    {[{:simple, "PONG"}], idle} = RespClient.call(idle, ~w(PING))
    {[["timeout", "0"]], idle} = RespClient.call(idle, ~w(CONFIG GET timeout))

    timed = RespClient.connect!(Ringbus.Server.port(strict, :resp))
    {[{:simple, "PONG"}], timed} = RespClient.call(timed, ~w(PING))
    # At least 50 ms have passed once the strict server has closed its client.
    assert RespClient.recv_until_closed(timed) =~ "-ERR idle timeout"

    {[{:simple, "PONG"}], _} = RespClient.call(idle, ~w(PING))
  end

  test "the release sets it with RINGBUS_RESP_IDLE_TIMEOUT" do
    {:ok, boot} = Ringbus.Release.Config.load(%{"RINGBUS_RESP_IDLE_TIMEOUT" => "60000"})
    assert boot.server[:resp_idle_timeout] == 60_000
    assert %{resp_idle_timeout: 60_000} = Ringbus.Server.Config.new!(boot.server)
    {:ok, boot} = Ringbus.Release.Config.load(%{})
    assert %{resp_idle_timeout: :infinity} = Ringbus.Server.Config.new!(boot.server)
  end
end
