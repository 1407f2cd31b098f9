defmodule Ringbus.Resp.TransactionTest do
  # MULTI / EXEC / DISCARD as Redis clients use them: over a raw socket,
  # with redis-py's default pipeline (a transaction) and with ioredis's
  # multi().exec(), which npm installs under _build/npm.
  use ExUnit.Case, async: false

  alias Ringbus.Resp.Transaction
  alias Ringbus.Test.{RedisTools, RespClient}

  @moduletag timeout: 120_000

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, max_frame_size: 4096})

    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name) and String.starts_with?(name, "tx-"),
          do: Ringbus.delete(name)
    end)

    {:ok, port: Ringbus.Server.port(server, :resp)}
  end

  test "queued commands run at EXEC, in order, and nothing is stored before", %{port: port} do
    c = RespClient.connect!(port)

    {[{:simple, "OK"}, {:simple, "QUEUED"}, {:simple, "QUEUED"}, {:simple, "QUEUED"}], c} =
      RespClient.calls(c, [~w(MULTI), ~w(XADD tx-s * a 1), ~w(XADD tx-s * b 2), ~w(XLEN tx-s)])

    assert Ringbus.len("tx-s") == {:error, :no_channel}
    {[[_, _, 2]], c} = RespClient.call(c, ~w(EXEC))
    assert Ringbus.len("tx-s") == 2

    # A command that fails when it runs fails alone, as in Redis.
    {[_, _, _, [{:error, "ERR The ID specified in XADD" <> _}, _]], _} =
      RespClient.calls(c, [~w(MULTI), ~w(XADD tx-s 1-0 c 3), ~w(XADD tx-s * d 4), ~w(EXEC)])
  end

  test "DISCARD drops the queue", %{port: port} do
    c = RespClient.connect!(port)

    {[{:simple, "OK"}, {:simple, "QUEUED"}, {:simple, "OK"}, {:error, "ERR EXEC without MULTI"}],
     _} = RespClient.calls(c, [~w(MULTI), ~w(XADD tx-d * a 1), ~w(DISCARD), ~w(EXEC)])

    assert Ringbus.len("tx-d") == {:error, :no_channel}
  end

  test "an unknown command or a wrong arity while queuing aborts the transaction",
       %{port: port} do
    c = RespClient.connect!(port)

    {[
       {:simple, "OK"},
       {:simple, "QUEUED"},
       {:error, "ERR wrong number of arguments for 'xadd' command"},
       {:simple, "QUEUED"},
       {:error, "EXECABORT Transaction discarded because of previous errors."}
     ],
     c} =
      RespClient.calls(c, [
        ~w(MULTI),
        ~w(XADD tx-a * a 1),
        ~w(XADD tx-a *),
        ~w(XLEN tx-a),
        ~w(EXEC)
      ])

    {[_, {:error, "ERR unknown command 'NOPE'" <> _}, {:error, "EXECABORT" <> _}], c} =
      RespClient.calls(c, [~w(MULTI), ~w(NOPE x), ~w(EXEC)])

    assert Ringbus.len("tx-a") == {:error, :no_channel}
    # The connection is out of the transaction.
    {[{:simple, "PONG"}], _} = RespClient.call(c, ~w(PING))
  end

  test "Redis's errors for nested MULTI, EXEC and DISCARD without MULTI, and WATCH",
       %{port: port} do
    c = RespClient.connect!(port)

    {[
       {:error, "ERR EXEC without MULTI"},
       {:error, "ERR DISCARD without MULTI"},
       {:error, "ERR WATCH is not supported by Ringbus" <> _},
       {:simple, "OK"},
       {:simple, "OK"},
       {:error, "ERR MULTI calls can not be nested"},
       {:error, "ERR WATCH inside MULTI is not allowed"},
       {:simple, "QUEUED"},
       [{:simple, "PONG"}]
     ],
     _} =
      RespClient.calls(c, [
        ~w(EXEC),
        ~w(DISCARD),
        ~w(WATCH tx-w),
        ~w(UNWATCH),
        ~w(MULTI),
        ~w(MULTI),
        ~w(WATCH tx-w),
        ~w(PING),
        ~w(EXEC)
      ])
  end

  test "a blocking read in a transaction answers at once, as its timeout would", %{port: port} do
    c = RespClient.connect!(port)
    {[_], c} = RespClient.call(c, ~w(XADD tx-b * a 1))

    {[_, _, _, [nil, [["tx-b", [[_, ["a", "1"]]]]]]], c} =
      RespClient.calls(c, [
        ~w(MULTI),
        ~w(XREAD BLOCK 0 STREAMS tx-b $),
        ~w(XREAD BLOCK 0 STREAMS tx-b 0),
        ~w(EXEC)
      ])

    {[{:simple, "PONG"}], _} = RespClient.call(c, ~w(PING))
  end

  test "the queue is bounded in bytes by max_frame_size: past it, the transaction is discarded",
       %{port: port} do
    c = RespClient.connect!(port)
    value = String.duplicate("v", 1500)

    {[
       _,
       {:simple, "QUEUED"},
       {:simple, "QUEUED"},
       {:error, "ERR a transaction queues at most" <> _},
       {:simple, "QUEUED"},
       {:error, "EXECABORT" <> _}
     ],
     _} =
      RespClient.calls(c, [
        ~w(MULTI),
        ["XADD", "tx-big", "*", "v", value],
        ["XADD", "tx-big", "*", "v", value],
        ["XADD", "tx-big", "*", "v", value],
        ~w(PING),
        ~w(EXEC)
      ])

    assert Ringbus.len("tx-big") == {:error, :no_channel}
  end

  test "the queue is bounded in commands" do
    t =
      Enum.reduce(1..Transaction.max_commands(), Transaction.new(), fn _, t ->
        {:ok, t} = Transaction.add(t, ["PING"], 1_099_511_627_776)
        t
      end)

    assert t.count == Transaction.max_commands()

    assert {:error, :too_many, %Transaction{aborted: true, commands: []}} =
             Transaction.add(t, ["PING"], 1_099_511_627_776)
  end

  @redis_py """
  import sys, redis
  r = redis.Redis(port=int(sys.argv[1]))
  p = r.pipeline()
  p.xadd("tx-py", {"a": "1"})
  p.xadd("tx-py", {"b": "2"})
  p.xlen("tx-py")
  print(p.execute())
  with r.pipeline() as p:
      p.xadd("tx-py", {"c": "3"})
      p.xadd("tx-py", {"d": "4"}, id="1-0")
      try:
          p.execute()
      except redis.ResponseError as e:
          print("error:", e)
  print(r.xlen("tx-py"))
  """

  test "redis-py's default pipeline is a transaction that works", %{port: port} do
    out = RedisTools.python!(@redis_py, ["#{port}"])
    assert out =~ ~r/\[b'\d+-\d+', b'\d+-\d+', 2\]\n/
    assert out =~ "error: Command # 2 (XADD tx-py 1-0 d 4) of pipeline caused error"
    assert out =~ ~r/\n3\n\z/
  end

  @ioredis """
  const Redis = require("ioredis");
  const r = new Redis({ port: Number(process.argv[2]), lazyConnect: true, maxRetriesPerRequest: 0 });
  (async () => {
    await r.connect();
    const replies = await r.multi().xadd("tx-io", "*", "a", "1").xadd("tx-io", "*", "b", "2").xlen("tx-io").exec();
    console.log(JSON.stringify(replies));
    try {
      await r.multi().xadd("tx-io", "*", "c", "3").call("NOPE").exec();
    } catch (e) {
      console.log("error: " + e.message);
    }
    console.log(JSON.stringify(await r.xlen("tx-io")));
    r.disconnect();
  })().catch((e) => { console.error(e); process.exit(1); });
  """

  test "ioredis's multi().exec() works", %{port: port} do
    dir = npm_install!("ioredis@5")
    script = Path.join(dir, "tx.js")
    File.write!(script, @ioredis)

    {out, status} =
      System.cmd("timeout", ["20", "node", script, "#{port}"], cd: dir, stderr_to_stdout: true)

    assert status == 0, out
    assert out =~ ~r/\[\[null,"\d+-\d+"\],\[null,"\d+-\d+"\],\[null,2\]\]\n/
    assert out =~ "error: EXECABORT Transaction discarded because of previous errors."
    assert out =~ ~r/\n2\n\z/
  end

  # Installs an npm package under _build/npm once; a failed install fails the test.
  defp npm_install!(package) do
    dir = Path.expand("_build/npm")
    name = package |> String.split("@") |> hd()

    unless File.exists?(Path.join([dir, "node_modules", name, "package.json"])) do
      File.mkdir_p!(dir)

      {out, status} =
        System.cmd(
          "timeout",
          ["120", "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, package],
          stderr_to_stdout: true
        )

      assert status == 0, "npm install #{package} failed: #{out}"
    end

    dir
  end
end
