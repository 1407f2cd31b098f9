defmodule Ringbus.Bench.ClusterTest do
  # Runs the cluster bench at a tiny size: every variant on real nodes, a
  # one-second silence, and the throughput runs. 4 KB payloads at 10,000
  # calls a second to the stopped node fill its distribution buffer well
  # within the second.
  use ExUnit.Case, async: false

  import Ringbus.Test.BenchIO

  @moduletag timeout: 120_000

  @tag :tmp_dir
  test "every variant runs, the naive send stalls, and the rows land in the CSVs", %{tmp_dir: dir} do
    out = Path.join(dir, "cluster.csv")
    link_out = Path.join(dir, "link.csv")

    args =
      ~w(--silent-s 1 --before-ms 400 --after-ms 800 --rate 20000 --payload 4096) ++
        ~w(--ingest-messages 20000 --sub-messages 20000 --batch 100 --out) ++
        [out, "--throughput-out", link_out]

    {output, _progress} = run_quietly(fn -> Ringbus.Bench.Cluster.run(args) end)
    {rows, throughput} = Process.get(:results)

    assert output =~ "live ratio"
    assert Enum.map(rows, & &1.variant) == [:plain_send, :noconnect, :nosuspend, :ringbus]
    by = Map.new(rows, &{&1.variant, &1})

    # The report's stall: a plain send to the stopped node waits for it.
    assert by.plain_send.max_block_ms > 300
    # No Ringbus call waits on it (its own bound is 5 ms; the machine adds noise).
    assert by.ringbus.max_block_ms < 300
    assert by.ringbus.heal_ms != nil

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)

    assert header ==
             "variant,silent_s,max_block_ms,p99_block_ms,msgs_to_live_per_s,live_ratio,heal_ms"

    assert length(lines) == 4

    assert Enum.map(throughput, &{&1.case =~ "ingest", &1.where}) ==
             [{true, "remote"}, {true, "local"}, {false, "remote"}, {false, "local"}]

    assert Enum.all?(throughput, &(&1.msgs_per_s > 0))
    assert [_header | [_, _, _, _]] = link_out |> File.read!() |> String.split("\n", trim: true)
  end

  test "unknown options and variants are refused" do
    assert_raise OptionParser.ParseError, fn -> Ringbus.Bench.Cluster.run(~w(--colour blue)) end
    assert_raise Mix.Error, fn -> Ringbus.Bench.Cluster.run(~w(--variants warp)) end
  end
end
