defmodule Ringbus.Resp.ClientCommandsTest do
  # CLIENT LIST, INFO and KILL over a raw socket: what a client that kills
  # another sees, and who may kill.
  use ExUnit.Case, async: false

  alias Ringbus.Test.RespClient

  setup do
    tokens = %{"admin" => :all, "reader" => [read: :all, write: [], manage: []]}
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, tokens: tokens})
    {:ok, port: Ringbus.Server.port(server, :resp), binary: Ringbus.Server.port(server)}
  end

  defp fields(line) do
    for pair <- String.split(line, " ", trim: true), into: %{} do
      [key, value] = String.split(pair, "=", parts: 2)
      {key, value}
    end
  end

  test "CLIENT KILL ADDR closes that client; the list then leaves it out", %{port: port} do
    admin = RespClient.auth!(port, "admin")
    victim = RespClient.auth!(port, "admin")
    {[{:simple, "OK"}], victim} = RespClient.call(victim, ~w(CLIENT SETNAME victim))
    {[info], victim} = RespClient.call(victim, ~w(CLIENT INFO))
    %{"addr" => addr, "id" => id, "name" => "victim"} = fields(info)

    {[list], admin} = RespClient.call(admin, ~w(CLIENT LIST))
    lines = list |> String.split("\n", trim: true) |> Enum.map(&fields/1)
    assert Enum.count(lines) == 2
    assert %{"id" => ^id, "name" => "victim"} = Enum.find(lines, &(&1["addr"] == addr))

    [pid] = for c <- Ringbus.Server.clients(), "#{c.id}" == id, do: c.pid
    ref = Process.monitor(pid)
    {[1], admin} = RespClient.call(admin, ["CLIENT", "KILL", "ADDR", addr])
    assert RespClient.recv_until_closed(victim) == ""
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000

    {[list], admin} = RespClient.call(admin, ~w(CLIENT LIST))
    refute list =~ "name=victim"
    {[{:error, "ERR No such client"}], _} = RespClient.call(admin, ["CLIENT", "KILL", addr])
  end

  test "a token without every grant may list clients but not kill them", %{port: port} do
    admin = RespClient.auth!(port, "admin")
    reader = RespClient.auth!(port, "reader")
    {[list], reader} = RespClient.call(reader, ~w(CLIENT LIST))
    assert list |> String.split("\n", trim: true) |> Enum.count() == 2
    {[{:error, "NOPERM" <> _}], _} = RespClient.call(reader, ~w(CLIENT KILL TYPE normal))
    {[_pong], _} = RespClient.call(admin, ~w(PING))
  end

  test "the list holds this listener's RESP clients only, not the binary protocol's", %{
    port: port,
    binary: binary
  } do
    {:ok, client} = Ringbus.Client.connect(port: binary, token: "admin")
    admin = RespClient.auth!(port, "admin")
    {[list], _} = RespClient.call(admin, ~w(CLIENT LIST))
    assert list |> String.split("\n", trim: true) |> Enum.count() == 1
    Ringbus.Client.close(client)
  end
end
