defmodule Ringbus.HTTPTest do
  # The operators' endpoint over real HTTP: /metrics (checked by promtool),
  # /status, /status.json and /status.txt.
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  alias Ringbus.Test.{Promtool, RawClient, RespClient}

  setup do
    server = start_supervised!({Ringbus.Server, port: 0})
    http = start_supervised!({Ringbus.HTTP, port: 0, interval: 20})
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    %{server: server, url: "http://127.0.0.1:#{Ringbus.HTTP.port(http)}"}
  end

  defp get(url, method \\ :get) do
    {:ok, {{_, code, _}, headers, body}} =
      :httpc.request(method, {String.to_charlist(url), []}, [autoredirect: false],
        body_format: :binary
      )

    {code, Map.new(headers, fn {k, v} -> {to_string(k), to_string(v)} end), body}
  end

  test "GET /health says ok; GET /ready says ready while a server listens", %{url: url} do
    assert {200, headers, "ok\n"} = get(url <> "/health")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert {200, _, "ready\n"} = get(url <> "/ready")
  end

  test "GET /ready is 503 with the reason until the node has joined its cluster", %{url: url} do
    cluster = Application.get_env(:ringbus, :cluster)
    on_exit(fn -> restore(:cluster, cluster) end)
    Application.put_env(:ringbus, :cluster, join: [:"absent@127.0.0.1"])

    assert {503, _,
            "not ready: not joined to the cluster: none of absent@127.0.0.1 is connected\n"} =
             get(url <> "/ready")

    # Liveness does not depend on it.
    assert {200, _, "ok\n"} = get(url <> "/health")
  end

  defp restore(key, nil), do: Application.delete_env(:ringbus, key)
  defp restore(key, value), do: Application.put_env(:ringbus, key, value)

  test "GET /metrics: the Prometheus text format, which promtool accepts", %{url: url} do
    :ok = Ringbus.create("scraped", capacity: 10)
    {:ok, _} = Ringbus.push_many("scraped", ~w(a b c))

    {200, headers, body} = get(url <> "/metrics")
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert body =~ ~s(ringbus_channel_pushed_total{channel="scraped"} 3\n)
    assert body =~ ~r/ringbus_server_connections\{protocol="binary",port="\d+",state="open"\} 0\n/
    assert {"", 0} = Promtool.check(body)
  end

  test "/metrics shows the node's Raft WAL grow as replicated channels write, and Ra's ETS tables",
       %{url: url} do
    :ok = Ringbus.create("durable-wal", replicas: 1, capacity: 1_000)
    {:ok, _} = Ringbus.push("durable-wal", "first")

    # The node's figures come with its next report.
    assert eventually(fn -> is_integer(sample(url, "ringbus_replica_wal_bytes")) end, 1000)
    before = sample(url, "ringbus_replica_wal_bytes")

    mib = :binary.copy("w", 1024 * 1024)
    for _ <- 1..4, do: {:ok, _} = Ringbus.push_many("durable-wal", [mib])

    assert eventually(
             fn -> sample(url, "ringbus_replica_wal_bytes") >= before + 4 * byte_size(mib) end,
             1000
           )

    assert sample(url, "ringbus_replica_ets_bytes") > 0
    {200, _, body} = get(url <> "/metrics")
    assert {"", 0} = Promtool.check(body)
  end

  # A family's one sample without labels, as /metrics shows it now; nil without one.
  defp sample(url, family) do
    {200, _, body} = get(url <> "/metrics")

    case Regex.run(~r/^#{family} (\d+)$/m, body) do
      [_, n] -> String.to_integer(n)
      nil -> nil
    end
  end

  test "a replicated channel's member: in /metrics (promtool accepts it) and on /status, .json, .txt",
       %{url: url} do
    :ok = Ringbus.create("durable-shown", replicas: 1, capacity: 10)
    {:ok, _} = Ringbus.push_many("durable-shown", ~w(a b))
    me = Atom.to_string(node())

    # Its figures come with this node's next report, Ra's after its next tick.
    assert eventually(
             fn ->
               {_, _, body} = get(url <> "/metrics")
               body =~ ~r/^ringbus_replica_applied_index\{channel="durable-shown"\} [1-9]/m
             end,
             1000
           )

    {200, _, body} = get(url <> "/metrics")
    assert {"", 0} = Promtool.check(body)
    assert body =~ ~s(ringbus_replica_role{channel="durable-shown",role="leader"} 1\n)
    assert body =~ ~s(ringbus_replica_lag_entries{channel="durable-shown"} 0\n)
    assert body =~ ~s(ringbus_replica_lag_seconds{channel="durable-shown"} 0.0\n)

    for family <- ~w(term commit_index elections_total snapshot_bytes log_bytes),
        do: assert(body =~ ~r/^ringbus_replica_#{family}\{channel="durable-shown"\} \d+\n/m)

    {200, _, html} = get(url <> "/status")
    assert html =~ ~s(<table id="replicas">)

    assert html =~
             ~s(<td class="name">durable-shown</td><td class="name">#{me}</td><td class="name">leader</td>)

    {200, _, json} = get(url <> "/status.json")
    assert json =~ ~r/"replicas":\[\{[^}]*"role":"leader"/
    assert json =~ ~s("channel":"durable-shown")

    {200, _, text} = get(url <> "/status.txt")

    assert text =~
             ~r/^CHANNEL\s+NODE\s+ROLE\s+TERM\s+COMMIT\s+APPLIED\s+APPLIED_SEQ\s+LAG\s+LAG_S/m

    assert text =~
             ~r/^durable-shown\s+#{Regex.escape(me)}\s+leader\s+\d+\s+\d+\s+\d+\s+1\s+0\s+0.0\s/m
  end

  test "/status, /status.json and /status.txt show the same channel figures", %{url: url} do
    :ok = Ringbus.create("shown<&>", capacity: 100, overflow: :reject)
    {:ok, sub} = Ringbus.subscribe("shown<&>", max_credit: 1)
    {:ok, _} = Ringbus.push_many("shown<&>", ~w(a b c d))
    assert_receive {:ringbus, ^sub, _, 0}

    {200, headers, html} = get(url <> "/status")
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert html =~ ~s(<meta http-equiv="refresh" content="2">)
    # Self-contained: no script, no stylesheet or image fetched from anywhere.
    refute html =~ ~r/<script|<link|<img|src=|url\(/i
    assert html =~ ~s(<table id="channels">)

    assert html =~
             ~s(<tr data-channel="shown&lt;&amp;&gt;"><td class="name">shown&lt;&amp;&gt;</td><td>4 / 100</td>)

    assert html =~ "<svg"
    assert html =~ ~s(<table id="subscriptions">)
    assert html =~ ~s(<table id="servers">)
    assert html =~ "Not in a cluster."

    {200, headers, json} = get(url <> "/status.json")
    assert headers["content-type"] == "application/json"
    assert json =~ ~s("name":"shown<&>")
    assert json =~ ~s("len":4)
    assert json =~ ~s("capacity":100)
    assert json =~ ~s("overflow":"reject")
    assert json =~ ~s("max_lag":3)
    assert json =~ ~s("cluster":null)

    {200, _, text} = get(url <> "/status.txt")
    assert [header | _] = text |> String.split("\n") |> Enum.filter(&(&1 =~ "CHANNEL"))
    assert header =~ ~r/^CHANNEL\s+LEN\s+CAPACITY\s+HELD\s+PUSHED\s+PULLED/
    assert text =~ ~r/^shown<&>\s+4\s+100\s+\S+ B\s+4\s+0\s+0\s+0\s+[\d.]+\s+[\d.]+\s+1\s+3\s+0$/m
    assert text =~ ~r/^binary:\d+\s+0\s+0/m
  end

  test "the sparklines hold the rates of the last samples", %{url: url} do
    :ok = Ringbus.create("rated", capacity: 1000)
    # Sampled before the pushes, and after them.
    assert eventually(fn -> push_rates(url) != [] end)
    {:ok, _} = Ringbus.push_many("rated", List.duplicate("m", 500))
    assert eventually(fn -> Enum.any?(push_rates(url), &(&1 > 0)) end)
  end

  defp push_rates(url) do
    {200, _, json} = get(url <> "/status.json")
    [rates] = Regex.run(~r/"push_rate":\[([^\]]*)\]/, json, capture: :all_but_first)
    rates |> String.split(",", trim: true) |> Enum.map(&String.to_float/1)
  end

  test "RESP consumer groups in /metrics, /status's groups table and /status.txt", %{url: url} do
    resp = start_supervised!({Ringbus.Server, port: 0, resp_port: 0}, id: :resp)
    port = Ringbus.Server.port(resp, :resp)
    c = RespClient.connect!(port)

    [first | _] =
      for n <- ~w(1 2 3 4) do
        {[id], _} = RespClient.call(c, ~w(XADD orders * n #{n}))
        id
      end

    {[{:simple, "OK"}], c} = RespClient.call(c, ~w(XGROUP CREATE orders billing 0))
    {[{:simple, "OK"}], c} = RespClient.call(c, ~w(XGROUP CREATE orders idle $))
    {[[_]], c} = RespClient.call(c, ~w(XREADGROUP GROUP billing alice COUNT 3 STREAMS orders >))
    {[[_]], c} = RespClient.call(c, ~w(XREADGROUP GROUP billing bob COUNT 1 STREAMS orders 0))
    {[1], c} = RespClient.call(c, ["XACK", "orders", "billing", first])
    {[_], c} = RespClient.call(c, ~w(XADD orders * n 5))

    {200, _, body} = get(url <> "/metrics")
    billing = ~s(port="#{port}",stream="orders",group="billing")
    idle = ~s(port="#{port}",stream="orders",group="idle")
    # 3 delivered, 1 acked; 2 of 5 entries not yet delivered to the group.
    assert body =~ ~s(ringbus_resp_group_pending_entries{#{billing}} 2\n)
    assert body =~ ~s(ringbus_resp_group_lag_messages{#{billing}} 2\n)
    assert body =~ ~s(ringbus_resp_group_consumers{#{billing}} 2\n)
    assert body =~ ~r/ringbus_resp_group_max_idle_seconds\{#{billing}\} \d+\.\d+\n/
    assert body =~ ~s(ringbus_resp_group_lag_messages{#{idle}} 1\n)
    assert body =~ ~s(ringbus_resp_group_consumers{#{idle}} 0\n)
    refute body =~ ~s(ringbus_resp_group_max_idle_seconds{#{idle}})
    assert {"", 0} = Promtool.check(body)

    {200, _, html} = get(url <> "/status")
    [table] = Regex.run(~r{<table id="groups">.*?</table>}s, html)

    assert table =~
             ~r{<tr><td class="name">orders</td><td class="name">billing</td><td>#{port}</td><td>2</td><td>2</td><td>2</td><td>[\d.]+ s</td><td>0</td><td>0</td></tr>}

    {200, _, json} = get(url <> "/status.json")
    assert json =~ ~s("group":"billing")

    # The terminal tables (Ringbus.Release.stats/1, mix ringbus.stats).
    {200, _, text} = get(url <> "/status.txt")
    assert text =~ ~r/^STREAM\s+GROUP\s+PORT\s+CONSUMERS\s+PENDING\s+LAG\s+MAX_IDLE/m
    assert text =~ ~r/^orders\s+billing\s+#{port}\s+2\s+2\s+2\s+[\d.]+ s\s+0\s+0$/m
    RespClient.close(c)
  end

  test "GET /connections.json and /status's clients table list each connection", %{
    url: url,
    server: server
  } do
    port = Ringbus.Server.port(server)
    {c, _limits} = RawClient.hello!(port)
    {:ok, {_, peer_port}} = :inet.sockname(c.socket)
    {{:pong, 1}, c} = RawClient.call(c, {:ping, 1})
    # A connection that cannot answer (suspended) does not hold the page up.
    [pid] = Ringbus.Server.connections(server)
    :ok = :sys.suspend(pid)

    {200, headers, json} = get(url <> "/connections.json")
    {200, _, html} = get(url <> "/status")
    :ok = :sys.resume(pid)

    assert headers["content-type"] == "application/json"
    [entry] = Regex.run(~r/\{[^{}]*"peer":"127\.0\.0\.1:#{peer_port}"[^{}]*\}/, json)
    assert entry =~ ~s("protocol":"binary")
    assert entry =~ ~s("port":#{port})
    assert entry =~ ~s("state":"open")
    assert entry =~ ~s("frames_in":2)
    assert entry =~ ~s("frames_out":2)
    assert entry =~ ~s("pending_bytes":0)
    assert entry =~ ~r/"age_ms":\d+/
    assert entry =~ ~r/"bytes_in":[1-9]/
    refute json =~ "<0."

    [table] = Regex.run(~r{<table id="clients">.*?</table>}s, html)

    assert table =~
             ~r{<tr><td class="name">127\.0\.0\.1:#{peer_port}</td><td class="name">binary</td><td>#{port}</td><td>open</td>}

    RawClient.close(c)
  end

  test "other paths are not found, other methods not allowed, / leads to /status", %{url: url} do
    assert {404, _, _} = get(url <> "/nope")
    assert {405, %{"allow" => "GET, HEAD"}, _} = get(url <> "/metrics", :delete)
    assert {302, %{"location" => "/status"}, _} = get(url <> "/")
  end

  test "binds 127.0.0.1 unless told otherwise" do
    assert Ringbus.HTTP.validate_options!([])[:host] == {127, 0, 0, 1}
    http = start_supervised!({Ringbus.HTTP, port: 0}, id: :second)
    port = Ringbus.HTTP.port(http)

    for {_name, opts} <- elem(:inet.getifaddrs(), 1),
        {:addr, {a, _, _, _} = ip} <- opts,
        a != 127 do
      assert {:error, :econnrefused} = :gen_tcp.connect(ip, port, [], 1_000)
    end

    assert_raise ArgumentError, ~r/:host/, fn -> Ringbus.HTTP.validate_options!(host: "x") end
    assert_raise ArgumentError, ~r/:port/, fn -> Ringbus.HTTP.validate_options!(port: -1) end
  end
end
