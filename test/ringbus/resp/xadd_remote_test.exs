defmodule Ringbus.Resp.XaddRemoteTest do
  # The XADDs of one read to a stream homed on another node go there as one
  # push, and answer and store what the same XADDs one per read would; a
  # batch larger than the link to that node may carry goes one by one.
  # Real nodes (`:peer`): the RESP server runs on `a`, the streams live on `b`.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.ClusterProbe, as: Probe
  alias Ringbus.Test.{RespClient, RespIds}

  import Ringbus.Test.Eventually

  @moduletag timeout: 120_000
  # A link's bound, small enough for one read's XADDs to pass it.
  @bound 4096

  setup_all do
    cluster = [call_timeout: 2_000, reply_timeout: 10_000, max_buffer_bytes: @bound]
    nodes = Nodes.start(2, "xaddrem", net_ticktime: 4, cluster: cluster)
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    [a, b] = nodes
    port = Nodes.call(a, Probe, :start_server, [[resp_port: 0], :resp], 10_000)
    assert is_integer(port)
    %{a: a, b: b, port: port}
  end

  @made [
    {"xr-d", capacity: 50, overflow: :drop_oldest},
    {"xr-r", capacity: 4, overflow: :reject}
  ]

  test "mixed XADDs to remote streams: in one read as one per read", ctx do
    commands =
      for i <- 1..12 do
        case rem(i, 4) do
          0 -> ["XADD", "xr-d", "MAXLEN", "5", "*", "f", "#{i}"]
          1 -> ["XADD", "xr-d", "*", "f", "#{i}"]
          2 -> ["XADD", "xr-r", "*", "f", "#{i}"]
          3 -> ["XADD", "xr-d", "*", "f", "#{i}"]
        end
      end

    assert run(ctx, commands, :one_read) == run(ctx, commands, :one_by_one)
  end

  test "XADDs of one read past the link's bound go one by one, each stored", ctx do
    value = String.duplicate("v", 300)
    commands = for _ <- 1..20, do: ["XADD", "xr-d", "*", "f", value]

    {replies, [{"xr-d", %{len: 20}, _} | _]} = result = run(ctx, commands, :one_read)
    assert replies == List.duplicate("{id}", 20)
    assert result == run(ctx, commands, :one_by_one)
  end

  # One operation where the stream lives: the push, the trim and the
  # incarnation the ID is tagged with come back in one answer.
  test "an XADD to a stream on another node is one link round trip, MAXLEN = 0 over held entries too",
       ctx do
    Nodes.call(ctx.b, Ringbus, :delete, ["xr-one"])
    :ok = Nodes.call(ctx.b, Ringbus, :create, ["xr-one", [capacity: 50]])
    assert eventually(fn -> Nodes.call(ctx.a, Ringbus, :len, ["xr-one"]) == 0 end)
    client = RespClient.connect!(ctx.port)

    for command <- [
          ~w(XADD xr-one * f 1),
          ~w(XADD xr-one * f 2),
          ~w(XADD xr-one MAXLEN = 0 * f 3)
        ] do
      before = calls(ctx.a, ctx.b.node)
      {[id], _} = RespClient.call(client, command)
      assert is_binary(id)
      assert calls(ctx.a, ctx.b.node) - before == 1, "#{inspect(command)}: one round trip"
    end

    RespClient.close(client)
    {:ok, info} = Nodes.call(ctx.b, Ringbus, :info, ["xr-one"])
    assert %{len: 0, pulled: 3, next_seq: 3} = info
  end

  defp calls(a, b) do
    %{links: %{^b => link}} = Nodes.call(a, Ringbus.Cluster, :info, [])
    link.calls_ok + link.calls_refused + link.calls_timeout
  end

  defp run(%{a: a, b: b, port: port}, commands, how) do
    for {name, opts} <- @made do
      Nodes.call(b, Ringbus, :delete, [name])
      :ok = Nodes.call(b, Ringbus, :create, [name, opts])
    end

    # a knows where the new streams live, and that they are empty.
    for {name, _} <- @made do
      assert eventually(fn -> Nodes.call(a, Ringbus, :len, [name]) == 0 end)
    end

    client = RespClient.connect!(port)

    {replies, client} =
      case how do
        :one_read -> RespClient.calls(client, commands)
        :one_by_one -> Enum.flat_map_reduce(commands, client, &RespClient.call(&2, &1))
      end

    RespClient.close(client)
    # Auto IDs are times, others in each run: named by their order.
    replies = RespIds.named(replies)

    {replies, for({name, _} <- @made, do: held(b, name))}
  end

  defp held(b, name) do
    {:ok, info} = Nodes.call(b, Ringbus, :info, [name])
    {:ok, entries, _lost} = Nodes.call(b, Ringbus, :read, [name, 0, 1000])
    # Bytes held compare where max_bytes bounds them: without it, a drop-oldest
    # channel keeps a batch as one chunk, whose bytes go with its last entry.
    figures = [:len, :first_seq, :next_seq, :pulled, :overwritten, :rejected]
    figures = if info.max_bytes, do: [:bytes | figures], else: figures
    {name, Map.take(info, figures), entries}
  end
end
