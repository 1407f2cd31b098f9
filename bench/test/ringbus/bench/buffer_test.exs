defmodule Ringbus.Bench.BufferTest do
  use ExUnit.Case, async: false

  alias Ringbus.Bench.Buffer
  alias Ringbus.Test.BenchIO

  @header "impl,avg_us,p99_us,p99_9_us,p99_99_us,p99_999_us,max_us," <>
            "gc_count,gc_max_us,proc_mem_kb,total_mem_mb"

  @tag :tmp_dir
  test "runs every implementation at a tiny size and writes CSV and SVG", %{tmp_dir: dir} do
    csv = Path.join(dir, "buffer.csv")
    svg = Path.join(dir, "buffer.svg")
    args = ~w(--capacity 1000 --ops 4000 --runs 2 --out #{csv} --svg #{svg})

    {output, progress} = run_quietly(args)

    assert [@header | rows] = csv |> File.read!() |> String.split("\n", trim: true)
    assert Enum.map(rows, &hd(String.split(&1, ","))) == ["queue", "ets_server", "ringbus"]

    for row <- rows do
      [_impl | fields] = String.split(row, ",")
      assert length(fields) == 10
      for field <- fields, do: assert({_, ""} = Float.parse(field))
    end

    document = File.read!(svg)

    assert {{:xmlElement, :svg, _, _, _, _, _, _, _, _, _, _}, []} =
             :xmerl_scan.string(:binary.bin_to_list(document), quiet: true)

    assert document |> String.split("<polyline") |> length() == 4

    assert output =~ "== ringbus"
    assert output =~ "99.999%"
    assert output =~ "Longest 10"
    assert output =~ "No process holds the buffer"
    assert output =~ "Compared with queue"
    assert progress =~ "queue run 2/2: 100% (4000/4000)"
    refute Enum.any?(Ringbus.channels(), &match?({Buffer, _}, &1))
  end

  test "--trace runs and times the traced requests" do
    {output, _progress} = run_quietly(~w(-m ets_server,ringbus -c 100 -n 400 --trace))

    assert [%{impl: "ets_server", requests: 400}, %{impl: "ringbus", requests: 400}] =
             Process.get(:results)

    assert output =~ "Traced: the calling process's calls to Ringbus.push/2"
  end

  test "rejects unknown options and bad values" do
    assert_raise OptionParser.ParseError, fn -> Buffer.run(~w(--bogus 1)) end
    assert_raise Mix.Error, ~r/--impl/, fn -> Buffer.run(~w(-m queue,stack)) end
    assert_raise Mix.Error, ~r/--runs to be a positive integer/, fn -> Buffer.run(~w(-r 0)) end
  end

  defp run_quietly(args), do: BenchIO.run_quietly(fn -> Buffer.run(args) end)
end
