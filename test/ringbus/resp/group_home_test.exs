defmodule Ringbus.Resp.GroupHomeTest do
  # Consumer groups in a cluster: two real nodes (`:peer`), each with a RESP
  # listener; a stream homed on one, its group used through both. A group
  # is one group: its consumers get disjoint entries, whichever node they
  # read through, and every group command sees the state at the home.
  use ExUnit.Case, async: true

  import Ringbus.Test.Eventually

  alias Ringbus.Test.{Nodes, Peers}
  alias Ringbus.Test.ClusterProbe, as: Probe
  alias Ringbus.Test.{RedisTools, RespClient}

  @moduletag timeout: 120_000

  setup_all do
    [a, b] = Peers.start_joined(2, "groups", net_ticktime: 4, cluster: [call_timeout: 2_000])
    port_a = Nodes.call(a, Probe, :start_resp_server, [])
    port_b = Nodes.call(b, Probe, :start_resp_server, [])
    %{a: a, b: b, port_a: port_a, port_b: port_b}
  end

  @one_group """
  import sys, redis
  a, b = redis.Redis(port=int(sys.argv[1])), redis.Redis(port=int(sys.argv[2]))
  seq = lambda i: tuple(int(x) for x in i.split(b"-"))
  ids = [a.xadd("gh-s", {"n": str(i)}) for i in range(20)]
  # Made through b, the stream's group is at a: a second one is refused through a.
  assert b.xgroup_create("gh-s", "workers", id="0")
  try:
      a.xgroup_create("gh-s", "workers", id="0")
      raise AssertionError("a second group of the same name")
  except redis.ResponseError as e:
      assert str(e).startswith("BUSYGROUP"), str(e)
  got_a, got_b = [], []
  while True:
      ra = a.xreadgroup("workers", "ca", {"gh-s": ">"}, count=3)
      rb = b.xreadgroup("workers", "cb", {"gh-s": ">"}, count=3)
      ea = [e[0] for e in ra[0][1]] if ra else []
      eb = [e[0] for e in rb[0][1]] if rb else []
      got_a += ea
      got_b += eb
      if not ea and not eb:
          break
  assert got_a and got_b, (got_a, got_b)
  assert set(got_a).isdisjoint(got_b), (got_a, got_b)
  assert sorted(got_a + got_b, key=seq) == ids, (got_a, got_b)
  assert a.xpending("gh-s", "workers")["pending"] == 20
  # Acked through b, gone from the pending list seen through a.
  assert b.xack("gh-s", "workers", *got_b) == len(got_b)
  p = a.xpending("gh-s", "workers")
  assert p["pending"] == len(got_a), p
  assert [(c["name"], c["pending"]) for c in p["consumers"]] == [(b"ca", len(got_a))], p
  rows = a.xpending_range("gh-s", "workers", "-", "+", 100)
  assert [r["message_id"] for r in rows] == got_a, rows
  g = b.xinfo_groups("gh-s")
  assert len(g) == 1 and g[0]["pending"] == len(got_a) and g[0]["consumers"] == 2, g
  assert g[0]["last-delivered-id"] == ids[-1] and g[0]["lag"] == 0, g
  assert sorted(c["name"] for c in b.xinfo_consumers("gh-s", "workers")) == [b"ca", b"cb"]
  assert b.xinfo_stream("gh-s")["groups"] == 1
  # Claimed through b: the home's PEL moves.
  assert b.xclaim("gh-s", "workers", "cb", 0, [got_a[0]], justid=True) == [got_a[0]]
  rows = a.xpending_range("gh-s", "workers", "-", "+", 100, consumername="cb")
  assert [r["message_id"] for r in rows] == [got_a[0]], rows
  # redis-py answers JUSTID with the IDs alone.
  claimed = b.xautoclaim("gh-s", "workers", "cb", 0, "0-0", count=100, justid=True)
  assert claimed == got_a, claimed
  history = b.xreadgroup("workers", "cb", {"gh-s": "0"})
  assert [e[0] for e in history[0][1]] == got_a, history
  full = b.xinfo_stream("gh-s", full=True)
  assert full["groups"][0]["pel-count"] == len(got_a), full
  assert b.xgroup_delconsumer("gh-s", "workers", "cb") == len(got_a)
  assert a.xpending("gh-s", "workers")["pending"] == 0
  assert b.xgroup_destroy("gh-s", "workers") == 1
  assert a.xinfo_groups("gh-s") == []
  # A tagged XADD through b, sent twice: one entry, one ID.
  first = b.execute_command("XADD", "gh-s", "PRODUCER", "p", "1", "*", "n", "x")
  again = b.execute_command("XADD", "gh-s", "PRODUCER", "p", "1", "*", "n", "x")
  # IDs are Redis's (docs/RESP.md, "IDs"), the same through either node.
  assert first == again, (first, again)
  assert a.xrange("gh-s", "-", "+")[-1][0] == first
  assert a.xlen("gh-s") == 21
  print("ok")
  """

  test "redis-py through two nodes: one group, disjoint entries, acks and claims seen at both",
       ctx do
    assert RedisTools.python!(@one_group, ["#{ctx.port_a}", "#{ctx.port_b}"]) == "ok\n"
    assert Nodes.call(ctx.a, Ringbus.Cluster, :home, ["gh-s"]) == {:ok, ctx.a.node}
  end

  test "XREADGROUP BLOCK through either node: each waiting consumer gets its own entry", ctx do
    ca = RespClient.connect!(ctx.port_a)
    cb = RespClient.connect!(ctx.port_b)
    {[first], ca} = RespClient.call(ca, ~w(XADD gh-block * n 0))
    {[{:simple, "OK"}], cb} = RespClient.call(cb, ~w(XGROUP CREATE gh-block g $))

    RespClient.send_commands(cb, [
      ~w(XREADGROUP GROUP g cb COUNT 1 BLOCK 10000 STREAMS gh-block >)
    ])

    assert eventually(fn -> RespClient.info!(ctx.port_b, "clients") =~ "blocked_clients:1" end)

    RespClient.send_commands(ca, [
      ~w(XREADGROUP GROUP g ca COUNT 1 BLOCK 10000 STREAMS gh-block >)
    ])

    assert eventually(fn -> RespClient.info!(ctx.port_a, "clients") =~ "blocked_clients:1" end)

    w = RespClient.connect!(ctx.port_a)
    {[id2], w} = RespClient.call(w, ~w(XADD gh-block * n 1))
    {[id3], _} = RespClient.call(w, ~w(XADD gh-block * n 2))
    assert id!(first) < id!(id2) and id!(id2) < id!(id3)

    {[[["gh-block", [[id_a, _]]]]], _} = RespClient.recv(ca, 1)
    {[[["gh-block", [[id_b, _]]]]], _} = RespClient.recv(cb, 1)
    assert Enum.sort([id_a, id_b]) == [id2, id3]

    {[[2, ^id2, ^id3, _]], _} = RespClient.call(w, ~w(XPENDING gh-block g))
  end

  test "XGROUP DESTROY through either node answers the XREADGROUPs waiting on the group through both",
       ctx do
    for {destroy_port, name} <- [{ctx.port_a, "gh-destroy-a"}, {ctx.port_b, "gh-destroy-b"}] do
      c = RespClient.connect!(ctx.port_a)

      {[_, {:simple, "OK"}], c} =
        RespClient.calls(c, [~w(XADD #{name} * n 0), ~w(XGROUP CREATE #{name} g $)])

      readers =
        for port <- [ctx.port_a, ctx.port_b] do
          r = RespClient.connect!(port)
          :ok = RespClient.send_commands(r, [~w(XREADGROUP GROUP g c BLOCK 0 STREAMS #{name} >)])

          assert eventually(fn -> RespClient.info!(port, "clients") =~ "blocked_clients:1\r\n" end)

          r
        end

      {[1], _} = RespClient.call(RespClient.connect!(destroy_port), ~w(XGROUP DESTROY #{name} g))

      for r <- readers do
        assert {[
                  {:error,
                   "NOGROUP the consumer group this client was blocked on no longer exists"}
                ], _} = RespClient.recv(r, 1)
      end

      RespClient.call(c, ~w(DEL #{name}))
    end
  end

  test "XREADGROUP through another node answers what fits its link, and the rest next", ctx do
    ca = RespClient.connect!(ctx.port_a)
    big = String.duplicate("x", 600_000)

    ids =
      for _ <- 1..3 do
        {[id], _} = RespClient.call(ca, ["XADD", "gh-big", "*", "f", big])
        id
      end

    [id1, id2, id3] = ids

    {[{:simple, "OK"}], _} = RespClient.call(ca, ~w(XGROUP CREATE gh-big remote 0))
    {[{:simple, "OK"}], _} = RespClient.call(ca, ~w(XGROUP CREATE gh-big local 0))
    cb = RespClient.connect!(ctx.port_b)

    # 1 MiB of payloads at most through the link: one entry at a time here.
    for id <- ids do
      assert {[[["gh-big", [[^id, ["f", ^big]]]]]], _} =
               RespClient.call(cb, ~w(XREADGROUP GROUP remote c STREAMS gh-big >))
    end

    {[nil], _} = RespClient.call(cb, ~w(XREADGROUP GROUP remote c STREAMS gh-big >))

    # Its pending entries, read again, the same way: from the last ID returned.
    for {from, id} <- [{"0", id1}, {id1, id2}, {id2, id3}] do
      assert {[[["gh-big", [[^id, ["f", ^big]]]]]], _} =
               RespClient.call(cb, ~w(XREADGROUP GROUP remote c STREAMS gh-big #{from}))
    end

    # At the home, all of them at once.
    {[[["gh-big", entries]]], _} =
      RespClient.call(ca, ~w(XREADGROUP GROUP local c STREAMS gh-big >))

    assert Enum.map(entries, &hd/1) == ids

    # XINFO STREAM FULL's entries are cut alike.
    assert full_entries(cb, "gh-big") == [id1]
    assert full_entries(ca, "gh-big") == ids
  end

  defp full_entries(c, key) do
    {[fields], _} = RespClient.call(c, ~w(XINFO STREAM #{key} FULL COUNT 0))
    entries = fields |> Enum.chunk_every(2) |> Map.new(fn [k, v] -> {k, v} end)
    entries |> Map.fetch!("entries") |> Enum.map(&hd/1)
  end

  test "a stream created again has no groups, wherever it is deleted from", ctx do
    c = RespClient.connect!(ctx.port_b)
    {[_], c} = RespClient.call(c, ~w(XADD gh-again * n 0))
    assert Nodes.call(ctx.b, Ringbus.Cluster, :home, ["gh-again"]) == {:ok, ctx.b.node}
    {[{:simple, "OK"}], c} = RespClient.call(c, ~w(XGROUP CREATE gh-again g 0))
    # Deleted by the channel API on the other node, not by DEL: its groups go too.
    :ok = Nodes.call(ctx.a, Ringbus, :delete, ["gh-again"])
    {[_], c} = RespClient.call(c, ~w(XADD gh-again * n 1))
    {[[]], c} = RespClient.call(c, ~w(XINFO GROUPS gh-again))
    {[{:simple, "OK"}], _} = RespClient.call(c, ~w(XGROUP CREATE gh-again g 0))
  end

  test "through another node, group IDs are the home's, and an ID of a stream made again names nothing new",
       ctx do
    # Homed at a, used through b.
    ca = RespClient.connect!(ctx.port_a)
    cb = RespClient.connect!(ctx.port_b)
    {[old], ca} = RespClient.call(ca, ~w(XADD gh-tags * n 0))
    {[{:simple, "OK"}], cb} = RespClient.call(cb, ~w(XGROUP CREATE gh-tags g 0))

    {[[["gh-tags", [[^old, _]]]]], cb} =
      RespClient.call(cb, ~w(XREADGROUP GROUP g c STREAMS gh-tags >))

    {[[1, ^old, ^old, [["c", "1"]]]], cb} = RespClient.call(cb, ~w(XPENDING gh-tags g))
    {[[^old]], cb} = RespClient.call(cb, ~w(XCLAIM gh-tags g d 0 #{old} JUSTID))
    {[[group]], cb} = RespClient.call(cb, ~w(XINFO GROUPS gh-tags))
    assert ["last-delivered-id", old] in Enum.chunk_every(group, 2)

    # Made again at its home, a ms later: its IDs are later.
    :ok = Nodes.call(ctx.a, Ringbus, :delete, ["gh-tags"])
    Process.sleep(2)
    {[new], _} = RespClient.call(ca, ~w(XADD gh-tags * n 1))
    assert id!(new) > id!(old)
    {[{:simple, "OK"}], cb} = RespClient.call(cb, ~w(XGROUP CREATE gh-tags g 0))

    # The new entry, read and acked through b: an ID of the old one acks nothing.
    {[[["gh-tags", [[^new, _]]]]], cb} =
      RespClient.call(cb, ~w(XREADGROUP GROUP g c STREAMS gh-tags >))

    {[0], cb} = RespClient.call(cb, ~w(XACK gh-tags g #{old}))
    {[[^new]], cb} = RespClient.call(cb, ~w(XCLAIM gh-tags g d 0 #{new} JUSTID))
    {[["0-0", [^new], []]], cb} = RespClient.call(cb, ~w(XAUTOCLAIM gh-tags g e 0 0-0 JUSTID))
    {[1], _} = RespClient.call(cb, ~w(XACK gh-tags g #{new}))
  end

  test "a stream's group through Ringbus.run/3, the operation path any front end takes, beside RESP",
       ctx do
    ca = RespClient.connect!(ctx.port_a)
    {ids, ca} = RespClient.calls(ca, for(i <- 0..2, do: ~w(XADD gh-api * n #{i})))
    {:ok, inc} = Nodes.call(ctx.a, Ringbus, :incarnation, ["gh-api"])
    run = fn node, request -> Nodes.call(node, Ringbus, :run, ["gh-api", {:group, request}]) end

    # Made through the API at the home, read from the other node: seqs and payloads.
    assert run.(ctx.a, {:create, "api", -1, nil}) == :ok
    assert run.(ctx.a, {:create, "api", -1, nil}) == {:error, :exists}
    assert {:ok, [{0, p0}, {1, _}]} = run.(ctx.b, {:read, "api", "c1", 2, false})
    assert Ringbus.Resp.Entry.decode(p0) == ["n", "0"]

    # Seen over RESP, through either node, with the IDs of the same entries.
    [id0, id1, id2] = ids
    {[[2, ^id0, ^id1, [["c1", "2"]]]], ca} = RespClient.call(ca, ~w(XPENDING gh-api api))
    cb = RespClient.connect!(ctx.port_b)

    {[[["gh-api", [[^id2, ["n", "2"]]]]]], cb} =
      RespClient.call(cb, ~w(XREADGROUP GROUP api c2 STREAMS gh-api >))

    {[1], _} = RespClient.call(cb, ~w(XACK gh-api api #{id0}))
    assert run.(ctx.b, {:pending, "api"}) == {:ok, {2, 1, 2, [{"c1", 1}, {"c2", 1}]}}

    assert {:ok, [{1, "c1", _idle, 1}]} = run.(ctx.a, {:pending, "api", 0, 10, 10, "c1", 0})

    # A seq of this incarnation (the whole of it known) is taken; of another, refused.
    assert {:ok, [{1, _}]} =
             run.(
               ctx.b,
               {:claim, "api", "c2", [{1, {0xFFFF_FFFF_FFFF_FFFF, inc}}], 0, claim_opts()}
             )

    assert run.(ctx.b, {:set_id, "api", {0, {0xFFFF_FFFF_FFFF_FFFF, inc + 1}}, nil}) ==
             {:error, :new_incarnation}

    assert run.(ctx.b, {:ack, "api", [1, {2, {0xFFFF_FFFF_FFFF_FFFF, inc + 1}}]}) == {:ok, 1}
    assert run.(ctx.a, {:info, "none"}) == {:error, :no_group}
    assert {:ok, [%{name: "api", pending: 1, lag: 0}]} = run.(ctx.b, {:groups, 0})
    {[[["name", "api" | _]]], _} = RespClient.call(ca, ~w(XINFO GROUPS gh-api))

    # Deleted, the stream's groups go at its home, from whichever node.
    :ok = Nodes.call(ctx.b, Ringbus, :delete, ["gh-api"])
    summary = fn -> Nodes.call(ctx.a, Ringbus.Group, :summary, []) end
    assert eventually(fn -> not Enum.any?(summary.(), &(&1.incarnation == inc)) end)
  end

  defp claim_opts, do: %{time: nil, retry: nil, force: false, justid: false, last: nil}

  test "a group command through another node is one link round trip to the stream's home", ctx do
    ca = RespClient.connect!(ctx.port_a)
    {[id | _], _} = RespClient.calls(ca, [~w(XADD gh-trip * n 0), ~w(XADD gh-trip * n 1)])
    {[{:simple, "OK"}], _} = RespClient.call(ca, ~w(XGROUP CREATE gh-trip g 0))
    cb = RespClient.connect!(ctx.port_b)

    commands = [
      ~w(XREADGROUP GROUP g c COUNT 1 STREAMS gh-trip >),
      ~w(XREADGROUP GROUP g c STREAMS gh-trip 0),
      ~w(XPENDING gh-trip g),
      ~w(XPENDING gh-trip g - + 10),
      ~w(XCLAIM gh-trip g d 0 #{id}),
      ~w(XAUTOCLAIM gh-trip g c 0 0-0),
      ~w(XACK gh-trip g #{id}),
      ~w(XGROUP CREATECONSUMER gh-trip g e),
      ~w(XGROUP SETID gh-trip g 0),
      ~w(XINFO GROUPS gh-trip),
      ~w(XINFO CONSUMERS gh-trip g),
      ~w(XGROUP DELCONSUMER gh-trip g e)
    ]

    Enum.reduce(commands, cb, fn command, cb ->
      before = calls(ctx.b, ctx.a.node)
      {[reply], cb} = RespClient.call(cb, command)
      refute match?({:error, _}, reply), "#{inspect(command)}: #{inspect(reply)}"
      assert calls(ctx.b, ctx.a.node) - before == 1, "#{inspect(command)}: one round trip"
      cb
    end)

    # And through the API, from that node: both entries again, SETID having moved the group back.
    before = calls(ctx.b, ctx.a.node)

    assert {:ok, [{0, _}, {1, _}]} =
             Nodes.call(ctx.b, Ringbus, :run, ["gh-trip", {:group, {:read, "g", "f", 10, true}}])

    assert calls(ctx.b, ctx.a.node) - before == 1
  end

  defp calls(from, to) do
    %{links: %{^to => link}} = Nodes.call(from, Ringbus.Cluster, :info, [])
    link.calls_ok + link.calls_refused + link.calls_timeout
  end

  defp id!(text), do: text |> String.split("-") |> Enum.map(&String.to_integer/1)
end
