defmodule Ringbus.Bench.Chart do
  @moduledoc """
  Draws latency percentile curves as a standalone SVG, with no dependencies.

  The x axis is spaced in nines, `-log10(1 - p)`, so that 99%, 99.9%,
  99.99% and 99.999% are equally far apart and the tail gets as much room as
  the body; the y axis is logarithmic. Every series is one line, named in the
  legend.

      curve = Ringbus.Bench.Stats.curve(sorted_latencies_us, 0.05)
      svg = Ringbus.Bench.Chart.percentiles([{"queue", curve}], title: "push/pull latency")
      File.write!("latency.svg", svg)

  `grid/2` draws several such panels side by side and row under row, on
  one scale and with one legend, a series keeping its colour in every
  panel: the same servers at several loads, say. A grid's series may be
  `{label, curve, :dashed}`, drawn dashed (a figure to doubt, say), which
  its `:notes` explain.

      panels = [%{title: "16 connections", series: series16}, %{title: "50", series: series50}]
      File.write!("latency.svg", Ringbus.Bench.Chart.grid(panels, columns: 2))

  ## Options

    * `:title` - the chart's title. Defaults to `"Latency by percentile"`.
    * `:unit` - the unit of the values, used on the y axis; `"µs"` (the
      default) or `"ns"`, which labels ticks in ns, µs, ms and s.
    * `:columns` - `grid/2` only: panels a row. Default `2`.
    * `:notes` - `grid/2` only: lines of text under the legend. Default `[]`.
  """

  alias Ringbus.Bench.Stats

  @width 900
  @height 540
  @colors ~w(#d62728 #1f77b4 #2ca02c #9467bd #ff7f0e #8c564b #e377c2 #7f7f7f)

  # A grid's panel, and the margins of its plot inside it.
  @panel_w 560
  @panel_h 360
  @legend_w 190
  @grid_top 50

  @type series :: {String.t(), [Stats.point()]} | {String.t(), [Stats.point()], :dashed}
  @type panel :: %{title: String.t() | nil, series: [series()]}

  @doc "Renders the series as an SVG document."
  @spec percentiles([series()], keyword()) :: String.t()
  def percentiles(series, opts \\ []) do
    opts = Keyword.validate!(opts, title: "Latency by percentile", unit: "µs")
    labels = labels([%{series: series}])
    box = %{x: 90, y: 50, w: @width - 90 - 170, h: @height - 50 - 70}

    document(@width, @height, [
      text(@width / 2, 28, opts[:title], "middle", 16),
      plot(series, box, scale([%{series: series}]), labels, opts[:unit]),
      legend(labels, box.x + box.w + 15, box.y + 10)
    ])
  end

  @doc """
  Renders panels (`%{title: ..., series: [...]}`), `:columns` a row, on
  one shared scale, with one legend for every series named in any of them.
  """
  @spec grid([panel()], keyword()) :: String.t()
  def grid(panels, opts \\ []) do
    opts =
      Keyword.validate!(opts, title: "Latency by percentile", unit: "µs", columns: 2, notes: [])

    columns = opts[:columns]

    unless is_integer(columns) and columns > 0,
      do:
        raise(
          ArgumentError,
          "expected :columns to be a positive integer, got: #{inspect(columns)}"
        )

    scale = scale(panels)
    labels = labels(panels)
    rows = max(div(length(panels) + columns - 1, columns), 1)
    width = min(columns, max(length(panels), 1)) * @panel_w + @legend_w
    height = @grid_top + rows * @panel_h

    drawn =
      for {panel, i} <- Enum.with_index(panels) do
        x0 = rem(i, columns) * @panel_w
        y0 = @grid_top + div(i, columns) * @panel_h
        box = %{x: x0 + 80, y: y0 + 30, w: @panel_w - 100, h: @panel_h - 80}

        [
          text(box.x + box.w / 2, y0 + 20, panel.title || "", "middle", 13),
          plot(panel.series, box, scale, labels, opts[:unit])
        ]
      end

    document(width, height, [
      text(width / 2, 28, opts[:title], "middle", 16),
      drawn,
      legend(labels, width - @legend_w + 15, @grid_top + 40),
      for {note, i} <- Enum.with_index(opts[:notes]) do
        text(
          width - @legend_w + 15,
          @grid_top + 60 + (length(labels) + i) * 22,
          note,
          "start",
          11
        )
      end
    ])
  end

  defp document(width, height, body) do
    [
      ~s(<?xml version="1.0" encoding="UTF-8"?>\n),
      ~s(<svg xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" ),
      ~s(viewBox="0 0 #{width} #{height}" font-family="sans-serif" font-size="12">\n),
      ~s(<rect width="#{width}" height="#{height}" fill="white"/>\n),
      body,
      "</svg>\n"
    ]
    |> IO.iodata_to_binary()
  end

  # Every series label, in the order of first appearance: its index is its colour.
  defp labels(panels) do
    panels |> Enum.flat_map(fn p -> Enum.map(p.series, &elem(&1, 0)) end) |> Enum.uniq()
  end

  defp scale(panels) do
    points = Enum.flat_map(panels, fn p -> Enum.flat_map(p.series, &elem(&1, 1)) end)

    x_max =
      points |> Enum.map(&elem(&1, 0)) |> Enum.max(fn -> 1.0 end) |> Float.ceil() |> max(1.0)

    values = points |> Enum.map(&elem(&1, 1)) |> Enum.filter(&(&1 > 0))
    y_lo = values |> Enum.min(fn -> 1 end) |> :math.log10() |> Float.floor()
    y_hi = values |> Enum.max(fn -> 10 end) |> :math.log10() |> Float.ceil() |> max(y_lo + 1)
    %{x_max: x_max, y_lo: y_lo, y_hi: y_hi}
  end

  # The axes, grid lines and curves of one plot in `box`.
  defp plot(series, box, scale, labels, unit) do
    [
      x_axis(box, scale),
      y_axis(box, scale, unit),
      ~s(<rect x="#{n(box.x)}" y="#{n(box.y)}" width="#{n(box.w)}" height="#{n(box.h)}" ),
      ~s(fill="none" stroke="black"/>\n),
      Enum.map(series, fn series ->
        color = Enum.find_index(labels, &(&1 == elem(series, 0)))
        line(elem(series, 1), box, scale, color, tuple_size(series) == 3)
      end)
    ]
  end

  defp px(x, box, %{x_max: x_max}), do: box.x + x / x_max * box.w

  defp py(value, box, %{y_lo: lo, y_hi: hi}) do
    log = value |> max(:math.pow(10, lo)) |> :math.log10()
    box.y + box.h - (log - lo) / (hi - lo) * box.h
  end

  defp x_axis(box, scale) do
    ticks =
      for k <- 0..trunc(scale.x_max) do
        x = px(k, box, scale)

        [
          ~s(<line x1="#{n(x)}" y1="#{n(box.y)}" x2="#{n(x)}" y2="#{n(box.y + box.h)}" ),
          ~s(stroke="#ddd"/>\n),
          text(x, box.y + box.h + 18, nines_label(k), "middle", 12)
        ]
      end

    [ticks, text(box.x + box.w / 2, box.y + box.h + 40, "percentile", "middle", 13)]
  end

  defp y_axis(box, scale, unit) do
    ticks =
      for k <- trunc(scale.y_lo)..trunc(scale.y_hi) do
        y = py(:math.pow(10, k), box, scale)

        [
          ~s(<line x1="#{n(box.x)}" y1="#{n(y)}" x2="#{n(box.x + box.w)}" y2="#{n(y)}" ),
          ~s(stroke="#ddd"/>\n),
          text(box.x - 8, y + 4, power_label(k, unit), "end", 12)
        ]
      end

    label_x = box.x - 70
    label_y = box.y + box.h / 2

    [
      ticks,
      ~s(<text x="#{n(label_x)}" y="#{n(label_y)}" text-anchor="middle" font-size="13" ),
      ~s|transform="rotate(-90 #{n(label_x)} #{n(label_y)})">latency (log scale)</text>\n|
    ]
  end

  defp line(curve, box, scale, i, dashed?) do
    coords =
      Enum.map_join(curve, " ", fn {x, v} -> "#{n(px(x, box, scale))},#{n(py(v, box, scale))}" end)

    dash = if dashed?, do: ~s( stroke-dasharray="6 4"), else: ""

    ~s(<polyline fill="none" stroke="#{color(i)}" stroke-width="2"#{dash} points="#{coords}"/>\n)
  end

  defp legend(labels, x, y0) do
    for {label, i} <- Enum.with_index(labels) do
      y = y0 + i * 22

      [
        ~s(<line x1="#{n(x)}" y1="#{n(y)}" x2="#{n(x + 24)}" y2="#{n(y)}" stroke="#{color(i)}" ),
        ~s(stroke-width="3"/>\n),
        text(x + 30, y + 4, label, "start", 12)
      ]
    end
  end

  defp color(i), do: Enum.at(@colors, rem(i, length(@colors)))

  defp text(x, y, content, anchor, size) do
    ~s(<text x="#{n(x)}" y="#{n(y)}" text-anchor="#{anchor}" font-size="#{size}">) <>
      escape(content) <> "</text>\n"
  end

  defp nines_label(0), do: "0%"
  defp nines_label(1), do: "90%"
  defp nines_label(2), do: "99%"
  defp nines_label(k), do: "99." <> String.duplicate("9", k - 2) <> "%"

  defp power_label(k, "ns"), do: scaled(:math.pow(10, k), ["ns", "µs", "ms", "s"])
  defp power_label(k, "µs"), do: scaled(:math.pow(10, k), ["µs", "ms", "s"])
  defp power_label(k, unit), do: compact(:math.pow(10, k)) <> " " <> unit

  defp scaled(value, [unit]), do: compact(value) <> " " <> unit
  defp scaled(value, [unit | _]) when value < 1000, do: compact(value) <> " " <> unit
  defp scaled(value, [_ | rest]), do: scaled(value / 1000, rest)

  defp compact(value) when value >= 1, do: value |> round() |> Integer.to_string()
  defp compact(value), do: :erlang.float_to_binary(value, [:short])

  defp n(value), do: :erlang.float_to_binary(value / 1, decimals: 1)

  defp escape(text) do
    text
    |> to_string()
    |> String.replace("&", "&amp;")
    |> String.replace("<", "&lt;")
    |> String.replace(">", "&gt;")
    |> String.replace("\"", "&quot;")
  end
end
