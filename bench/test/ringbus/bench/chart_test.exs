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
end
