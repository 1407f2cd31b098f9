defmodule Ringbus.Bench.BufferTest do
  use ExUnit.Case, async: false

  alias Ringbus.Bench.Buffer
  alias Ringbus.Test.BenchIO

  @header "impl,variant,callers,producers,pullers,requests,runs,avg_us,p99_us,p99_9_us," <>
            "p99_99_us,p99_999_us,max_us,gc_count,gc_max_us,proc_mem_kb,total_mem_mb"

  @tag :tmp_dir
  test "runs every implementation alone and contended, and writes CSV and SVG", %{tmp_dir: dir} do
    csv = Path.join(dir, "buffer.csv")
    svg = Path.join(dir, "buffer.svg")
    # 4 x capacity is below --ops: the contended runs make 2,000 requests.
    args = ~w(--capacity 500 --ops 4000 --runs 2 --out #{csv} --svg #{svg})

    {output, progress} = run_quietly(args)

    assert [@header | rows] = csv |> File.read!() |> String.split("\n", trim: true)
    rows = Enum.map(rows, &String.split(&1, ","))

    assert Enum.map(rows, &Enum.take(&1, 7)) == [
             ["queue", "single", "1", "1", "1", "4000", "2"],
             ["ets_server", "single", "1", "1", "1", "4000", "2"],
             ["ringbus", "single", "1", "1", "1", "4000", "2"],
             ["queue", "contended", "6", "4", "2", "2000", "2"],
             ["ets_server", "contended", "6", "4", "2", "2000", "2"],
             ["ringbus", "contended", "6", "4", "2", "2000", "2"]
           ]

    for row <- rows do
      figures = Enum.drop(row, 7)
      assert length(figures) == 10
      for field <- figures, do: assert({_, ""} = Float.parse(field))
    end

    document = File.read!(svg)

    assert {{:xmlElement, :svg, _, _, _, _, _, _, _, _, _, _}, []} =
             :xmerl_scan.string(:binary.bin_to_list(document), quiet: true)

    assert document |> String.split("<polyline") |> length() == 7
    assert document =~ "ringbus contended"

    assert output =~ "Contended variant: 4 producers and 2 pullers at once, 2000 requests"
    assert output =~ "== ringbus, single caller"
    assert output =~ "== ringbus, contended: 4 producers and 2 pullers at once"
    assert output =~ "99.999%"
    assert output =~ "Longest 10"
    assert output =~ "No process holds the buffer"
    assert output =~ ~r/^ringbus\s+contended\s+6\s+2000\s+2\s/m
    assert output =~ "99.999% contended / single caller:"
    assert output =~ "max, queue contended / ringbus contended:"
    assert progress =~ "queue single run 2/2: 100% (4000/4000)"
    assert progress =~ "ringbus contended run 2/2: 6 callers"
    refute Enum.any?(Ringbus.channels(), &match?({Buffer, _}, &1))
  end

  test "--producers and --pullers set the contended callers" do
    {output, _progress} = run_quietly(~w(-m ringbus -c 100 -n 400 --producers 1 --pullers 3))

    assert [%{variant: "single", callers: 1}, contended] = Process.get(:results)

    assert %{variant: "contended", callers: 4, producers: 1, pullers: 3, requests: 400} =
             contended

    assert output =~ "1 producers and 3 pullers at once"
  end

  test "--trace runs and times the traced requests, and skips the contended variant" do
    {output, _progress} = run_quietly(~w(-m ets_server,ringbus -c 100 -n 400 --trace))

    assert [
             %{impl: "ets_server", variant: "single", requests: 400},
             %{impl: "ringbus", variant: "single", requests: 400}
           ] = Process.get(:results)

    assert output =~ "Traced: the calling process's calls to Ringbus.push/2"
    assert output =~ "Contended variant skipped: --trace"
  end

  # The workload never empties the buffer, so only a fault can make a timed
  # pull find nothing: here another process steals every item once the
  # warm-up is over (the channel has seen its two fills).
  test "a run whose timed pulls find the buffer empty fails, naming the impl and the count" do
    capacity = 100
    parent = self()
    deadline = System.monotonic_time(:millisecond) + 30_000
    thief = spawn_link(fn -> steal_after_warm_up(parent, 2 * capacity, deadline) end)

    error =
      assert_raise Mix.Error, fn ->
        run_quietly(~w(-m ringbus --no-contended -c #{capacity} -n 400000))
      end

    assert_received {:stealing, _channel}
    assert error.message =~ ~r/ringbus single run 1\/1: \d+ timed pull\(s\) of ringbus \(single\)/
    assert error.message =~ "returned :empty"
    [count] = Regex.run(~r/(\d+) timed pull/, error.message, capture: :all_but_first)
    assert String.to_integer(count) > 0

    Process.unlink(thief)
    Process.exit(thief, :kill)
    refute Enum.any?(Ringbus.channels(), &match?({Buffer, _}, &1))
  end

  test "rejects unknown options and bad values" do
    assert_raise OptionParser.ParseError, fn -> Buffer.run(~w(--bogus 1)) end
    assert_raise Mix.Error, ~r/--impl/, fn -> Buffer.run(~w(-m queue,stack)) end
    assert_raise Mix.Error, ~r/--runs to be a positive integer/, fn -> Buffer.run(~w(-r 0)) end

    assert_raise Mix.Error, ~r/--producers to be a positive/, fn ->
      Buffer.run(~w(--producers 0))
    end
  end

  defp run_quietly(args), do: BenchIO.run_quietly(fn -> Buffer.run(args) end)

  # Waits for the bench's channel to have seen `pushed` pushes, then pulls
  # everything there is until the channel is gone; both until `deadline`.
  defp steal_after_warm_up(parent, pushed, deadline) do
    channel = Enum.find(Ringbus.channels(), &match?({Buffer, _}, &1))

    case channel && Ringbus.info(channel) do
      {:ok, %{pushed: n}} when n >= pushed ->
        send(parent, {:stealing, channel})
        steal(channel, deadline)

      _ ->
        if System.monotonic_time(:millisecond) < deadline do
          :erlang.yield()
          steal_after_warm_up(parent, pushed, deadline)
        end
    end
  end

  defp steal(channel, deadline) do
    case Ringbus.pull(channel) do
      {:error, :no_channel} ->
        :done

      _taken_or_empty ->
        if System.monotonic_time(:millisecond) < deadline, do: steal(channel, deadline)
    end
  end
end
