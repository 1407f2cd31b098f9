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
    {[_], c} = RespClient.call(c, ~w(XADD st-cap MAXLEN 3 * a 1))

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
    {[_], c} = RespClient.call(c, ~w(XADD st-repl * a 1))
    {[_], c} = RespClient.call(c, ~w(XADD st-repl * b 2))

    assert {:ok, %{replicas: 1, members: [member], max_bytes: 10_000}} = Ringbus.info("st-repl")
    assert member == node()

    {[entries], c} = RespClient.call(c, ~w(XRANGE st-repl - +))
    assert [[first, ["a", "1"]], [second, ["b", "2"]]] = entries
    # The IDs the leader gave, as XADD answered them; a client's own ID and
    # XSETID decided in the log too.
    assert id!(first) < id!(second)

    {[2, "99999999999999-0", {:simple, "OK"}, "99999999999999-2"], _} =
      RespClient.calls(c, [
        ~w(XLEN st-repl),
        ~w(XADD st-repl 99999999999999-0 c 3),
        ~w(XSETID st-repl 99999999999999-1),
        ~w(XADD st-repl 99999999999999-* d 4)
      ])

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

    {[_], c} = RespClient.call(c, ["XADD", "st-mem", "*", "payload", String.duplicate("x", 1000)])

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

    {[_, {:error, "ERR stream 'st-rej' is full and its overflow is reject"}], _} =
      RespClient.recv(c, 2)
  end

  test "an XADD larger than the stream's max_bytes is refused; XADDs of one read are not",
       %{port: port} do
    :ok = Ringbus.create("st-bytes", capacity: 10, max_bytes: 10)
    c = RespClient.connect!(port)

    # Sent together, stored with one push: 12 bytes, each XADD 4.
    xadds = for v <- ~w(aaaa bbbb cccc), do: ["XADD", "st-bytes", "*", "payload", v]
    RespClient.send_commands(c, xadds ++ [~w(XADD st-bytes * payload 0123456789a)])

    assert {[_, _, _, {:error, error}], c} = RespClient.recv(c, 4)
    assert error == "ERR the entry is larger than the max_bytes of stream 'st-bytes'"

    # As three XADDs one by one: the oldest is overwritten to make room.
    {[[[_, ["payload", "bbbb"]], [_, ["payload", "cccc"]]]], _} =
      RespClient.call(c, ~w(XRANGE st-bytes - +))

    assert {:ok, %{pushed: 3, overwritten: 1, rejected: 1}} = Ringbus.info("st-bytes")
  end

  test "commands behind a blocking XREAD wait with it, and come out in order", %{port: port} do
    reader = RespClient.connect!(port)
    RespClient.send_commands(reader, [~w(XREAD BLOCK 0 STREAMS st-wait $), ~w(ECHO after)])
    assert eventually(fn -> RespClient.info!(port, "clients") =~ "blocked_clients:1" end)

    writer = RespClient.connect!(port)
    {[_], _} = RespClient.call(writer, ~w(XADD st-wait * k v))
    {[[["st-wait", [[_, ["k", "v"]]]]], "after"], _} = RespClient.recv(reader, 2)
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
    {[_], _} = RespClient.call(writer, ~w(XADD st-held-a * k v))
    {[[["st-held-a", [[_, ["k", "v"]]]]]], reader} = RespClient.recv(reader, 1)
    {[_], _} = RespClient.call(writer, ~w(XADD st-held-b * k v))
    {[[["st-held-b", [[_, ["k", "v"]]]]], "after"], _} = RespClient.recv(reader, 2)
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

  describe "IDs are Redis's" do
    test "an entry a group has pending that the ring overwrote is named 0-<seq + 1>, and acked by it",
         %{port: port} do
      Ringbus.delete("st-lapped")
      :ok = Ringbus.create("st-lapped", capacity: 2)
      c = RespClient.connect!(port)

      {[_, _, {:simple, "OK"}, [["st-lapped", [_, _]]], _, _, pending], c} =
        RespClient.calls(c, [
          ~w(XADD st-lapped * n 0),
          ~w(XADD st-lapped * n 1),
          ~w(XGROUP CREATE st-lapped g 0),
          ~w(XREADGROUP GROUP g alice STREAMS st-lapped >),
          ~w(XADD st-lapped * n 2),
          ~w(XADD st-lapped * n 3),
          ~w(XPENDING st-lapped g - + 10)
        ])

      assert Enum.map(pending, &hd/1) == ["0-1", "0-2"]

      {[1, [[id, _, _, _]]], _} =
        RespClient.calls(c, [~w(XACK st-lapped g 0-1), ~w(XPENDING st-lapped g - + 10)])

      assert id == "0-2"
    end

    defp id!(text) do
      [ms, n] = String.split(text, "-")
      {String.to_integer(ms), String.to_integer(n)}
    end

    test "auto IDs are the time of storing and a counter, and increase; a stream made again goes on later",
         %{port: port} do
      Ringbus.delete("st-ids")
      c = RespClient.connect!(port)
      before = System.system_time(:millisecond)
      {ids, c} = RespClient.calls(c, for(n <- 1..50, do: ["XADD", "st-ids", "*", "n", "#{n}"]))
      after_ = System.system_time(:millisecond)
      ids = Enum.map(ids, &id!/1)
      assert ids == Enum.sort(ids) and ids == Enum.uniq(ids)
      assert Enum.all?(ids, fn {ms, _n} -> ms >= before and ms <= after_ end)

      # What XRANGE reads back is what XADD answered.
      {[entries], c} = RespClient.call(c, ~w(XRANGE st-ids - +))
      assert Enum.map(entries, fn [id, _] -> id!(id) end) == ids

      {[1], c} = RespClient.call(c, ~w(DEL st-ids))
      {[new], _} = RespClient.call(c, ~w(XADD st-ids * n 1))
      {ms, _n} = id!(new)
      assert ms >= elem(List.last(ids), 0)
    end

    test "XADD takes a client's ID above the last, with Redis's errors", %{port: port} do
      Ringbus.delete("st-given")
      c = RespClient.connect!(port)

      {replies, c} =
        RespClient.calls(c, [
          ~w(XADD st-given 0-0 a 1),
          ~w(EXISTS st-given),
          ~w(XADD st-given 5-0 a 1),
          ~w(XADD st-given 5-0 a 2),
          ~w(XADD st-given 4-9 a 2),
          ~w(XADD st-given 5-* a 3),
          ~w(XADD st-given 7-* a 4),
          ~w(XADD st-given 18446744073709551615-18446744073709551615 a 5),
          ~w(XADD st-given * a 6),
          ~w(XADD st-given 18446744073709551615-* a 6)
        ])

      smaller =
        {:error,
         "ERR The ID specified in XADD is equal or smaller than the target stream top item"}

      assert replies == [
               {:error, "ERR The ID specified in XADD must be greater than 0-0"},
               0,
               "5-0",
               smaller,
               smaller,
               "5-1",
               "7-0",
               "18446744073709551615-18446744073709551615",
               {:error,
                "ERR The stream has exhausted the last possible ID, unable to add more items"},
               smaller
             ]

      # Ranges by ms, exclusive bounds, MINID and XSETID.
      {[range, excl, rev], c} =
        RespClient.calls(c, [
          ~w(XRANGE st-given 5 5),
          ~w[XRANGE st-given (5-0 7],
          ~w(XREVRANGE st-given 7-0 5-1)
        ])

      assert Enum.map(range, &hd/1) == ["5-0", "5-1"]
      assert Enum.map(excl, &hd/1) == ["5-1", "7-0"]
      assert Enum.map(rev, &hd/1) == ["7-0", "5-1"]

      {[1, [[first, _] | _]], c} =
        RespClient.calls(c, [~w(XTRIM st-given MINID 5-1), ~w(XRANGE st-given - +)])

      assert first == "5-1"
      {[info], c} = RespClient.call(c, ~w(XINFO STREAM st-given))
      info = Enum.chunk_every(info, 2)
      assert ["max-deleted-entry-id", "5-0"] in info
      assert ["recorded-first-entry-id", "5-1"] in info

      # XDEL of an entry in the middle moves it too.
      {[1, info], _} = RespClient.calls(c, [~w(XDEL st-given 7-0), ~w(XINFO STREAM st-given)])
      assert ["max-deleted-entry-id", "7-0"] in Enum.chunk_every(info, 2)
    end

    test "XSETID moves the last ID; the next auto ID is above it", %{port: port} do
      Ringbus.delete("st-setid")
      c = RespClient.connect!(port)
      far = System.system_time(:millisecond) + 3_600_000

      {replies, _} =
        RespClient.calls(c, [
          ~w(XADD st-setid 10-0 a 1),
          ~w(XSETID st-setid 9-0),
          ["XSETID", "st-setid", "#{far}-5"],
          ~w(XADD st-setid * a 2)
        ])

      assert [
               "10-0",
               {:error,
                "ERR The ID specified in XSETID is smaller than the target stream top item"},
               {:simple, "OK"},
               next
             ] = replies

      assert next == "#{far}-6"
    end

    test "a stream pushed by the Elixir API and many connections at once reads with IDs in seq order",
         %{port: port} do
      Ringbus.delete("st-mixed")
      :ok = Ringbus.create("st-mixed", capacity: 10_000)

      writers =
        for w <- 1..4 do
          Task.async(fn ->
            c = RespClient.connect!(port)

            {ids, _} =
              RespClient.calls(
                c,
                for(n <- 1..100, do: ["XADD", "st-mixed", "*", "w", "#{w}-#{n}"])
              )

            ids
          end)
        end

      for n <- 1..200, do: {:ok, _} = Ringbus.push("st-mixed", "api-#{n}")
      answered = writers |> Enum.flat_map(&Task.await/1) |> Enum.map(&id!/1)

      {:ok, messages, 0} = Ringbus.run("st-mixed", {:read, 0, 1_000, nil, :ids})
      ids = for {_seq, _payload, id} <- messages, do: id
      assert length(ids) == 600
      assert ids == Enum.sort(ids) and ids == Enum.uniq(ids)
      # Every ID an XADD answered is its entry's.
      assert MapSet.subset?(MapSet.new(answered), MapSet.new(ids))

      c = RespClient.connect!(port)
      {[entries], _} = RespClient.call(c, ~w(XRANGE st-mixed - + COUNT 1000))
      assert Enum.map(entries, fn [id, _] -> id!(id) end) == ids
    end
  end
end
