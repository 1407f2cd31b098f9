defmodule Ringbus.Bench.ChartTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.{Chart, Stats}

  test "draws one line per series, with axes and a legend, as well-formed XML" do
    fast = Stats.curve(List.to_tuple(Enum.to_list(1..10_000)), 0.1)
    slow = Enum.map(fast, fn {x, v} -> {x, v * 100} end)
    svg = Chart.percentiles([{"fast <1>", fast}, {"slow", slow}], title: "A & B")

    assert {{:xmlElement, :svg, _, _, _, _, _, _, _, _, _, _}, []} =
             :xmerl_scan.string(:binary.bin_to_list(svg), quiet: true)

    assert svg |> String.split("<polyline") |> length() == 3
    assert svg =~ "fast &lt;1&gt;"
    assert svg =~ "A &amp; B"
    assert svg =~ ">99.99%</text>"
    assert svg =~ ">percentile</text>"
    assert svg =~ "ms</text>"
  end

  test "a grid: a panel each, one shared scale, one legend, a label's colour in every panel" do
    fast = Stats.curve(List.to_tuple(Enum.to_list(1..1_000)), 0.1)
    slow = Enum.map(fast, fn {x, v} -> {x, v * 1000} end)

    panels = [
      %{title: "left", series: [{"a", fast}, {"b", slow, :dashed}]},
      %{title: "right", series: [{"b", slow}]},
      %{title: "below", series: []}
    ]

    svg = Chart.grid(panels, title: "T", columns: 2, notes: ["dashed: doubt it"])

    assert {{:xmlElement, :svg, _, _, _, _, _, _, _, _, _, _}, []} =
             :xmerl_scan.string(:binary.bin_to_list(svg), quiet: true)

    assert svg =~ ~s(width="1310" height="770")
    assert svg |> String.split("<polyline") |> length() == 4
    assert svg |> String.split("stroke-dasharray") |> length() == 2
    # "b" is blue in both panels and in the legend.
    assert svg |> String.split(~s(stroke="#1f77b4")) |> length() == 4

    for title <- ["left", "right", "below", "dashed: doubt it"],
        do: assert(svg =~ ">#{title}</text>")

    # One scale: every panel's y axis runs from 1 us to 1 s.
    assert svg |> String.split(">1 s</text>") |> length() == 4
    assert svg |> String.split(">1 µs</text>") |> length() == 4

    assert_raise ArgumentError, ~r/:columns to be a positive integer/, fn ->
      Chart.grid(panels, columns: 0)
    end
  end
end
