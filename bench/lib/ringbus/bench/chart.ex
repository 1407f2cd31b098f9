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

  ## Options

    * `:title` - the chart's title. Defaults to `"Latency by percentile"`.
    * `:unit` - the unit of the values, used on the y axis; `"µs"` (the
      default) or `"ns"`, which labels ticks in ns, µs, ms and s.
  """

  alias Ringbus.Bench.Stats

  @width 900
  @height 540
  @left 90
  @right 170
  @top 50
  @bottom 70
  @colors ~w(#d62728 #1f77b4 #2ca02c #9467bd #ff7f0e #8c564b #e377c2 #7f7f7f)

  @type series :: {String.t(), [Stats.point()]}

  @doc "Renders the series as an SVG document."
  @spec percentiles([series()], keyword()) :: String.t()
  def percentiles(series, opts \\ []) do
    opts = Keyword.validate!(opts, title: "Latency by percentile", unit: "µs")
    points = Enum.flat_map(series, fn {_label, curve} -> curve end)

    x_max =
      points |> Enum.map(&elem(&1, 0)) |> Enum.max(fn -> 1.0 end) |> Float.ceil() |> max(1.0)

    values = points |> Enum.map(&elem(&1, 1)) |> Enum.filter(&(&1 > 0))
    y_lo = values |> Enum.min(fn -> 1 end) |> :math.log10() |> Float.floor()
    y_hi = values |> Enum.max(fn -> 10 end) |> :math.log10() |> Float.ceil() |> max(y_lo + 1)
    scale = %{x_max: x_max, y_lo: y_lo, y_hi: y_hi}

    [
      ~s(<?xml version="1.0" encoding="UTF-8"?>\n),
      ~s(<svg xmlns="http://www.w3.org/2000/svg" width="#{@width}" height="#{@height}" ),
      ~s(viewBox="0 0 #{@width} #{@height}" font-family="sans-serif" font-size="12">\n),
      ~s(<rect width="#{@width}" height="#{@height}" fill="white"/>\n),
      text(@width / 2, 28, opts[:title], "middle", 16),
      x_axis(scale),
      y_axis(scale, opts[:unit]),
      ~s(<rect x="#{@left}" y="#{@top}" width="#{plot_w()}" height="#{plot_h()}" ),
      ~s(fill="none" stroke="black"/>\n),
      series |> Enum.with_index() |> Enum.map(&line(&1, scale)),
      series |> Enum.with_index() |> Enum.map(&legend/1),
      "</svg>\n"
    ]
    |> IO.iodata_to_binary()
  end

  defp plot_w, do: @width - @left - @right
  defp plot_h, do: @height - @top - @bottom

  defp px(x, %{x_max: x_max}), do: @left + x / x_max * plot_w()

  defp py(value, %{y_lo: lo, y_hi: hi}) do
    log = value |> max(:math.pow(10, lo)) |> :math.log10()
    @top + plot_h() - (log - lo) / (hi - lo) * plot_h()
  end

  defp x_axis(scale) do
    ticks =
      for k <- 0..trunc(scale.x_max) do
        x = px(k, scale)

        [
          ~s(<line x1="#{n(x)}" y1="#{@top}" x2="#{n(x)}" y2="#{@top + plot_h()}" ),
          ~s(stroke="#ddd"/>\n),
          text(x, @top + plot_h() + 18, nines_label(k), "middle", 12)
        ]
      end

    [ticks, text(@left + plot_w() / 2, @height - 20, "percentile", "middle", 13)]
  end

  defp y_axis(scale, unit) do
    ticks =
      for k <- trunc(scale.y_lo)..trunc(scale.y_hi) do
        y = py(:math.pow(10, k), scale)

        [
          ~s(<line x1="#{@left}" y1="#{n(y)}" x2="#{@left + plot_w()}" y2="#{n(y)}" ),
          ~s(stroke="#ddd"/>\n),
          text(@left - 8, y + 4, power_label(k, unit), "end", 12)
        ]
      end

    label_y = @top + plot_h() / 2

    [
      ticks,
      ~s(<text x="20" y="#{n(label_y)}" text-anchor="middle" font-size="13" ),
      ~s|transform="rotate(-90 20 #{n(label_y)})">latency (log scale)</text>\n|
    ]
  end

  defp line({{_label, curve}, i}, scale) do
    coords = Enum.map_join(curve, " ", fn {x, v} -> "#{n(px(x, scale))},#{n(py(v, scale))}" end)

    ~s(<polyline fill="none" stroke="#{color(i)}" stroke-width="2" points="#{coords}"/>\n)
  end

  defp legend({{label, _curve}, i}) do
    x = @left + plot_w() + 15
    y = @top + 10 + i * 22

    [
      ~s(<line x1="#{x}" y1="#{y}" x2="#{x + 24}" y2="#{y}" stroke="#{color(i)}" ),
      ~s(stroke-width="3"/>\n),
      text(x + 30, y + 4, label, "start", 12)
    ]
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
