defmodule Ringbus.Resp.GroupReplicatedTest do
  # A stream replicated on three nodes (`resp_stream_replicas: 3`), each
  # with a RESP listener, used as a new user would with redis-py: its group
  # is one group through every node, and it outlives kill -9 of a member
  # and that member's restart on its data dir, pending entries and all.
  use ExUnit.Case, async: true

  import Ringbus.Test.Eventually

  alias Ringbus.Test.{Nodes, Peers, RedisTools}
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 180_000

  @before_kill """
  import sys, redis
  a, b, c = (redis.Redis(port=int(p)) for p in sys.argv[1:4])
  ids = [a.xadd("rs", {"n": str(i)}) for i in range(10)]
  assert a.xgroup_create("rs", "workers", id="0")
  # The same group through every node: a second one is refused.
  for other in (b, c):
      try:
          other.xgroup_create("rs", "workers", id="0")
          raise AssertionError("a second group of the same name")
      except redis.ResponseError as e:
          assert str(e).startswith("BUSYGROUP"), str(e)
  got = b.xreadgroup("workers", "cb", {"rs": ">"}, count=5)[0][1]
  assert [e[0] for e in got] == ids[:5], got
  p = c.xpending("rs", "workers")
  assert p["pending"] == 5 and p["consumers"] == [{"name": b"cb", "pending": 5}], p
  assert c.xack("rs", "workers", ids[0]) == 1
  print(" ".join(i.decode() for i in ids))
  """

  @after_kill """
  import sys, redis
  ids = [i.encode() for i in sys.argv[3:]]
  b, c = (redis.Redis(port=int(p)) for p in sys.argv[1:3])
  p = b.xpending("rs", "workers")
  assert p["pending"] == 4 and p["min"] == ids[1] and p["max"] == ids[4], p
  # Nothing delivered before is delivered again as new.
  got = c.xreadgroup("workers", "cc", {"rs": ">"}, count=10)[0][1]
  assert [e[0] for e in got] == ids[5:], got
  assert b.xpending("rs", "workers")["pending"] == 9
  print("ok")
  """

  @restarted """
  import sys, redis
  ids = [i.encode() for i in sys.argv[2:]]
  a = redis.Redis(port=int(sys.argv[1]))
  rows = a.xpending_range("rs", "workers", "-", "+", 100)
  assert [r["message_id"] for r in rows] == ids[1:], rows
  assert sorted(set(r["consumer"] for r in rows)) == [b"cb", b"cc"], rows
  g = a.xinfo_groups("rs")
  assert len(g) == 1 and g[0]["pending"] == 9 and g[0]["last-delivered-id"] == ids[-1], g
  print("ok")
  """

  test "redis-py through three members: one group, which outlives kill -9 of a member and its restart" do
    [a, b, c] = nodes = Peers.start_joined(3, "resp_groups_replicated")
    [pa, pb, pc] = for n <- nodes, do: resp_port(n)

    ids = RedisTools.python!(@before_kill, ["#{pa}", "#{pb}", "#{pc}"]) |> String.split()

    assert length(ids) == 10
    # The stream has a member on each node.
    assert {:ok, %{replicas: 3}} = Nodes.call(a, Ringbus, :info, ["rs"])

    Nodes.signal(a, :kill)
    assert RedisTools.python!(@after_kill, ["#{pb}", "#{pc}" | ids]) == "ok\n"

    restarted = Nodes.restart(a)
    on_exit(fn -> Nodes.stop([restarted]) end)
    :ok = Nodes.join([restarted, b, c])

    assert eventually(fn ->
             match?({:ok, %{len: 10}}, Nodes.call(restarted, Ringbus, :info, ["rs"]))
           end)

    pa = resp_port(restarted)
    assert RedisTools.python!(@restarted, ["#{pa}" | ids]) == "ok\n"
  end

  defp resp_port(node),
    do: Nodes.call(node, Probe, :start_server, [[resp_port: 0, resp_stream_replicas: 3], :resp])
end
