defmodule Ringbus.HTTP.StatusPage do
  @moduledoc false
  # `/status`: the status (`Ringbus.Metrics.Status`) as one HTML page with
  # no external assets: its style is inline, its sparklines are inline SVG,
  # and it reloads itself with a meta refresh, so it needs no script. Every
  # text that comes from a user (channel names) is escaped. Pure.

  import Ringbus.HTTP.Units

  @refresh_seconds 2
  # Narrow enough that the channels table, three sparklines wide, fits a
  # 1280 px window (test/ringbus/http/status_page_browser_test.exs).
  @spark_width 64
  @spark_height 20

  @spec render(map()) :: iodata()
  def render(status) do
    [
      """
      <!DOCTYPE html>
      <html lang="en"><head><meta charset="utf-8">
      <meta http-equiv="refresh" content="#{@refresh_seconds}">
      <title>Ringbus on #{h(status.node)}</title>
      <style>
      body{font:13px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
      h1{font-size:1.5em;margin:0 0 .2em}h1 small{font-weight:normal;color:#666;font-size:.6em}
      h2{font-size:1.15em;margin:1.4em 0 .4em}h3{font-size:1em;margin:1em 0 .3em;color:#444}
      table{border-collapse:collapse;background:#fff;max-width:100%}
      th,td{padding:.25em .5em;border-bottom:1px solid #e4e4e4;text-align:right;white-space:nowrap}
      th{background:#f0f0f0;font-weight:600;white-space:normal;vertical-align:bottom}
      td.name,th.name{text-align:left}
      td.name{white-space:normal;overflow-wrap:anywhere;min-width:6em;max-width:20em}
      td.spark{text-align:left}td.spark svg{vertical-align:middle;margin-right:.3em}
      .vm,.window{color:#444}.none{color:#888}
      </style></head><body>
      """,
      header(status),
      "<h2>Channels</h2>\n",
      channels(status),
      replicas(Map.get(status, :replicas, [])),
      "<h2>Subscriptions</h2>\n",
      subscriptions(status.subscriptions),
      "<h2>Consumer groups</h2>\n",
      channel_groups(status),
      "<h3>RESP consumer groups</h3>\n",
      groups(status.groups),
      "<h2>Connections</h2>\n",
      servers(status.servers, status.sample_interval_ms),
      clients(status.clients),
      "<h2>Cluster</h2>\n",
      cluster(status.cluster, status.sample_interval_ms),
      "</body></html>\n"
    ]
  end

  defp header(s) do
    vm = s.vm

    [
      "<h1>Ringbus #{h(s.version)} <small>#{h(s.node)} · up #{duration(s.uptime_seconds)} · ",
      "#{h(s.generated_at)} · reloads every #{@refresh_seconds} s</small></h1>\n",
      "<p class=\"vm\">VM memory #{bytes(vm.memory_bytes)} · #{vm.processes} processes · ",
      "run queue #{vm.run_queue} · #{vm.gc_runs} GCs · #{vm.schedulers} schedulers</p>\n"
    ]
  end

  defp channels(%{channels: []}), do: none("channels", "No channels.")

  defp channels(%{channels: channels, sample_interval_ms: interval}) do
    header =
      ["channel", "len / capacity", "held / max bytes", "pushed", "pulled", "overwritten"] ++
        ["rejected", "push/s", "pull/s", "subs", "max lag", "lost"]

    rows =
      for c <- channels do
        {[" data-channel=\"", h(c.name), "\""],
         [
           c.name,
           "#{count(c.len)} / #{count(c.capacity)}",
           "#{bytes(c.held_bytes)} / #{if c.max_bytes, do: bytes(c.max_bytes), else: "no bound"}",
           count(c.pushed),
           count(c.pulled),
           count(c.overwritten),
           count(c.rejected),
           {:spark, c.push_rate, List.last(c.push_rate)},
           {:spark, c.pull_rate, List.last(c.pull_rate)},
           c.subscriptions,
           {:spark, c.lag, count(c.max_lag)},
           count(c.lost)
         ]}
      end

    [
      "<p class=\"window\">Rates and the largest subscriber lag over the #{window(interval)}.</p>\n",
      table("channels", header, rows)
    ]
  end

  defp subscriptions([]), do: none("subscriptions", "No subscriptions.")

  defp subscriptions(subs) do
    rows = for s <- subs, do: [s.channel, s.subscriber, s.via, s.lag, s.credit, s.lost]

    table("subscriptions", ~w(channel subscriber via lag credit lost), rows, 3)
  end

  defp channel_groups(%{channel_groups: [], group_omitted: %{groups: 0}}),
    do: none("channel-groups", "No consumer groups.")

  defp channel_groups(%{channel_groups: groups, group_consumers: consumers} = status) do
    rows =
      for g <- groups do
        [g.channel, g.group, g.delivered, g.pending, g.lag, g.acked, g.redelivered, g.dead] ++
          [g.lost, g.held, g.consumers]
      end

    consumer_rows =
      for k <- consumers, do: [k.channel, k.group, k.consumer, k.pending, idle(k.idle_ms)]

    header = ~w(channel group delivered pending lag acked redelivered dead lost held consumers)

    [
      table("channel-groups", header, rows, 2),
      omitted(status.group_omitted),
      "<h3>Their consumers</h3>\n",
      table("group-consumers", ~w(channel group consumer pending idle), consumer_rows, 3)
    ]
  end

  defp omitted(%{groups: 0, consumers: 0}), do: []

  defp omitted(%{groups: groups, consumers: consumers}) do
    [
      "<p class=\"none\" id=\"group-omitted\">Past the page's bounds: #{groups} groups and ",
      "#{consumers} consumers not shown.</p>\n"
    ]
  end

  defp groups([]), do: none("groups", "No RESP consumer groups.")

  defp groups(groups) do
    rows =
      for g <- groups do
        [g.stream, g.group, g.port, g.consumers, g.pending, g.lag, idle(g.idle_ms), g.lost] ++
          [g.dropped]
      end

    header = ~w(stream group port consumers pending lag) ++ ["max idle", "lost", "dropped"]
    table("groups", header, rows, 2)
  end

  defp servers([], _interval), do: none("servers", "No server listening.")

  defp servers(servers, interval) do
    header =
      ["protocol", "port", "open, #{window(interval)}", "handshaking", "accepted", "refused"] ++
        ["frames in", "frames out", "bytes in", "bytes out", "errors"]

    rows =
      for s <- servers do
        [s.protocol, s.port, {:spark, s.connections, s.open}, s.handshaking, s.accepted] ++
          [s.refused, s.frames_in, s.frames_out, bytes(s.bytes_in), bytes(s.bytes_out), s.errors]
      end

    table("servers", header, rows)
  end

  # The page lists the oldest connections; /connections.json lists them all.
  @clients_shown 100

  defp clients([]), do: none("clients", "No client connected.")

  defp clients(clients) do
    {shown, rest} = Enum.split(clients, @clients_shown)

    rows =
      for c <- shown do
        [c.peer, c.protocol, c.port, c.state, duration(div(c.age_ms, 1000))] ++
          [duration(div(c.idle_ms, 1000)), c.frames_in, c.frames_out, bytes(c.bytes_in)] ++
          [bytes(c.bytes_out), bytes(c.pending_bytes)]
      end

    header =
      ~w(client protocol port state age idle) ++
        ["frames in", "frames out", "bytes in", "bytes out", "pending"]

    [
      "<h3>Clients</h3>\n",
      table("clients", header, rows, 2),
      if(rest != [],
        do: "<p class=\"none\">The oldest #{@clients_shown}; all in /connections.json.</p>\n",
        else: []
      )
    ]
  end

  # Only a node with replicated channels has this section.
  defp replicas([]), do: []

  defp replicas(members) do
    rows =
      for m <- members do
        [m.channel, m.node, m.role, m.term, m.commit_index, m.applied_index, m.applied_seq] ++
          [m.lag_entries, m.lag_seconds, m.elections, bytes(m.snapshot_bytes), bytes(m.log_bytes)] ++
          [bytes(m[:segment_bytes]), bytes(m[:mem_bytes])] ++
          [bytes(m[:wal_bytes]), bytes(m[:ets_bytes])]
      end

    [
      "<h2>Replicas</h2>\n",
      table(
        "replicas",
        ~w(channel node role term commit applied applied_seq lag lag_s elections snapshot log) ++
          ["segments", "mem", "node wal", "node ets"],
        rows,
        3
      )
    ]
  end

  defp cluster(nil, _interval), do: none("cluster", "Not in a cluster.")

  defp cluster(cluster, interval) do
    up = Enum.count(cluster.links, &(&1.state in ~w(up connected)))

    rows =
      for l <- cluster.links do
        [l.node, l.state, bytes(l.queued_bytes), l.batches, l.drops, l.suspensions] ++
          [l.calls_ok, l.calls_refused, l.calls_timeout]
      end

    [
      "<p id=\"cluster\">Members: #{h(Enum.join(cluster.members, ", "))}. Links up, ",
      "#{window(interval)}: ",
      sparkline(cluster.links_up),
      " #{up}</p>\n",
      table(
        "links",
        ~w(node state queued batches drops suspensions calls_ok refused timeout),
        rows
      )
    ]
  end

  ## Pieces

  # A table: its first `names` columns hold text and read left-aligned, the
  # others right; a row is its cells, or {attributes of its <tr>, cells}; a
  # cell is a value or {:spark, values, current}.
  defp table(id, header, rows, names \\ 1) do
    {text, numbers} = Enum.split(header, names)

    [
      "<table id=\"",
      id,
      "\"><thead><tr>",
      Enum.map(text, &["<th class=\"name\">", h(&1), "</th>"]),
      Enum.map(numbers, &["<th>", h(&1), "</th>"]),
      "</tr></thead><tbody>\n",
      Enum.map(rows, &row(&1, names)),
      "</tbody></table>\n"
    ]
  end

  defp row({attributes, cells}, names) do
    {text, numbers} = Enum.split(cells, names)

    [
      "<tr",
      attributes,
      ">",
      Enum.map(text, &["<td class=\"name\">", h(&1), "</td>"]),
      Enum.map(numbers, &cell/1),
      "</tr>\n"
    ]
  end

  defp row(cells, names), do: row({"", cells}, names)

  defp cell({:spark, values, current}),
    do: ["<td class=\"spark\">", sparkline(values), h(current), "</td>"]

  defp cell(value), do: ["<td>", h(value), "</td>"]

  defp none(id, text), do: ["<p class=\"none\" id=\"", id, "\">", text, "</p>\n"]

  @doc false
  # A polyline of the values, oldest at the left, scaled to the largest.
  def sparkline(values) do
    values = Enum.map(values, &(&1 || 0))
    top = Enum.max([1 | values])
    n = max(length(values) - 1, 1)

    points =
      values
      |> Enum.with_index()
      |> Enum.map_join(" ", fn {v, i} ->
        x = Float.round(i * @spark_width / n, 1)
        y = Float.round(@spark_height - 1 - v * (@spark_height - 2) / top, 1)
        "#{x},#{y}"
      end)

    [
      "<svg width=\"#{@spark_width}\" height=\"#{@spark_height}\" ",
      "viewBox=\"0 0 #{@spark_width} #{@spark_height}\"><polyline points=\"",
      points,
      "\" fill=\"none\" stroke=\"#2b7bb9\" stroke-width=\"1.5\"/></svg>"
    ]
  end

  # HTML-escapes any value.
  defp h(nil), do: ""

  defp h(value) when is_binary(value) do
    for <<c <- value>>, into: "" do
      case c do
        ?< -> "&lt;"
        ?> -> "&gt;"
        ?& -> "&amp;"
        ?" -> "&quot;"
        ?' -> "&#39;"
        c -> <<c>>
      end
    end
  end

  defp h(value), do: value |> to_string() |> h()
end
