defmodule Ringbus.Resp.StreamsTest do
  # What docs/RESP.md promises beyond what Redis does: creation, capacity,
  # waiting reads, bounded groups.
  use ExUnit.Case, async: false

  alias Ringbus.Resp.Groups
  alias Ringbus.Test.RespClient

  import Ringbus.Test.Eventually

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})

    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name) and String.starts_with?(name, "st-"),
          do: Ringbus.delete(name)
    end)

    {:ok, server: server, port: Ringbus.Server.port(server, :resp)}
  end

  test "MAXLEN on the XADD that creates a stream is its capacity; trims pull", %{port: port} do
    c = RespClient.connect!(port)
    {["1-0"], c} = RespClient.call(c, ~w(XADD st-cap MAXLEN 3 * a 1))
    assert {:ok, %{capacity: 3}} = Ringbus.info("st-cap")
    for i <- 2..5, do: {[_], _} = RespClient.call(c, ["XADD", "st-cap", "*", "a", "#{i}"])
    {[[["3-0", _], ["4-0", _], ["5-0", _]]], c} = RespClient.call(c, ~w(XRANGE st-cap - +))
    {[1], c} = RespClient.call(c, ~w(XTRIM st-cap MAXLEN 2))
    assert {:ok, %{pulled: 1, overwritten: 2, len: 2}} = Ringbus.info("st-cap")

    {[{:error, "ERR XINFO STREAM FULL is not supported" <> _}], _} =
      RespClient.call(c, ~w(XINFO STREAM st-cap FULL))
  end

  test "a rejecting stream answers XADD with an error when full", %{port: port} do
    Ringbus.create("st-rej", capacity: 1, overflow: :reject)
    c = RespClient.connect!(port)
    RespClient.send_commands(c, [~w(XADD st-rej * a 1), ~w(XADD st-rej * a 2)])

    {["1-0", {:error, "ERR stream 'st-rej' is full and its overflow is reject"}], _} =
      RespClient.recv(c, 2)
  end

  test "an XADD larger than the stream's max_bytes is refused; XADDs of one read are not",
       %{port: port} do
    :ok = Ringbus.create("st-bytes", capacity: 10, max_bytes: 10)
    c = RespClient.connect!(port)

    # Sent together, stored with one push: 12 bytes, each XADD 4.
    xadds = for v <- ~w(aaaa bbbb cccc), do: ["XADD", "st-bytes", "*", "payload", v]
    RespClient.send_commands(c, xadds ++ [~w(XADD st-bytes * payload 0123456789a)])

    assert {["1-0", "2-0", "3-0", {:error, error}], c} = RespClient.recv(c, 4)
    assert error == "ERR the entry is larger than stream 'st-bytes' holds (max_bytes)"

    # As three XADDs one by one: the oldest is overwritten to make room.
    {[[["2-0", ["payload", "bbbb"]], ["3-0", ["payload", "cccc"]]]], _} =
      RespClient.call(c, ~w(XRANGE st-bytes - +))

    assert {:ok, %{pushed: 3, overwritten: 1, rejected: 1}} = Ringbus.info("st-bytes")
  end

  test "commands behind a blocking XREAD wait with it, and come out in order", %{port: port} do
    reader = RespClient.connect!(port)
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-wait $), ~w(ECHO after)])
    assert eventually(fn -> info(port) =~ "blocked_clients:1" end)

    writer = RespClient.connect!(port)
    {["1-0"], _} = RespClient.call(writer, ~w(XADD st-wait * k v))
    {[[["st-wait", [["1-0", ["k", "v"]]]]], "after"], _} = RespClient.recv(reader, 2)
    assert info(port) =~ "blocked_clients:0"
  end

  test "a client that hangs up while blocked is noticed", %{server: server, port: port} do
    before = Ringbus.Server.connections(server, :resp)
    reader = RespClient.connect!(port)
    assert eventually(fn -> Ringbus.Server.connections(server, :resp) -- before != [] end)
    [conn] = Ringbus.Server.connections(server, :resp) -- before
    ref = Process.monitor(conn)
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-gone $)])
    assert eventually(fn -> info(port) =~ "blocked_clients:1" end)
    RespClient.close(reader)
    assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
    assert info(port) =~ "blocked_clients:0"
  end

  test "XREAD BLOCK times out with a null reply", %{port: port} do
    c = RespClient.connect!(port)
    {[nil], _} = RespClient.call(c, ~w(XREAD BLOCK 30 STREAMS st-timeout $))
  end

  test "with auto_create: false nothing makes a stream" do
    server =
      start_supervised!({Ringbus.Server, port: 0, resp_port: 0, auto_create: false},
        id: :no_create
      )

    c = RespClient.connect!(Ringbus.Server.port(server, :resp))

    {[{:error, "ERR no such stream 'st-none'" <> _}], c} =
      RespClient.call(c, ~w(XADD st-none * a 1))

    {[{:error, "ERR no such stream 'st-none'" <> _}], c} =
      RespClient.call(c, ~w(XGROUP CREATE st-none g $ MKSTREAM))

    {[{:error, "ERR no such stream 'st-none'" <> _}], _} =
      RespClient.call(c, ~w(XREAD BLOCK 10 STREAMS st-none $))

    assert {:error, :no_channel} = Ringbus.info("st-none")
  end

  test "a group's pending list is bounded and counts what it drops" do
    t = Groups.new()
    :ok = Groups.create(t, "s", "g", -1, 0)
    %{pending: max} = Groups.limits()
    Groups.add_pending(t, "s", "g", "c", Enum.to_list(0..(max + 4)), 0)
    assert {:ok, %{pending: ^max, dropped: 5}} = Groups.fetch(t, "s", "g")
    assert Groups.pending_bounds(t, "s", "g") == {5, max + 4}
    assert Groups.ack(t, "s", "g", [0, 5, 6]) == 2
    assert {:ok, %{pending: pending}} = Groups.fetch(t, "s", "g")
    assert pending == max - 2
  end

  defp info(port) do
    c = RespClient.connect!(port)
    {[info], _} = RespClient.call(c, ~w(INFO clients))
    RespClient.close(c)
    info
  end
end
