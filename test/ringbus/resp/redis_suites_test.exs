defmodule Ringbus.Resp.RedisSuitesTest do
  # What Redis's own stream tests (bench/redis_suites.sh: Redis 7.0.15's Tcl
  # units, redis-py 4.3.4's tests) need of Ringbus beside IDs, each checked
  # against a redis-server this test starts: the same commands to both, the
  # replies compared after Ringbus's ID tags are made 0 (entries get
  # explicit IDs 1-0, 2-0, ..., which both servers take).
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  alias Ringbus.Test.{RedisServer, RedisTools, RespClient}

  @moduletag timeout: 120_000

  @streams ["rs-s", "rs-t"]

  setup_all do
    Ringbus.Test.Debian.executable!("redis-server", "redis-server")
    redis = RedisServer.start!()
    on_exit(fn -> RedisServer.stop(redis) end)
    {:ok, redis: redis}
  end

  setup ctx do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    ours = Ringbus.Server.port(server, :resp)
    on_exit(fn -> Enum.each(@streams, &Ringbus.delete/1) end)
    Enum.each(@streams, &Ringbus.delete/1)
    theirs = RespClient.connect!(ctx.redis.port)
    {[{:simple, "OK"}], _} = RespClient.call(theirs, ["FLUSHALL"])
    RespClient.close(theirs)
    {:ok, ports: %{ours: ours, theirs: ctx.redis.port}}
  end

  # One client on each server, and the replies of `commands` on both.
  defp clients(ctx),
    do: %{
      ours: RespClient.connect!(ctx.ports.ours),
      theirs: RespClient.connect!(ctx.ports.theirs)
    }

  defp both(clients, commands) do
    for {who, c} <- clients, into: %{} do
      {replies, _} = RespClient.calls(c, commands)
      {who, replies}
    end
  end

  defp same!(clients, commands) do
    %{ours: ours, theirs: theirs} = both(clients, commands)
    assert ours == theirs
    theirs
  end

  defp fill(clients, key, n),
    do: same!(clients, for(i <- 1..n, do: ["XADD", key, "#{i}-0", "f", "#{i}"]))

  # Waits until the server counts `n` blocked clients.
  defp blocked!(port, n) do
    assert eventually(fn -> RespClient.info!(port, "clients") =~ "blocked_clients:#{n}\r\n" end)
  end

  test "CONFIG GET/SET of the stream tuning parameters, CONFIG RESETSTAT and FUNCTION FLUSH answer as Redis's",
       ctx do
    c = clients(ctx)

    same!(c, [
      ~w(CONFIG GET stream-node-max-entries),
      ~w(CONFIG SET stream-node-max-entries 2),
      ~w(CONFIG GET stream-node-max-entries),
      ~w(CONFIG SET STREAM-NODE-MAX-BYTES 4kb),
      ~w(CONFIG GET stream-node-max-bytes),
      ~w(CONFIG SET stream-node-max-bytes 1k stream-node-max-entries 7),
      ~w(CONFIG SET stream-node-max-entries abc),
      ~w(CONFIG SET stream-node-max-entries -1),
      ~w(CONFIG SET stream-node-max-bytes 4xb),
      ~w(CONFIG SET stream-node-max-entries 5 stream-node-max-entries 6),
      ~w(CONFIG SET stream-node-max-entries),
      ~w(CONFIG GET stream-node-max-entries),
      ~w(CONFIG SET stream-node-max-entries 100 stream-node-max-bytes 4096),
      ~w(CONFIG RESETSTAT),
      ~w(CONFIG RESETSTAT now),
      ~w(FUNCTION FLUSH),
      ~w(FUNCTION FLUSH ASYNC),
      ~w(FUNCTION FLUSH later),
      ~w(FUNCTION FLUSH a b),
      ~w(FUNCTION LIST)
    ])

    # A pattern's pairs come in Redis's hash order, which varies.
    %{ours: [ours], theirs: [theirs]} = both(c, [~w(CONFIG GET stream-node-max-*)])
    pairs = &(&1 |> Enum.chunk_every(2) |> Enum.sort())
    assert pairs.(ours) == pairs.(theirs)

    assert pairs.(theirs) == [
             ["stream-node-max-bytes", "4096"],
             ["stream-node-max-entries", "100"]
           ]

    # Settings Ringbus does not take are refused, and nothing is set.
    {[{:error, "ERR Ringbus does not change its configuration over RESP (CONFIG SET save)"}], _} =
      RespClient.call(c.ours, ~w(CONFIG SET stream-node-max-entries 9 save x))

    {[[_, "100"]], _} = RespClient.call(c.ours, ~w(CONFIG GET stream-node-max-entries))

    {[{:error, "ERR Ringbus runs no functions (FUNCTION LOAD)"}], _} =
      RespClient.call(c.ours, ["FUNCTION", "LOAD", "#!lua name=x\nreturn 1"])
  end

  test "CONFIG RESETSTAT sets INFO's statistics back to 0", ctx do
    c = clients(ctx)
    both(c, [~w(PING), ~w(PING)])
    %{ours: [ours], theirs: [theirs]} = both(c, [~w(INFO stats)])
    refute commands_processed(ours) == 0
    refute commands_processed(theirs) == 0
    both(c, [~w(CONFIG RESETSTAT)])
    %{ours: [ours], theirs: [theirs]} = both(c, [~w(INFO stats)])
    assert commands_processed(ours) == commands_processed(theirs)
  end

  defp commands_processed(info) do
    [_, n] = Regex.run(~r/total_commands_processed:(\d+)\r\n/, info)
    String.to_integer(n)
  end

  test "CONFIG SET and RESETSTAT need a token with every grant" do
    tokens = %{"admin" => :all, "reader" => [read: :all, write: ["rs-"], manage: ["rs-"]]}
    spec = {Ringbus.Server, port: 0, resp_port: 0, tokens: tokens}
    server = start_supervised!(Supervisor.child_spec(spec, id: :with_tokens))
    port = Ringbus.Server.port(server, :resp)
    reader = RespClient.auth!(port, "reader")

    for command <- [~w(CONFIG SET stream-node-max-entries 5), ~w(CONFIG RESETSTAT)] do
      {[{:error, "NOPERM" <> _}], _} = RespClient.call(reader, command)
    end

    {[[_, "100"]], _} = RespClient.call(reader, ~w(CONFIG GET stream-node-max-entries))
    admin = RespClient.auth!(port, "admin")
    {[{:simple, "OK"}], _} = RespClient.call(admin, ~w(CONFIG SET stream-node-max-entries 5))
  end

  test "redis-py's test session starts: INFO has the fields it reads", ctx do
    script = """
    import sys, redis
    info = redis.Redis(port=int(sys.argv[1])).info()
    print(info["redis_version"], info["arch_bits"], info["cluster_enabled"])
    """

    assert RedisTools.python!(script, ["#{ctx.ports.ours}"]) == "7.0.0 64 0\n"
  end

  test "XAUTOCLAIM's cursor is the pending entry after the last it looked at", ctx do
    c = clients(ctx)
    fill(c, "rs-s", 5)

    same!(c, [
      ~w(XGROUP CREATE rs-s g 0),
      ~w(XREADGROUP GROUP g alice COUNT 5 STREAMS rs-s >),
      ~w(XAUTOCLAIM rs-s g bob 0 0-0 COUNT 2 JUSTID),
      ~w(XAUTOCLAIM rs-s g bob 0 3-0 COUNT 2 JUSTID),
      ~w(XAUTOCLAIM rs-s g bob 0 5-0 COUNT 2 JUSTID),
      ~w(XAUTOCLAIM rs-s g bob 0 0-0 COUNT 5 JUSTID)
    ])
  end

  test "XPENDING takes exclusive bounds, XGROUP SETID takes -", ctx do
    c = clients(ctx)
    fill(c, "rs-s", 4)

    same!(c, [
      ~w(XGROUP CREATE rs-s g $),
      ~w(XREADGROUP GROUP g alice STREAMS rs-s 0),
      ~w(XGROUP SETID rs-s g -),
      ~w(XREADGROUP GROUP g alice COUNT 10 STREAMS rs-s >),
      ~w[XPENDING rs-s g (18446744073709551615-18446744073709551615 + 10],
      ~w[XPENDING rs-s g - (0-0 10],
      ~w[XPENDING rs-s g (x + 10],
      ~w(XGROUP CREATE rs-s g2 -)
    ])

    # The extended form gives idle times, which differ: the IDs are compared.
    ranges = [
      ~w[XPENDING rs-s g (1-0 (4-0 10],
      ~w[XPENDING rs-s g (1 + 10],
      ~w[XPENDING rs-s g - (3 10]
    ]

    %{ours: ours, theirs: theirs} = both(c, ranges)
    ids = fn replies -> for rows <- replies, do: for([id | _] <- rows, do: id) end
    assert ids.(ours) == ids.(theirs)
    assert ids.(theirs) == [["2-0", "3-0"], ["2-0", "3-0", "4-0"], ["1-0", "2-0", "3-0"]]
  end

  test "XINFO's entries-read is nil until Redis would know it, and lag is Redis's", ctx do
    c = clients(ctx)

    same!(c, [
      ~w(XGROUP CREATE rs-s g1 0 MKSTREAM),
      ~w(XINFO GROUPS rs-s),
      ~w(XADD rs-s 1-0 f 1),
      ~w(XDEL rs-s 1-0),
      ~w(XINFO GROUPS rs-s)
    ])

    fill(c, "rs-t", 5)

    same!(c, [
      ~w(XGROUP CREATE rs-t g1 0),
      ~w(XGROUP CREATE rs-t g2 $),
      ~w(XGROUP CREATE rs-t g3 0 ENTRIESREAD 7),
      ~w(XGROUP CREATE rs-t g4 3-0),
      ~w(XINFO GROUPS rs-t),
      ~w(XREADGROUP GROUP g1 c COUNT 1 STREAMS rs-t >),
      ~w(XREADGROUP GROUP g4 c COUNT 1 STREAMS rs-t >),
      ~w(XINFO GROUPS rs-t),
      ~w(XREADGROUP GROUP g1 c COUNT 2 STREAMS rs-t >),
      ~w(XREADGROUP GROUP g4 c STREAMS rs-t >),
      ~w(XGROUP SETID rs-t g1 2-0),
      ~w(XINFO GROUPS rs-t),
      ~w(XGROUP SETID rs-t g2 0 ENTRIESREAD 0),
      ~w(XTRIM rs-t MAXLEN 3),
      ~w(XINFO GROUPS rs-t)
    ])
  end

  test "XINFO STREAM's radix-tree-keys and -nodes count the stream's nodes of 100 seqs", ctx do
    c = RespClient.connect!(ctx.ports.ours)
    {_, c} = RespClient.calls(c, for(i <- 0..249, do: ~w(XADD rs-s * n #{i})))
    assert radix(c) == {3, 3}
    # Seqs 130 to 249 are left: nodes 1 and 2.
    {[130], c} = RespClient.call(c, ~w(XTRIM rs-s MAXLEN 120))
    assert radix(c) == {2, 2}
    {[120], c} = RespClient.call(c, ~w(XTRIM rs-s MAXLEN 0))
    assert radix(c) == {0, 0}
  end

  defp radix(c) do
    {[info], _} = RespClient.call(c, ~w(XINFO STREAM rs-s))
    info = info |> Enum.chunk_every(2) |> Map.new(fn [k, v] -> {k, v} end)
    {info["radix-tree-keys"], info["radix-tree-nodes"]}
  end

  test "a blocked XREADGROUP gets -NOGROUP at XGROUP DESTROY, -UNBLOCKED at DEL and FLUSHALL",
       ctx do
    c = clients(ctx)

    for ending <- [~w(XGROUP DESTROY rs-s g), ~w(DEL rs-s), ~w(FLUSHALL)] do
      fill(c, "rs-s", 1)
      same!(c, [~w(XGROUP CREATE rs-s g $)])
      readers = clients(ctx)
      read = ~w(XREADGROUP GROUP g alice BLOCK 0 STREAMS rs-s >)
      for {_, r} <- readers, do: :ok = RespClient.send_commands(r, [read])
      for {who, _} <- readers, do: blocked!(ctx.ports[who], 1)
      same!(c, [ending])

      answers = for {who, r} <- readers, into: %{}, do: {who, elem(RespClient.recv(r, 1), 0)}
      assert answers.ours == answers.theirs
      assert [{:error, error}] = answers.ours
      assert error =~ ~r/^(NOGROUP|UNBLOCKED) .* no longer exists$/
      for {who, _} <- readers, do: blocked!(ctx.ports[who], 0)
      same!(c, [~w(DEL rs-s)])
    end
  end

  test "a blocked XREADGROUP whose group went unannounced answers -NOGROUP when a push wakes it",
       ctx do
    c = RespClient.connect!(ctx.ports.ours)
    {_, c} = RespClient.calls(c, [~w(XADD rs-s 1-0 f 1), ~w(XGROUP CREATE rs-s g $)])
    reader = RespClient.connect!(ctx.ports.ours)
    :ok = RespClient.send_commands(reader, [~w(XREADGROUP GROUP g alice BLOCK 0 STREAMS rs-s >)])
    blocked!(ctx.ports.ours, 1)
    # The Elixir API's destroy tells no RESP reader.
    :ok = Ringbus.Groups.delete("rs-s", "g")
    {_, _} = RespClient.call(c, ~w(XADD rs-s * f 2))

    assert {[{:error, "NOGROUP the consumer group this client was blocked on no longer exists"}],
            _} = RespClient.recv(reader, 1)
  end

  test "a blocked XREAD on $ waits on through a DEL and answers the next XADD", ctx do
    c = clients(ctx)
    both(c, [~w(XADD rs-s * old 1)])
    readers = clients(ctx)

    for {_, r} <- readers,
        do: :ok = RespClient.send_commands(r, [~w(XREAD BLOCK 0 STREAMS rs-s $)])

    for {who, _} <- readers, do: blocked!(ctx.ports[who], 1)
    same!(c, [~w(DEL rs-s)])
    # Still blocked after the DEL.
    for {who, _} <- readers, do: blocked!(ctx.ports[who], 1)
    # Redis's ID is a time, Ringbus's a seq: not compared.
    both(c, [~w(XADD rs-s * new 2)])

    for {_, r} <- readers do
      assert {[[["rs-s", [[_id, ["new", "2"]]]]]], _} = RespClient.recv(r, 1)
    end
  end
end
