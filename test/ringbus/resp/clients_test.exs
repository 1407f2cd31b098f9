defmodule Ringbus.Resp.ClientsTest do
  # Real Redis clients against the RESP listener: redis-cli, redis-cli
  # --pipe and redis-py, and the same channels over the binary protocol.
  use ExUnit.Case, async: false

  alias Ringbus.Resp.Entry
  alias Ringbus.Test.{RedisTools, RespClient}

  @moduletag timeout: 120_000

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})

    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name) and String.starts_with?(name, "rc-"),
          do: Ringbus.delete(name)
    end)

    {:ok,
     server: server,
     port: Ringbus.Server.port(server, :resp),
     binary_port: Ringbus.Server.port(server)}
  end

  test "redis-cli: XADD, then XREAD BLOCK 0 with $ woken by an XADD from another client", %{
    port: port
  } do
    # IDs are Redis's: the time of storing and a counter.
    first = RedisTools.cli!(port, ~w(XADD rc-s * f v)) |> String.trim_trailing()
    assert first =~ ~r/\A\d{13}-\d+\z/

    reader = Task.async(fn -> RedisTools.cli!(port, ~w(XREAD BLOCK 0 STREAMS rc-s $)) end)
    # INFO counts the reader as blocked once it waits.
    assert Ringbus.Test.Eventually.eventually(fn -> blocked?(port) end)
    second = RedisTools.cli!(port, ~w(XADD rc-s * hello world)) |> String.trim_trailing()
    assert Task.await(reader, 20_000) == "rc-s\n#{second}\nhello\nworld\n"

    assert RedisTools.cli!(port, ~w(XRANGE rc-s - +)) ==
             "#{first}\nf\nv\n#{second}\nhello\nworld\n"

    assert RedisTools.cli!(port, ~w(XLEN rc-s)) == "2\n"
    assert RedisTools.cli!(port, ~w(TYPE rc-s)) == "stream\n"
    assert RedisTools.cli!(port, ~w(PING)) == "PONG\n"
  end

  defp blocked?(port), do: RedisTools.cli!(port, ~w(INFO clients)) =~ "blocked_clients:1"

  test "redis-cli --pipe stores every command of a piped RESP stream", %{port: port} do
    commands = for i <- 1..2_000, do: RespClient.encode(["XADD", "rc-pipe", "*", "n", "#{i}"])
    input = IO.iodata_to_binary(commands)
    path = Path.join(System.tmp_dir!(), "rc-pipe-#{System.unique_integer([:positive])}.resp")
    File.write!(path, input)
    on_exit(fn -> File.rm(path) end)

    pipe = ~s(timeout 20 "$0" -p #{port} --pipe < "$1")
    {out, 0} = System.cmd("sh", ["-c", pipe, RedisTools.redis_cli(), path])
    assert out =~ "errors: 0, replies: 2000"
    assert Ringbus.len("rc-pipe") == 2_000
    assert {:ok, [{1999, payload}], 0} = Ringbus.read("rc-pipe", 1999, 1)
    assert Entry.decode(payload) == ["n", "2000"]
  end

  test "redis-cli -3 speaks RESP3", %{port: port} do
    RedisTools.cli!(port, ~w(XADD rc-r3 * a 1))
    out = RedisTools.cli!(port, ~w(-3 XREAD STREAMS rc-r3 0))
    assert out =~ "rc-r3"
    assert out =~ ~r/\b\d{13}-\d+/

    c = RespClient.connect!(port)
    {[{:map, hello}], c} = RespClient.call(c, ["HELLO", "3"])
    assert {"proto", 3} in hello

    {[{:map, [{"rc-r3", [[_, ["a", "1"]]]}]}], c} =
      RespClient.call(c, ["XREAD", "STREAMS", "rc-r3", "0"])

    {[nil], _c} = RespClient.call(c, ["XREAD", "STREAMS", "rc-r3", "$"])
  end

  @pipeline """
  import sys, redis
  r = redis.Redis(port=int(sys.argv[1]))
  p = r.pipeline(transaction=False)
  for i in range(100):
      p.xadd("rc-py", {"i": str(i), "blob": bytes([i, 0, 13, 10, 255])})
  ids = p.execute()
  key = lambda i: tuple(int(x) for x in i.split(b"-"))
  assert sorted(ids, key=key) == ids and len(set(ids)) == 100, ids
  entries = r.xrange("rc-py", "-", "+", count=3)
  assert entries == [(ids[i], {b"i": b"%d" % i, b"blob": bytes([i, 0, 13, 10, 255])}) for i in range(3)], entries
  assert r.xlen("rc-py") == 100
  assert r.xrevrange("rc-py", "+", "-", count=1)[0][0] == ids[-1]
  # redis-py trims with ~ by default: as in Redis, a stream of one node keeps it.
  assert r.xtrim("rc-py", maxlen=10) == 0
  assert r.xtrim("rc-py", maxlen=10, approximate=False) == 90
  assert r.xlen("rc-py") == 10
  info = r.xinfo_stream("rc-py")
  assert info["length"] == 10 and info["last-generated-id"] == ids[-1], info
  print("ok")
  """

  test "redis-py: a pipeline of XADDs, XRANGE, XREVRANGE, XTRIM, XINFO", %{port: port} do
    assert RedisTools.python!(@pipeline, ["#{port}"]) == "ok\n"
  end

  @block """
  import sys, threading, redis
  port = int(sys.argv[1])
  reader, writer = redis.Redis(port=port), redis.Redis(port=port)
  writer.xadd("rc-block", {"before": "1"})
  got = []
  def read():
      got.append(reader.xread({"rc-block": "$"}, block=0))
  t = threading.Thread(target=read)
  t.start()
  # The server counts the reader as blocked once it waits.
  import time
  for _ in range(2000):
      if writer.info("clients")["blocked_clients"] >= 1:
          break
      time.sleep(0.005)
  woke = writer.xadd("rc-block", {"woke": "up"})
  t.join(10)
  assert not t.is_alive(), "XREAD BLOCK was not woken"
  assert got == [[[b"rc-block", [(woke, {b"woke": b"up"})]]]], got
  assert reader.xread({"rc-block": woke}, block=50) == []
  print("ok")
  """

  test "redis-py: XREAD BLOCK in one client is woken by XADD in another", %{port: port} do
    assert RedisTools.python!(@block, ["#{port}"]) == "ok\n"
  end

  @groups """
  import sys, redis
  r = redis.Redis(port=int(sys.argv[1]))
  ids = [r.xadd("rc-g", {"n": "0"}, maxlen=5)]
  r.xgroup_create("rc-g", "workers", id="0")
  for i in range(1, 5):
      ids.append(r.xadd("rc-g", {"n": str(i)}))
  got = r.xreadgroup("workers", "alice", {"rc-g": ">"}, count=2)
  assert [e[0] for e in got[0][1]] == ids[0:2], got
  got = r.xreadgroup("workers", "bob", {"rc-g": ">"})
  assert [e[0] for e in got[0][1]] == ids[2:5], got
  assert r.xack("rc-g", "workers", ids[0], ids[2]) == 2
  summary = r.xpending("rc-g", "workers")
  assert summary["pending"] == 3 and summary["min"] == ids[1] and summary["max"] == ids[4], summary
  assert sorted((c["name"], c["pending"]) for c in summary["consumers"]) == [(b"alice", 1), (b"bob", 2)], summary
  claimed = r.xautoclaim("rc-g", "workers", "carol", 0, "0-0", count=10)
  assert [e[0] for e in claimed[1]] == [ids[1], ids[3], ids[4]], claimed
  assert r.xreadgroup("workers", "alice", {"rc-g": ">"}) == []
  # Ten more entries, and a trim to five before the group reads them...
  for i in range(5, 15):
      ids.append(r.xadd("rc-g", {"n": str(i)}))
  assert r.xtrim("rc-g", maxlen=5, approximate=False) == 10
  groups = r.xinfo_groups("rc-g")
  assert groups[0]["lag"] == 10, groups
  # ...and the group is told of the five it never saw when it reads again.
  got = r.xreadgroup("workers", "alice", {"rc-g": ">"})
  assert [e[0] for e in got[0][1]] == ids[10:15], got
  groups = r.xinfo_stream("rc-g", full=True)["groups"]
  assert groups[0]["lost"] == 5 and groups[0]["last-delivered-id"] == ids[14], groups
  print("ok")
  """

  test "redis-py: consumer groups, and a group told how many entries it lost", %{port: port} do
    assert RedisTools.python!(@groups, ["#{port}"]) == "ok\n"
  end

  @producer """
  import sys, redis
  r = redis.Redis(port=int(sys.argv[1]))
  first = r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "7", "*", "n", "1")
  # The ID is its entry's in XRANGE.
  assert [e[0] for e in r.xrange("rc-tagged")] == [first]
  # The same XADD sent again, as a client does after -TIMEOUT: stored once, same ID.
  again = r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "7", "*", "n", "1")
  assert again == first, again
  assert r.xlen("rc-tagged") == 1
  second = r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "8", "MAXLEN", "10", "*", "n", "2")
  assert r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "8", "MAXLEN", "10", "*", "n", "2") == second
  assert r.xlen("rc-tagged") == 2 and r.xrange("rc-tagged")[1][0] == second
  # Another producer's counter is its own.
  third = r.execute_command("XADD", "rc-tagged", "PRODUCER", "audit", "7", "*", "n", "3")
  assert r.xrange("rc-tagged")[2][0] == third
  assert r.xlen("rc-tagged") == 3
  r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "200", "*", "n", "4")
  try:
      r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "7", "*", "n", "1")
      raise AssertionError("a stale tag was stored")
  except redis.ResponseError as e:
      assert "PRODUCER" in str(e) and "rc-tagged" in str(e), str(e)
  try:
      r.execute_command("XADD", "rc-tagged", "PRODUCER", "billing", "300", "5-0", "n", "1")
      raise AssertionError("PRODUCER with an explicit ID was taken")
  except redis.ResponseError as e:
      assert str(e) == "XADD with PRODUCER takes the ID *", str(e)
  assert r.xlen("rc-tagged") == 4
  print("ok")
  """

  test "redis-py: XADD PRODUCER sent twice stores one entry and answers the same ID", %{
    port: port
  } do
    assert RedisTools.python!(@producer, ["#{port}"]) == "ok\n"
  end

  @client """
  import sys, redis
  port = int(sys.argv[1])
  a, b = redis.Redis(port=port), redis.Redis(port=port)
  assert a.client_setname("alpha") and b.client_setname("beta")
  a_id, b_id = a.client_id(), b.client_id()
  listed = {c["name"]: c for c in a.client_list()}
  assert listed["alpha"]["id"] == str(a_id) and listed["beta"]["id"] == str(b_id), listed
  assert int(listed["beta"]["tot-cmds"]) >= 2, listed
  assert [c["id"] for c in a.client_list(client_id=[str(b_id)])] == [str(b_id)]
  info = b.client_info()
  assert info["name"] == "beta" and info["addr"] == listed["beta"]["addr"], info
  # SKIPME yes (the default): a does not close itself.
  assert a.client_kill_filter(_id=a_id) == 0
  assert a.client_kill_filter(_id=b_id) == 1
  # The killed connection leaves the list once it has closed (redis-py's
  # pool would quietly open a new one for b).
  import time
  for _ in range(400):
      if str(b_id) not in [c["id"] for c in a.client_list()]:
          break
      time.sleep(0.005)
  assert str(b_id) not in [c["id"] for c in a.client_list()]
  assert "beta" not in [c["name"] for c in a.client_list()]
  try:
      a.client_kill("127.0.0.1:1")
      raise AssertionError("killed a client that does not exist")
  except redis.exceptions.ResponseError as e:
      assert "No such client" in str(e), e
  print("ok")
  """

  test "redis-py: CLIENT LIST, INFO and KILL, with names given by CLIENT SETNAME", %{port: port} do
    assert RedisTools.python!(@client, ["#{port}"]) == "ok\n"
  end

  @keys """
  import sys, redis
  r = redis.Redis(port=int(sys.argv[1]))
  names = [b"rc-k%d" % i for i in range(30)]
  for n in names:
      r.xadd(n, {"f": "v"})
  assert sorted(k for k in r.keys("rc-k*")) == sorted(names)
  assert sorted(r.keys("rc-k1?")) == sorted(n for n in names if len(n) == 6 and n.startswith(b"rc-k1"))
  assert sorted(r.scan_iter(match="rc-k*", count=7)) == sorted(names)
  assert sorted(r.scan_iter(match="rc-k*", _type="STREAM")) == sorted(names)
  assert list(r.scan_iter(match="rc-k*", _type="string")) == []
  assert r.unlink("rc-k0", "rc-k1") == 2
  assert r.exists("rc-k0") == 0
  assert sorted(r.scan_iter(match="rc-k*")) == sorted(names[2:])
  print("ok")
  """

  test "redis-py: keys() and scan_iter() with MATCH, COUNT and TYPE; unlink()", %{port: port} do
    assert RedisTools.python!(@keys, ["#{port}"]) == "ok\n"
  end

  @claim """
  import sys, redis
  r = redis.Redis(port=int(sys.argv[1]))
  ids = [r.xadd("rc-claim", {"n": str(i)}) for i in range(3)]
  r.xgroup_create("rc-claim", "g", id="0")
  r.xreadgroup("g", "alice", {"rc-claim": ">"})
  got = r.xclaim("rc-claim", "g", "bob", 0, ids[0:2], idle=5000, retrycount=7)
  assert [e[0] for e in got] == ids[0:2], got
  assert r.xclaim("rc-claim", "g", "bob", 0, [ids[2]], justid=True) == [ids[2]]
  rows = r.xpending_range("rc-claim", "g", "-", "+", 10)
  assert [(p["message_id"], p["consumer"], p["times_delivered"]) for p in rows] == [(ids[0], b"bob", 7), (ids[1], b"bob", 7), (ids[2], b"bob", 1)], rows
  assert rows[0]["time_since_delivered"] >= 5000, rows
  assert r.execute_command("XSETID", "rc-claim", ids[2])
  full = r.xinfo_stream("rc-claim", full=True)
  assert full["length"] == 3 and len(full["entries"]) == 3, full
  g = full["groups"][0]
  assert g["name"] == b"g" and g["pel-count"] == 3 and len(g["pending"]) == 3, g
  assert len(g["consumers"]) == 2, g
  print("ok")
  """

  test "redis-py: xclaim() with IDLE, RETRYCOUNT and JUSTID; xsetid(); xinfo_stream(full=True)",
       %{port: port} do
    assert RedisTools.python!(@claim, ["#{port}"]) == "ok\n"
  end

  @incarnation """
  import sys, time, redis
  r = redis.Redis(port=int(sys.argv[1]))
  last = r.xadd("rc-inc", {"n": "0"})
  second = r.xadd("rc-inc", {"n": "1"})
  assert r.xread({"rc-inc": last}) == [[b"rc-inc", [(second, {b"n": b"1"})]]]
  # Deleted and made again a ms later: the new entries' IDs are later, as
  # in Redis, so a reader resuming from an old ID reads them.
  r.delete("rc-inc")
  time.sleep(0.002)
  new = [r.xadd("rc-inc", {"n": "new %d" % i}) for i in range(3)]
  got = r.xread({"rc-inc": second})
  assert [e[0] for e in got[0][1]] == new, got
  assert [e[0] for e in r.xrange("rc-inc", min=last)] == new
  print("ok")
  """

  test "redis-py: a stream deleted and made again goes on with later IDs", %{port: port} do
    assert RedisTools.python!(@incarnation, ["#{port}"]) == "ok\n"
  end

  test "a message pushed over the binary protocol reads with XRANGE, and the reverse", ctx do
    {:ok, client} = Ringbus.Client.connect(port: ctx.binary_port)
    raw = <<0, 1, 2, 255, "\r\n">>
    {:ok, 0} = Ringbus.Client.push(client, "rc-mixed", raw)

    c = RespClient.connect!(ctx.port)
    {[[first, ["payload", ^raw]]], c} = call1(c, ["XRANGE", "rc-mixed", "-", "+"])
    # Its ID over RESP is the one it was stored under.
    {:ok, [{0, ^raw, {ms, n}}], 0} = Ringbus.run("rc-mixed", {:read, 0, 1, nil, :ids})
    assert first == "#{ms}-#{n}"

    # An XADD's pairs come back whole to a binary reader, as documented.
    {[_], c} = RespClient.call(c, ["XADD", "rc-mixed", "*", "f", "v\r\n", "", "x"])
    {:ok, [{1, payload}], 0} = Ringbus.Client.read(client, "rc-mixed", 1, 1)
    assert payload == <<0xFF, "RBX", 1, 2::32, 1::32, "f", 3::32, "v\r\n", 0::32, 1::32, "x">>
    assert Entry.decode(payload) == ["f", "v\r\n", "", "x"]

    # The one pair `payload` goes in as the raw bytes.
    {[_], c} = RespClient.call(c, ["XADD", "rc-mixed", "*", "payload", "raw bytes"])
    {:ok, [{2, "raw bytes"}], 0} = Ringbus.Client.read(client, "rc-mixed", 2, 1)

    # And those raw bytes, pushed over the binary protocol, read back the same.
    {:ok, 3} = Ringbus.Client.push(client, "rc-mixed", payload)
    {:ok, [{3, _, {ms, n}}], 0} = Ringbus.run("rc-mixed", {:read, 3, 1, nil, :ids})
    id = "#{ms}-#{n}"
    {[[^id, ["f", "v\r\n", "", "x"]]], _c} = call1(c, ["XRANGE", "rc-mixed", id, id])
    Ringbus.Client.close(client)
  end

  defp call1(c, args) do
    {[reply], c} = RespClient.call(c, args)
    {reply, c}
  end
end
