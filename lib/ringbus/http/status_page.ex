defmodule Ringbus.HTTP.StatusPage do
  @moduledoc false
  # `/status`: the status (`Ringbus.Metrics.Status`) as one HTML page with
  # no external assets: its style is inline, its sparklines are inline SVG,
  # and it reloads itself with a meta refresh, so it needs no script. Every
  # text that comes from a user (channel names) is escaped. Pure.

  import Ringbus.HTTP.Units

  @refresh_seconds 2
  @spark_width 120
  @spark_height 24

  @spec render(map()) :: iodata()
  def render(status) do
    [
      """
      <!DOCTYPE html>
      <html lang="en"><head><meta charset="utf-8">
      <meta http-equiv="refresh" content="#{@refresh_seconds}">
      <title>Ringbus on #{h(status.node)}</title>
      <style>
      body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
      h1{font-size:1.4em;margin:0 0 .2em}h1 small{font-weight:normal;color:#666;font-size:.7em}
      h2{font-size:1.1em;margin:1.4em 0 .4em}
      table{border-collapse:collapse;background:#fff}
      th,td{padding:.25em .6em;border-bottom:1px solid #e4e4e4;text-align:right;white-space:nowrap}
      th{background:#f0f0f0;font-weight:600}td.name,th.name{text-align:left}
      td.spark{text-align:left}td.spark svg{vertical-align:middle;margin-right:.4em}
      .vm{color:#444}.none{color:#888}
      </style></head><body>
      """,
      header(status),
      "<h2>Channels</h2>\n",
      channels(status),
      "<h2>Subscriptions</h2>\n",
      subscriptions(status.subscriptions),
      "<h2>Connections</h2>\n",
      servers(status.servers, status.sample_interval_ms),
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

  defp channels(%{channels: []}), do: "<p class=\"none\" id=\"channels\">No channels.</p>\n"

  defp channels(%{channels: channels, sample_interval_ms: interval}) do
    minute = window(interval)

    rows =
      for c <- channels do
        [
          "<tr data-channel=\"",
          h(c.name),
          "\"><td class=\"name\">",
          h(c.name),
          "</td>",
          td("#{c.len} / #{c.capacity}"),
          td(bytes(c.held_bytes)),
          td(c.pushed),
          td(c.pulled),
          td(c.overwritten),
          td(c.rejected),
          spark(c.push_rate, List.last(c.push_rate)),
          spark(c.pull_rate, List.last(c.pull_rate)),
          td(c.subscriptions),
          spark(c.lag, c.max_lag),
          td(c.lost),
          "</tr>\n"
        ]
      end

    [
      "<table id=\"channels\"><thead><tr><th class=\"name\">channel</th><th>len / capacity</th>",
      "<th>held</th><th>pushed</th><th>pulled</th><th>overwritten</th><th>rejected</th>",
      "<th>push/s, #{minute}</th><th>pull/s, #{minute}</th><th>subs</th>",
      "<th>max lag, #{minute}</th><th>lost</th></tr></thead><tbody>\n",
      rows,
      "</tbody></table>\n"
    ]
  end

  defp subscriptions([]), do: "<p class=\"none\" id=\"subscriptions\">No subscriptions.</p>\n"

  defp subscriptions(subs) do
    rows =
      for s <- subs do
        [
          "<tr><td class=\"name\">",
          h(s.channel),
          "</td>",
          td(s.subscription),
          td(s.subscriber || "busy"),
          td(s.lag),
          td(s.credit),
          td(s.lost),
          "</tr>\n"
        ]
      end

    [
      "<table id=\"subscriptions\"><thead><tr><th class=\"name\">channel</th><th>subscription</th>",
      "<th>subscriber</th><th>lag</th><th>credit</th><th>lost</th></tr></thead><tbody>\n",
      rows,
      "</tbody></table>\n"
    ]
  end

  defp servers([], _interval), do: "<p class=\"none\" id=\"servers\">No server listening.</p>\n"

  defp servers(servers, interval) do
    rows =
      for s <- servers do
        [
          "<tr><td class=\"name\">",
          h(s.protocol),
          "</td>",
          td(s.port),
          spark(s.connections, s.open),
          td(s.handshaking),
          td(s.accepted),
          td(s.refused),
          td(s.frames_in),
          td(s.frames_out),
          td(bytes(s.bytes_in)),
          td(bytes(s.bytes_out)),
          td(s.errors),
          "</tr>\n"
        ]
      end

    [
      "<table id=\"servers\"><thead><tr><th class=\"name\">protocol</th><th>port</th>",
      "<th>open, #{window(interval)}</th><th>handshaking</th><th>accepted</th><th>refused</th>",
      "<th>frames in</th><th>frames out</th><th>bytes in</th><th>bytes out</th><th>errors</th>",
      "</tr></thead><tbody>\n",
      rows,
      "</tbody></table>\n"
    ]
  end

  defp cluster(nil, _interval), do: "<p class=\"none\" id=\"cluster\">Not in a cluster.</p>\n"

  defp cluster(cluster, interval) do
    up = Enum.count(cluster.links, &(&1.state in ~w(up connected)))

    rows =
      for l <- cluster.links do
        [
          "<tr><td class=\"name\">",
          h(l.node),
          "</td>",
          td(l.state),
          td(bytes(l.queued_bytes)),
          td(l.batches),
          td(l.drops),
          td(l.suspensions),
          "</tr>\n"
        ]
      end

    [
      "<p id=\"cluster\">Members: #{h(Enum.join(cluster.members, ", "))}. Links up, ",
      "#{window(interval)}: ",
      sparkline(cluster.links_up),
      " #{up}</p>\n",
      "<table id=\"links\"><thead><tr><th class=\"name\">node</th><th>state</th>",
      "<th>queued</th><th>batches</th><th>drops</th><th>suspensions</th></tr></thead><tbody>\n",
      rows,
      "</tbody></table>\n"
    ]
  end

  ## Pieces

  defp td(value), do: ["<td>", h(value), "</td>"]

  defp spark(values, current),
    do: ["<td class=\"spark\">", sparkline(values), h(current), "</td>"]

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
