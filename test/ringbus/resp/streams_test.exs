defmodule Ringbus.Resp.StreamsTest do
  # What docs/RESP.md promises beyond what Redis does: creation, capacity,
  # waiting reads, bounded groups.
  use ExUnit.Case, async: false

  alias Ringbus.Group.Table
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

  test "a stream created over RESP is bounded by resp_stream_max_bytes, not by a count" do
    server =
      start_supervised!(
        {Ringbus.Server,
         port: 0, resp_port: 0, auto_create: [capacity: 3], resp_stream_max_bytes: 1_000},
        id: :bytes
      )

    c = RespClient.connect!(Ringbus.Server.port(server, :resp))
    {["1-" <> _], c} = RespClient.call(c, ~w(XADD st-cap MAXLEN 3 * a 1))

    c =
      Enum.reduce(2..6, c, fn i, c ->
        {[_], c} = RespClient.call(c, ["XADD", "st-cap", "MAXLEN", "10", "*", "a", "#{i}"])
        c
      end)

    {[6], c} = RespClient.call(c, ~w(XLEN st-cap))
    assert {:ok, %{capacity: 62, max_bytes: 1_000, overwritten: 0}} = Ringbus.info("st-cap")
    {[4], c} = RespClient.call(c, ~w(XTRIM st-cap MAXLEN 2))
    assert {:ok, %{pulled: 4, len: 2}} = Ringbus.info("st-cap")

    # Past the byte bound the oldest entries are overwritten, and counted.
    value = String.duplicate("v", 200)

    c =
      Enum.reduce(1..10, c, fn _, c ->
        {[_], c} = RespClient.call(c, ["XADD", "st-cap", "*", "a", value])
        c
      end)

    {:ok, info} = Ringbus.info("st-cap")
    assert info.bytes <= 1_000 and info.len == 4 and info.overwritten == 8
    {[xinfo], _} = RespClient.call(c, ~w(XINFO STREAM st-cap))
    xinfo = xinfo |> Enum.chunk_every(2) |> Map.new(fn [k, v] -> {k, v} end)
    assert %{"max-bytes" => 1_000, "overwritten" => 8, "pulled" => 4, "length" => 4} = xinfo
  end

  test "with resp_stream_replicas, XADD creates a replicated stream that XRANGE reads back" do
    server =
      start_supervised!(
        {Ringbus.Server,
         port: 0, resp_port: 0, resp_stream_replicas: 1, resp_stream_max_bytes: 10_000},
        id: :replicated
      )

    c = RespClient.connect!(Ringbus.Server.port(server, :resp))
    {["1-" <> _], c} = RespClient.call(c, ~w(XADD st-repl * a 1))
    {["2-" <> _], c} = RespClient.call(c, ~w(XADD st-repl * b 2))

    assert {:ok, %{replicas: 1, members: [member], max_bytes: 10_000}} = Ringbus.info("st-repl")
    assert member == node()

    {[entries], c} = RespClient.call(c, ~w(XRANGE st-repl - +))
    assert [["1-" <> _, ["a", "1"]], ["2-" <> _, ["b", "2"]]] = entries
    {[2], _} = RespClient.call(c, ~w(XLEN st-repl))

    # More replicas than nodes connected: the XADD that would create it fails.
    wide =
      start_supervised!({Ringbus.Server, port: 0, resp_port: 0, resp_stream_replicas: 2},
        id: :wide
      )

    c = RespClient.connect!(Ringbus.Server.port(wide, :resp))
    {[{:error, "CLUSTERDOWN " <> _}], _} = RespClient.call(c, ~w(XADD st-wide * a 1))
    assert {:error, :no_channel} = Ringbus.info("st-wide")

    assert_raise ArgumentError, ~r/resp_stream_replicas/, fn ->
      Ringbus.Server.Config.new!(resp_stream_replicas: 0)
    end
  end

  test "INFO memory shows the streams' bytes and their bound", %{port: port} do
    c = RespClient.connect!(port)

    {["1-" <> _], c} =
      RespClient.call(c, ["XADD", "st-mem", "*", "payload", String.duplicate("x", 1000)])

    {[info], c} = RespClient.call(c, ~w(INFO memory))
    assert info =~ "# Memory\r\n"
    assert info =~ "resp_stream_max_bytes:67108864\r\n"
    [_, held] = Regex.run(~r/ringbus_stream_bytes:(\d+)/, info)
    assert String.to_integer(held) >= 1000
    {[all], _} = RespClient.call(c, ~w(INFO))
    assert all =~ "# Memory" and all =~ "# Keyspace"
  end

  test "the stream options follow the server's: bytes, and the capacity that backs them" do
    config = Ringbus.Server.Config.new!([])
    opts = Ringbus.Resp.Keys.stream_options(config)
    assert opts[:max_bytes] == 64 * 1024 * 1024 and opts[:capacity] == 4 * 1024 * 1024
    assert opts[:overflow] == :drop_oldest

    big = Ringbus.Server.Config.new!(resp_stream_max_bytes: 2 ** 40)
    assert Ringbus.Resp.Keys.stream_options(big)[:capacity] == 0xFFFF_FFFF
    refute Ringbus.Resp.Keys.stream_options(%{config | auto_create: false})
    refute Keyword.has_key?(opts, :replicas)

    assert_raise ArgumentError, ~r/resp_stream_max_bytes/, fn ->
      Ringbus.Server.Config.new!(resp_stream_max_bytes: 0)
    end
  end

  test "a rejecting stream answers XADD with an error when full", %{port: port} do
    Ringbus.create("st-rej", capacity: 1, overflow: :reject)
    c = RespClient.connect!(port)
    RespClient.send_commands(c, [~w(XADD st-rej * a 1), ~w(XADD st-rej * a 2)])

    {["1-" <> _, {:error, "ERR stream 'st-rej' is full and its overflow is reject"}], _} =
      RespClient.recv(c, 2)
  end

  test "an XADD larger than the stream's max_bytes is refused; XADDs of one read are not",
       %{port: port} do
    :ok = Ringbus.create("st-bytes", capacity: 10, max_bytes: 10)
    c = RespClient.connect!(port)

    # Sent together, stored with one push: 12 bytes, each XADD 4.
    xadds = for v <- ~w(aaaa bbbb cccc), do: ["XADD", "st-bytes", "*", "payload", v]
    RespClient.send_commands(c, xadds ++ [~w(XADD st-bytes * payload 0123456789a)])

    assert {["1-" <> _, "2-" <> _, "3-" <> _, {:error, error}], c} = RespClient.recv(c, 4)
    assert error == "ERR the entry is larger than the max_bytes of stream 'st-bytes'"

    # As three XADDs one by one: the oldest is overwritten to make room.
    {[[["2-" <> _, ["payload", "bbbb"]], ["3-" <> _, ["payload", "cccc"]]]], _} =
      RespClient.call(c, ~w(XRANGE st-bytes - +))

    assert {:ok, %{pushed: 3, overwritten: 1, rejected: 1}} = Ringbus.info("st-bytes")
  end

  test "commands behind a blocking XREAD wait with it, and come out in order", %{port: port} do
    reader = RespClient.connect!(port)
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-wait $), ~w(ECHO after)])
    assert eventually(fn -> RespClient.info!(port, "clients") =~ "blocked_clients:1" end)

    writer = RespClient.connect!(port)
    {["1-" <> _], _} = RespClient.call(writer, ~w(XADD st-wait * k v))
    {[[["st-wait", [["1-" <> _, ["k", "v"]]]]], "after"], _} = RespClient.recv(reader, 2)
    assert RespClient.info!(port, "clients") =~ "blocked_clients:0"
  end

  test "reads that come while XREAD BLOCK waits run in order, even when one waits again",
       %{server: server, port: port} do
    before = Ringbus.Server.connections(server, :resp)
    reader = RespClient.connect!(port)
    assert eventually(fn -> Ringbus.Server.connections(server, :resp) -- before != [] end)
    [conn] = Ringbus.Server.connections(server, :resp) -- before
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-held-a $)])
    assert eventually(fn -> RespClient.info!(port, "clients") =~ "blocked_clients:1" end)

    # Two reads while it waits, held as they came: a second wait, then ECHO.
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-held-b $)])
    assert eventually(fn -> length(:sys.get_state(conn).held) == 1 end)
    RespClient.send_commands(reader, [~w(ECHO after)])
    assert eventually(fn -> length(:sys.get_state(conn).held) == 2 end)

    writer = RespClient.connect!(port)
    {["1-" <> _], _} = RespClient.call(writer, ~w(XADD st-held-a * k v))
    {[[["st-held-a", [["1-" <> _, ["k", "v"]]]]]], reader} = RespClient.recv(reader, 1)
    {["1-" <> _], _} = RespClient.call(writer, ~w(XADD st-held-b * k v))
    {[[["st-held-b", [["1-" <> _, ["k", "v"]]]]], "after"], _} = RespClient.recv(reader, 2)
  end

  test "a client that hangs up while blocked is noticed", %{server: server, port: port} do
    before = Ringbus.Server.connections(server, :resp)
    reader = RespClient.connect!(port)
    assert eventually(fn -> Ringbus.Server.connections(server, :resp) -- before != [] end)
    [conn] = Ringbus.Server.connections(server, :resp) -- before
    ref = Process.monitor(conn)
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-gone $)])
    assert eventually(fn -> RespClient.info!(port, "clients") =~ "blocked_clients:1" end)
    RespClient.close(reader)
    assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
    assert RespClient.info!(port, "clients") =~ "blocked_clients:0"
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

  test "XPENDING with a huge count and XINFO STREAM FULL COUNT 0 answer a group's whole PEL",
       %{port: port} do
    c = RespClient.connect!(port)
    {[id1], c} = RespClient.call(c, ~w(XADD st-pel * n 1))
    {[id2], c} = RespClient.call(c, ~w(XADD st-pel * n 2))
    {[{:simple, "OK"}], c} = RespClient.call(c, ~w(XGROUP CREATE st-pel g 0))
    {[[_]], c} = RespClient.call(c, ~w(XREADGROUP GROUP g alice STREAMS st-pel >))

    {[[[^id1, "alice", _, 1], [^id2, "alice", _, 1]]], c} =
      RespClient.call(c, ~w(XPENDING st-pel g - + 1000000000000))

    {[fields], _} = RespClient.call(c, ~w(XINFO STREAM st-pel FULL COUNT 0))
    full = fields |> Enum.chunk_every(2) |> Map.new(fn [k, v] -> {k, v} end)
    [group] = full["groups"]
    group = group |> Enum.chunk_every(2) |> Map.new(fn [k, v] -> {k, v} end)
    assert [[^id1, "alice", _, 1], [^id2, "alice", _, 1]] = group["pending"]
  end

  test "a group's pending list is bounded and counts what it drops" do
    # The node's table, under an incarnation no channel has.
    t = Table.table()
    s = {:bounded_pel_test, make_ref()}
    on_exit(fn -> Table.drop(t, s) end)
    :ok = Table.create(t, s, "g", -1, 0)
    %{pending: max} = Table.limits()
    Table.add_pending(t, s, "g", "c", Enum.to_list(0..(max + 4)), 0)
    assert {:ok, %{pending: ^max, dropped: 5}} = Table.fetch(t, s, "g")
    assert Table.pending_bounds(t, s, "g") == {5, max + 4}
    assert {2, %{"c" => acked}} = Table.ack(t, s, "g", [0, 5, 6])
    assert Enum.sort(acked) == [5, 6]
    assert {:ok, %{pending: pending}} = Table.fetch(t, s, "g")
    assert pending == max - 2
  end

  describe "IDs carry the stream's incarnation" do
    @gone "ERR stream 'st-inc' was created again since that incarnation"

    # Three entries, their IDs; then the stream is deleted and made again with five.
    defp recreated(c) do
      {["1-" <> tag], c} = RespClient.call(c, ~w(XADD st-inc * a 1))

      {["2-" <> ^tag, "3-" <> ^tag], c} =
        RespClient.calls(c, [~w(XADD st-inc * b 2), ~w(XADD st-inc * c 3)])

      {:ok, %{incarnation: inc}} = Ringbus.info("st-inc")
      assert tag == Integer.to_string(Ringbus.Resp.Entry.tag(inc))

      {[1], c} = RespClient.call(c, ~w(DEL st-inc))

      {_, c} = RespClient.calls(c, for(n <- 1..5, do: ["XADD", "st-inc", "*", "n", "#{n}"]))

      {["1-" <> new], c} = RespClient.call(c, ~w(XRANGE st-inc - + COUNT 1)) |> first_id()
      assert new != tag
      {tag, new, c}
    end

    defp first_id({[[[id, _] | _]], c}), do: {[id], c}

    test "a read from an ID of the stream's last incarnation is told so, by every command",
         %{port: port} do
      {old, new, c} = recreated(RespClient.connect!(port))
      {[{:simple, "OK"}], c} = RespClient.call(c, ~w(XGROUP CREATE st-inc g 0))

      for command <- [
            ~w(XREAD STREAMS st-inc 2-#{old}),
            ~w(XREAD BLOCK 0 STREAMS st-inc 2-#{old}),
            ~w(XRANGE st-inc 2-#{old} +),
            ~w[XRANGE st-inc (2-#{old} +],
            ~w(XREVRANGE st-inc + 2-#{old}),
            ~w(XREADGROUP GROUP g alice STREAMS st-inc 2-#{old}),
            ~w(XGROUP SETID st-inc g 2-#{old}),
            ~w(XAUTOCLAIM st-inc g alice 0 2-#{old}),
            ~w(XPENDING st-inc g 2-#{old} + 10),
            ~w(XCLAIM st-inc g alice 0 1-#{new} LASTID 2-#{old})
          ] do
        {[reply], _} = RespClient.call(c, command)
        assert reply == {:error, @gone}, Enum.join(command, " ")
      end

      # IDs of the new incarnation, and IDs that state none (sequence 0,
      # or an incomplete one), read as before.
      {[[["st-inc", [["3-" <> ^new, _], ["4-" <> ^new, _], ["5-" <> ^new, _]]]]], c} =
        RespClient.call(c, ~w(XREAD STREAMS st-inc 2-#{new}))

      {[[["st-inc", [["3-" <> ^new, _] | _]]]], c} =
        RespClient.call(c, ~w(XREAD STREAMS st-inc 2-0))

      {[[["2-" <> ^new, _]]], c} = RespClient.call(c, ~w[XRANGE st-inc (1-#{new} 2])
      {[[["2-" <> ^new, _]]], c} = RespClient.call(c, ~w(XRANGE st-inc 2 2))

      # An ID of another incarnation names no entry of this one.
      {[0], c} = RespClient.call(c, ~w(XACK st-inc g 1-#{old}))
      {[0], _} = RespClient.call(c, ~w(XDEL st-inc 1-#{old}))
    end

    test "XINFO and XADD's errors give IDs of the stream's tag", %{port: port} do
      {_old, new, c} = recreated(RespClient.connect!(port))
      {[info], c} = RespClient.call(c, ~w(XINFO STREAM st-inc))
      info = Enum.chunk_every(info, 2)
      assert ["last-generated-id", "5-" <> new] in info
      assert ["recorded-first-entry-id", "1-" <> new] in info

      {[{:error, message}], c} = RespClient.call(c, ~w(XADD st-inc 9-0 a 1))
      assert message =~ "next ID, 6-#{new}:"

      # The stream's own next ID, with its tag or without, is taken.
      {["6-" <> ^new], c} = RespClient.call(c, ~w(XADD st-inc 6-#{new} a 1))
      {["7-" <> ^new], _} = RespClient.call(c, ~w(XADD st-inc 7-0 a 1))
    end
  end
end
