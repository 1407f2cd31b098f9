defmodule Ringbus.MetricsTest do
  # The figures of a snapshot, and their Prometheus text, which promtool
  # (Debian's prometheus package) must accept.
  use ExUnit.Case, async: false

  alias Ringbus.Metrics
  alias Ringbus.Test.{Promtool, RawClient, RespClient}

  setup do
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    :ok
  end

  defp sample(text, line) do
    assert text =~ line, "expected a line #{inspect(line)} in:\n#{text}"
  end

  test "every figure of the issue's list, named the Prometheus way, and promtool accepts it" do
    server = start_supervised!({Ringbus.Server, port: 0})
    port = Ringbus.Server.port(server)
    :ok = Ringbus.create("metrics", capacity: 3, overflow: :drop_oldest)
    :ok = Ringbus.create("rejects", capacity: 1, overflow: :reject)
    {:ok, 0} = Ringbus.push_many("metrics", ~w(a bb ccc dddd))
    {:ok, 1, "bb"} = Ringbus.pull("metrics")
    {:ok, 0} = Ringbus.push("rejects", "x")
    {:error, :full} = Ringbus.push("rejects", "y")
    {:ok, 1} = Ringbus.delete_messages("rejects", [0])
    {:ok, sub} = Ringbus.subscribe("metrics", from: 0, max_credit: 1, name: "audit")
    assert_receive {:ringbus, ^sub, [{2, "ccc"}], 2}
    {:ok, client} = Ringbus.Client.connect(port: port)

    text = IO.iodata_to_binary(Metrics.prometheus(Metrics.snapshot()))

    for {family, type} <- [
          {"ringbus_channel_len", "gauge"},
          {"ringbus_channel_pushed_total", "counter"},
          {"ringbus_subscription_lag_messages", "gauge"},
          {"ringbus_server_connections", "gauge"},
          {"ringbus_vm_memory_bytes", "gauge"}
        ] do
      sample(text, "# HELP #{family} ")
      sample(text, "# TYPE #{family} #{type}\n")
    end

    sample(text, ~s(ringbus_channel_len{channel="metrics"} 2\n))
    sample(text, ~s(ringbus_channel_capacity{channel="metrics"} 3\n))
    sample(text, ~s(ringbus_channel_pushed_total{channel="metrics"} 4\n))
    sample(text, ~s(ringbus_channel_pulled_total{channel="metrics"} 1\n))
    sample(text, ~s(ringbus_channel_overwritten_total{channel="metrics"} 1\n))
    sample(text, ~s(ringbus_channel_rejected_total{channel="rejects"} 1\n))
    sample(text, ~s(ringbus_channel_expired_total{channel="metrics"} 0\n))
    sample(text, ~s(ringbus_channel_deleted_total{channel="rejects"} 1\n))
    sample(text, ~s(ringbus_channel_skipped{channel="metrics"} 0\n))
    sample(text, ~s(ringbus_channel_subscriptions{channel="metrics"} 1\n))
    assert text =~ ~r/ringbus_channel_held_bytes\{channel="metrics"\} \d+\n/

    sample(text, ~s(ringbus_subscription_lag_messages{channel="metrics",subscriber="audit"} 1\n))
    sample(text, ~s(ringbus_subscription_lost_total{channel="metrics",subscriber="audit"} 2\n))

    labels = ~s(protocol="binary",port="#{port}")
    sample(text, ~s(ringbus_server_connections{#{labels},state="open"} 1\n))
    sample(text, ~s(ringbus_server_accepted_total{#{labels}} 1\n))
    sample(text, ~s(ringbus_server_errors_total{#{labels},code="full"} 0\n))
    sample(text, ~s(ringbus_server_closed_total{#{labels},reason="send_timeout"} 0\n))
    assert text =~ ~r/ringbus_server_frames_received_total\{#{labels}\} [1-9]/
    assert text =~ ~r/ringbus_server_frames_sent_total\{#{labels}\} [1-9]/

    assert text =~ ~r/ringbus_vm_memory_bytes\{kind="total"\} [1-9]/
    assert text =~ ~r/ringbus_vm_run_queue \d+\n/
    assert text =~ ~r/ringbus_vm_processes [1-9]/
    assert text =~ ~r/ringbus_vm_gc_runs_total [1-9]/
    refute text =~ "ringbus_cluster"

    assert {"", 0} = Promtool.check(text)
    Ringbus.Client.close(client)
  end

  test "subscriptions are labelled by the name given, or the client's address, never a pid" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    :ok = Ringbus.create("named", capacity: 10)
    {:ok, _} = Ringbus.subscribe("named", name: "billing-worker")
    # Two subscriptions with no name get one name each.
    {:ok, _} = Ringbus.subscribe("named")
    {:ok, _} = Ringbus.subscribe("named")

    c = RawClient.hello!(Ringbus.Server.port(server)) |> elem(0)
    {{:subscribed, 1, _, _}, c} = RawClient.call(c, {:subscribe, 1, "named", :latest, 10, 10})
    {:ok, {_, binary_port}} = :inet.sockname(c.socket)

    r = RespClient.connect!(Ringbus.Server.port(server, :resp))
    :ok = RespClient.send_commands(r, [~w(XREAD BLOCK 0 STREAMS named $)])
    {:ok, {_, resp_port}} = :inet.sockname(r.socket)

    assert Ringbus.Test.Eventually.eventually(fn ->
             {:ok, subs} = Ringbus.subscriptions("named")
             length(subs) == 5
           end)

    snapshot = Metrics.snapshot()
    text = IO.iodata_to_binary(Metrics.prometheus(snapshot))

    lags =
      Regex.scan(
        ~r/ringbus_subscription_lag_messages\{channel="named",subscriber="([^"]*)"\}/,
        text,
        capture: :all_but_first
      )
      |> List.flatten()
      |> Enum.sort()

    assert lags ==
             Enum.sort([
               "billing-worker",
               "embedded",
               "embedded #2",
               "127.0.0.1:#{binary_port}",
               "127.0.0.1:#{resp_port}"
             ])

    refute text =~ "<0."
    assert {"", 0} = Promtool.check(text)

    status = Ringbus.Metrics.Status.build(snapshot, %{}, 1000)

    vias =
      for s <- status.subscriptions, s.channel == "named", into: %{}, do: {s.subscriber, s.via}

    assert vias["127.0.0.1:#{binary_port}"] == "binary"
    assert vias["127.0.0.1:#{resp_port}"] == "resp"
    assert vias["billing-worker"] == "embedded"

    assert_raise ArgumentError, ~r/:name/, fn -> Ringbus.subscribe("named", name: "") end
    RawClient.close(c)
    RespClient.close(r)
  end

  test "Ringbus.Server.clients/0 lists each connection with its peer and figures, asking none" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    :ok = Ringbus.create("listed", capacity: 10)

    c = RawClient.hello!(Ringbus.Server.port(server)) |> elem(0)
    {{:push_acks, 1, [{1, {:ok, 0}}]}, c} = RawClient.call(c, {:push, 1, :ack, "listed", "hello"})
    {:ok, {_, binary_port}} = :inet.sockname(c.socket)

    r = RespClient.connect!(Ringbus.Server.port(server, :resp))
    {[1], r} = RespClient.call(r, ~w(XLEN listed))
    {:ok, {_, resp_port}} = :inet.sockname(r.socket)

    # A connection that is suspended cannot answer anything: it is listed all the same.
    [pid] = Ringbus.Server.connections(server, :resp)
    :ok = :sys.suspend(pid)

    clients = Ringbus.Server.clients()
    binary = Enum.find(clients, &(&1.peer == "127.0.0.1:#{binary_port}"))
    resp = Enum.find(clients, &(&1.peer == "127.0.0.1:#{resp_port}"))
    :ok = :sys.resume(pid)

    assert %{protocol: :binary, kind: :tcp, state: :open, frames_in: 2, frames_out: 2} = binary
    assert binary.port == Ringbus.Server.port(server)
    assert binary.bytes_in > 0 and binary.bytes_out > 0 and binary.pending_bytes == 0
    assert is_integer(binary.age_ms) and binary.age_ms >= 0

    assert %{protocol: :resp, state: :open, frames_in: 1, frames_out: 1, pid: ^pid} = resp
    assert resp.bytes_in == IO.iodata_length(RespClient.encode(~w(XLEN listed)))
    assert resp.bytes_out == byte_size(":1\r\n")
    assert resp.id > binary.id

    RawClient.close(c)
    RespClient.close(r)
  end

  test "a client that does not read shows the output waiting for it as pending_bytes" do
    server = start_supervised!({Ringbus.Server, port: 0})
    :ok = Ringbus.create("unread", capacity: 600)
    c = RawClient.hello!(Ringbus.Server.port(server)) |> elem(0)
    {{:subscribed, 1, _, _}, c} = RawClient.call(c, {:subscribe, 1, "unread", :latest, 600, 10})
    {:ok, {_, peer_port}} = :inet.sockname(c.socket)
    # More than loopback's socket buffers take at their largest (net.ipv4's
    # tcp_wmem and tcp_rmem maxima, 4 + 32 MiB by default): the rest waits in
    # the server.
    {:ok, _} = Ringbus.push_many("unread", List.duplicate(:binary.copy("x", 65_536), 600))

    pending = fn ->
      Enum.find(Ringbus.Server.clients(), &(&1.peer == "127.0.0.1:#{peer_port}")).pending_bytes
    end

    assert Ringbus.Test.Eventually.eventually(fn -> pending.() > 1_000_000 end)
    RawClient.close(c)
  end

  test "push-to-ack time is a Prometheus histogram per listener, one observation per push" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    port = Ringbus.Server.port(server)
    resp_port = Ringbus.Server.port(server, :resp)
    :ok = Ringbus.create("timed", capacity: 100)

    c = RawClient.hello!(port) |> elem(0)
    # Three pushes in one write: one read, three acks, timed once.
    RawClient.send_frames(c, for(i <- 1..3, do: {:push, i, :ack, "timed", "m"}))
    {[{:push_acks, 3, _}], c} = RawClient.recv(c, 1)

    r = RespClient.connect!(resp_port)

    :ok =
      RespClient.send_commands(r, [
        ~w(XADD timed * f 1),
        ~w(XADD timed 99999999999999-0 f 2),
        ~w(XLEN timed)
      ])

    {[_, _, 5], r} = RespClient.recv(r, 3)

    binary = ~s(protocol="binary",port="#{port}")
    resp = ~s(protocol="resp",port="#{resp_port}")

    text = fn -> IO.iodata_to_binary(Metrics.prometheus(Metrics.snapshot())) end

    assert Ringbus.Test.Eventually.eventually(fn ->
             t = text.()

             t =~ ~s(ringbus_server_push_ack_seconds_count{#{binary}} 3\n) and
               t =~ ~s(ringbus_server_push_ack_seconds_count{#{resp}} 2\n)
           end)

    t = text.()
    sample(t, "# TYPE ringbus_server_push_ack_seconds histogram\n")
    sample(t, ~s(ringbus_server_push_ack_seconds_bucket{#{binary},le="+Inf"} 3\n))
    sample(t, ~s(ringbus_server_push_ack_seconds_bucket{#{resp},le="+Inf"} 2\n))
    sample(t, ~s(ringbus_server_push_ack_seconds_bucket{#{binary},le="1.0e-6"} ))
    assert t =~ ~r/ringbus_server_push_ack_seconds_sum\{#{binary}\} \d/

    # Buckets are cumulative: each holds at least the one before.
    counts =
      Regex.scan(~r/ringbus_server_push_ack_seconds_bucket\{#{binary},le="[^"]+"\} (\d+)/, t,
        capture: :all_but_first
      )
      |> Enum.map(fn [n] -> String.to_integer(n) end)

    assert length(counts) == 26
    assert counts == Enum.sort(counts)
    assert {"", 0} = Promtool.check(t)

    RawClient.close(c)
    RespClient.close(r)
  end

  # The delivery histogram's count per protocol, in a scrape.
  defp delivered do
    text = IO.iodata_to_binary(Metrics.prometheus(Metrics.snapshot()))

    for p <- ~w(embedded binary resp), into: %{} do
      line = ~r/ringbus_subscription_delivery_seconds_count\{protocol="#{p}"\} (\d+)\n/
      [_, n] = Regex.run(line, text)
      {p, String.to_integer(n)}
    end
  end

  # Frames from the binary server until they deliver `count` messages.
  defp recv_delivered(c, count) when count <= 0, do: c

  defp recv_delivered(c, count) do
    {[{:deliver, _sub, 0, n, _messages}], c} = RawClient.recv(c, 1)
    recv_delivered(c, count - n)
  end

  test "push-to-delivery time is a histogram per protocol, one observation per message" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    port = Ringbus.Server.port(server)
    resp_port = Ringbus.Server.port(server, :resp)
    :ok = Ringbus.create("delivered", capacity: 100)
    # A batch stored as one chunk, then two messages pushed alone.
    {:ok, 0} = Ringbus.push_many("delivered", ~w(a b c d e))
    {:ok, 5} = Ringbus.push("delivered", "f")
    {:ok, 6} = Ringbus.push("delivered", "g")
    before = delivered()

    # Embedded: the subscription counts a batch before it sends it.
    {:ok, sub} = Ringbus.subscribe("delivered", from: :earliest, max_batch: 3)

    for _ <- 1..3 do
      assert_receive {:ringbus, ^sub, [_ | _], 0}
    end

    assert delivered() == %{before | "embedded" => before["embedded"] + 7}
    :ok = Ringbus.unsubscribe(sub)

    # Binary: the connection's subscription counts under binary.
    c = RawClient.hello!(port) |> elem(0)

    {{:subscribed, 1, _, _}, c} =
      RawClient.call(c, {:subscribe, 1, "delivered", :earliest, 10, 4})

    c = recv_delivered(c, 7)
    assert delivered()["binary"] == before["binary"] + 7

    # RESP: XREAD BLOCK waits in a subscription (on a stream it makes),
    # which an XADD wakes.
    r = RespClient.connect!(resp_port)
    :ok = RespClient.send_commands(r, [~w(XREAD BLOCK 0 STREAMS delivered-resp $)])

    assert Ringbus.Test.Eventually.eventually(fn ->
             match?({:ok, [_]}, Ringbus.subscriptions("delivered-resp"))
           end)

    w = RespClient.connect!(resp_port)
    {[id], w} = RespClient.call(w, ~w(XADD delivered-resp * f v))
    {[[["delivered-resp", [[^id, ["f", "v"]]]]]], r} = RespClient.recv(r, 1)
    assert delivered()["resp"] == before["resp"] + 1

    text = IO.iodata_to_binary(Metrics.prometheus(Metrics.snapshot()))
    sample(text, "# TYPE ringbus_subscription_delivery_seconds histogram\n")

    for protocol <- ~w(embedded binary resp) do
      labels = ~s(protocol="#{protocol}")

      [_, count] =
        Regex.run(~r/ringbus_subscription_delivery_seconds_count\{#{labels}\} (\d+)/, text)

      sample(
        text,
        ~s(ringbus_subscription_delivery_seconds_bucket{#{labels},le="+Inf"} #{count}\n)
      )

      assert text =~ ~r/ringbus_subscription_delivery_seconds_sum\{#{labels}\} \d/

      # Buckets are cumulative: each holds at least the one before.
      counts =
        Regex.scan(
          ~r/ringbus_subscription_delivery_seconds_bucket\{#{labels},le="[^"]+"\} (\d+)/,
          text,
          capture: :all_but_first
        )
        |> Enum.map(fn [n] -> String.to_integer(n) end)

      assert length(counts) == 26
      assert counts == Enum.sort(counts)
    end

    assert {"", 0} = Promtool.check(text)
    RawClient.close(c)
    RespClient.close(r)
    RespClient.close(w)
  end

  test "a subscription's via: is one of the protocols the histogram knows" do
    :ok = Ringbus.create("via", capacity: 1)

    assert_raise ArgumentError,
                 "expected :via to be :embedded, :binary or :resp, got: :http",
                 fn ->
                   Ringbus.subscribe("via", via: :http)
                 end
  end

  test "a time falls in the least power-of-2 µs bucket that holds it" do
    alias Ringbus.Histogram

    assert Enum.map([0, 1, 2, 3, 4, 5, 1024, 1025], &Histogram.bucket/1) ==
             [0, 0, 1, 2, 2, 3, 10, 11]

    assert Histogram.bucket(1_000_000_000) == 25
  end

  test "labels are escaped, and names that are not UTF-8 text are inspected" do
    :ok = Ringbus.create(~s(quote"back\\slash), capacity: 1)
    :ok = Ringbus.create(<<255, 0>>, capacity: 1)
    :ok = Ringbus.create({:tuple, 1}, capacity: 1)

    text = IO.iodata_to_binary(Metrics.prometheus(Metrics.snapshot()))

    sample(text, ~S(ringbus_channel_len{channel="quote\"back\\slash"} 0))
    sample(text, ~S(ringbus_channel_len{channel="<<255, 0>>"} 0))
    sample(text, ~S(ringbus_channel_len{channel="{:tuple, 1}"} 0))
    assert {"", 0} = Promtool.check(text)
  end

  test "cluster links, read by field name, become their own families" do
    cluster = %{
      members: [:a@host, :b@host, :c@host],
      links: %{
        :b@host => %{
          state: :up,
          queued_bytes: 10,
          batches: 5,
          drops: 1,
          suspensions: 2,
          calls_ok: 7,
          calls_refused: 3,
          calls_timeout: 1,
          new: 9
        },
        :c@host => %{state: :down, queued_bytes: 0}
      }
    }

    snapshot = %{Metrics.snapshot() | cluster: cluster}
    text = IO.iodata_to_binary(Metrics.prometheus(snapshot))

    sample(text, "ringbus_cluster_members 3\n")
    sample(text, ~s(ringbus_cluster_link_state{node="b@host",state="up"} 1\n))
    sample(text, ~s(ringbus_cluster_link_state{node="c@host",state="down"} 1\n))
    sample(text, ~s(ringbus_cluster_link_queued_bytes{node="b@host"} 10\n))
    sample(text, ~s(ringbus_cluster_link_batches_total{node="b@host"} 5\n))
    sample(text, ~s(ringbus_cluster_link_drops_total{node="b@host"} 1\n))
    sample(text, ~s(ringbus_cluster_link_suspensions_total{node="b@host"} 2\n))
    sample(text, ~s(ringbus_cluster_calls_total{node="b@host",outcome="ok"} 7\n))
    sample(text, ~s(ringbus_cluster_calls_total{node="b@host",outcome="refused"} 3\n))
    sample(text, ~s(ringbus_cluster_calls_total{node="b@host",outcome="timeout"} 1\n))
    refute text =~ ~s(ringbus_cluster_calls_total{node="c@host")
    # A figure a link does not give is left out, not made up.
    refute text =~ ~s(ringbus_cluster_link_batches_total{node="c@host"})
    assert {"", 0} = Promtool.check(text)

    # /status and /status.txt show the calls by outcome in the links table.
    status = Ringbus.Metrics.Status.build(snapshot, %{}, 1000)
    html = IO.iodata_to_binary(Ringbus.HTTP.StatusPage.render(status))
    assert html =~ ~r{<th>calls_ok</th><th>refused</th><th>timeout</th>}
    assert html =~ ~r{<td class="name">b@host</td>.*<td[^>]*>7</td><td[^>]*>3</td><td[^>]*>1</td>}

    txt = IO.iodata_to_binary(Ringbus.HTTP.StatusText.render(status))
    assert txt =~ ~r/CALLS_OK\s+REFUSED\s+TIMEOUT\n/
    assert txt =~ ~r/b@host .* 7\s+3\s+1\n/
  end

  test "consumer groups: their figures per channel and group" do
    name = "metrics-groups-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, capacity: 10)
    on_exit(fn -> Ringbus.delete(name) end)
    :ok = Ringbus.Groups.create(name, "g", from: :earliest)
    {:ok, _} = Ringbus.push_many(name, ["a", "b", "c"])
    {:ok, [_, _]} = Ringbus.Groups.fetch(name, "g", "c1", 2)
    {:ok, 1} = Ringbus.Groups.ack(name, "g", [0])
    {:ok, 1} = Ringbus.Groups.nack(name, "g", [1])
    {:ok, [{1, "b", 2}]} = Ringbus.Groups.fetch(name, "g", "c1", 1)

    text = IO.iodata_to_binary(Ringbus.Metrics.prometheus(Ringbus.Metrics.snapshot()))
    labels = ~s({channel="#{name}",group="g"})

    for {family, value} <- [
          {"ringbus_group_pending_messages", 1},
          {"ringbus_group_lag_messages", 1},
          {"ringbus_group_consumers", 1},
          {"ringbus_group_acked_total", 1},
          {"ringbus_group_redelivered_total", 1},
          {"ringbus_group_dead_total", 0},
          {"ringbus_group_lost_total", 0},
          {"ringbus_group_held_total", 0}
        ],
        do: assert(text =~ "#{family}#{labels} #{value}\n")
  end

  test "README's Operating Ringbus lists every family, in full or by its suffix" do
    [_, section] = String.split(File.read!("README.md"), "## Operating Ringbus", parts: 2)
    [section | _] = String.split(section, "\n## ", parts: 2)

    prefixes =
      ~w(ringbus_channel ringbus_subscription ringbus_server ringbus_resp_group ringbus_vm) ++
        ~w(ringbus_group) ++
        ~w(ringbus_cluster_link ringbus_cluster ringbus_replica)

    for family <- Ringbus.Metrics.Prometheus.family_names() do
      suffixes =
        for p <- prefixes,
            String.starts_with?(family, p <> "_"),
            do: "`" <> String.replace_prefix(family, p, "") <> "`"

      assert Enum.any?(["`#{family}`" | suffixes], &String.contains?(section, &1)),
             "README's Operating Ringbus does not list #{family}"
    end
  end

  test "the module doc lists every family" do
    {:docs_v1, _, _, _, %{"en" => doc}, _, _} = Code.fetch_docs(Ringbus.Metrics)

    for family <- Ringbus.Metrics.Prometheus.family_names(),
        do: assert(doc =~ "`#{family}`")
  end
end
