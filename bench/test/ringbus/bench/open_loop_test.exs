defmodule Ringbus.Bench.OpenLoopTest do
  # Runs the open-loop bench at tiny rates against Redis, Ringbus and the floor.
  use ExUnit.Case, async: false

  alias Ringbus.Bench.OpenLoop
  alias Ringbus.Test.{BenchIO, Debian}

  @moduletag timeout: 180_000

  @header "mode,system,command,connections,burst,pct_of_peak,target_rate,achieved_rate,behind," <>
            "requests,answered,errors,unanswered,seconds,p50_ms,p99_ms,p999_ms,p9999_ms,max_ms," <>
            "send_lag_p999_ms,send_lag_max_ms"

  @systems ~w(floor redis_xadd redis_xadd~ ringbus_xadd ringbus_xadd~ ringbus_ping ringbus_push)

  setup_all do
    Debian.executable!("gcc", "gcc")
    Debian.executable!("redis-server", "redis-server")
    Debian.executable!("redis-benchmark", "redis-tools")
    :ok
  end

  @tag :tmp_dir
  test "every system, both modes, into the CSV and the SVG", %{tmp_dir: dir} do
    out = Path.join(dir, "openloop.csv")
    svg = Path.join(dir, "openloop.svg")
    {affinity, 0} = System.cmd("taskset", ["-c", "-p", System.pid()])

    {output, progress} =
      BenchIO.run_quietly(fn ->
        OpenLoop.run(
          ~w(--peak 2000 --seconds 0.2 --rates 25 --connections 3 --out) ++
            [out, "--svg", svg]
        )
      end)

    rows = Process.get(:results)
    assert output =~ "Redis per-core peak 2000 XADD/s (--peak); 14 rows of 0.2 s"
    assert output =~ ~r/^pinned: servers and floor on core 0/m
    assert output =~ ~r/^shared: every process on every core/m
    assert output =~ ~r/^Took [\d.]+ s\.$/m

    assert progress =~
             "==> pinned ringbus_push, 3 connections: 100 requests at 500/s (25% of peak)"

    assert for(r <- rows, do: {r.mode, r.connections, r.pct, r.system}) ==
             for(
               mode <- ~w(pinned shared),
               conns <- [3],
               pct <- [25],
               system <- @systems,
               do: {mode, conns, pct, system}
             )

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == @header
    assert length(lines) == 14

    for line <- lines do
      [_mode, _system, _command, _conns, "1", _pct, target, achieved, behind, n, answered] ++
        [errors, "0", "0.20" | ms] = String.split(line, ",")

      assert answered == n and errors == "0"
      [p50, p99, p999, p9999, max, lag_p999, lag_max] = Enum.map(ms, &String.to_float/1)
      assert p50 <= p99 and p99 <= p999 and p999 <= p9999 and p9999 <= max
      assert lag_p999 <= lag_max

      # BEHIND exactly when the generator wrote late or fell 2% short.
      short? = String.to_integer(achieved) < 0.98 * String.to_integer(target)
      assert behind == if(lag_p999 > 1.0 or short?, do: "yes", else: "no")
    end

    assert File.read!(svg) =~ "at 25% of Redis's per-core peak (500 requests/s)"

    assert {{:xmlElement, :svg, _, _, _, _, _, _, _, _, _, _}, []} =
             :xmerl_scan.string(:binary.bin_to_list(File.read!(svg)), quiet: true)

    # A panel per mode and connection count, a curve per system in each.
    for title <- ["pinned, 3 connections", "shared, 3 connections"],
        do: assert(File.read!(svg) =~ ">#{title}</text>")

    assert File.read!(svg) |> String.split("<polyline") |> length() == 2 * 7 + 1

    # This VM was not moved.
    assert {^affinity, 0} = System.cmd("taskset", ["-c", "-p", System.pid()])
  end

  test "without --peak, Redis's per-core peak is measured first, pinned" do
    {output, progress} =
      BenchIO.run_quietly(fn ->
        OpenLoop.run(
          ~w(--peak-requests 20000 --rates 1 --systems floor --modes shared --seconds 0.05) ++
            ~w(--connections 1)
        )
      end)

    [row] = Process.get(:results)
    assert progress =~ "==> Redis per-core peak: taskset -c 1 redis-benchmark -h 127.0.0.1 -p "
    assert [_, peak] = Regex.run(~r/Redis per-core peak (\d+) XADD\/s \(redis-benchmark/, output)
    assert row.rate == max(round(String.to_integer(peak) / 100), 1)
    assert row.mode == "shared"
  end

  test "unknown options, systems, modes and bad values are refused" do
    assert_raise OptionParser.ParseError, fn -> OpenLoop.run(~w(--colour blue)) end

    assert_raise Mix.Error, ~r/unknown system "kafka"/, fn ->
      OpenLoop.run(~w(--systems kafka))
    end

    assert_raise Mix.Error, ~r/unknown mode "both"/, fn -> OpenLoop.run(~w(--modes both)) end
    assert_raise Mix.Error, ~r/--rates to be positive/, fn -> OpenLoop.run(~w(--rates 0,x)) end

    assert_raise Mix.Error, ~r/--connections to be positive/, fn ->
      OpenLoop.run(~w(--connections 16,-1))
    end

    assert_raise Mix.Error, ~r/--seconds to be above 0 and at most 600/, fn ->
      OpenLoop.run(~w(--seconds 601))
    end
  end
end
