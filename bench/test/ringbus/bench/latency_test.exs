defmodule Ringbus.Bench.LatencyTest do
  # Runs the open-loop latency bench at tiny rates against Redis and Ringbus.
  use ExUnit.Case, async: false

  alias Ringbus.Bench.Latency
  alias Ringbus.Test.{BenchIO, Debian}

  @moduletag timeout: 120_000

  @header "mode,system,pct_of_peak,target_rate,achieved_rate,behind,requests,errors,connections," <>
            "seconds,p50_ms,p99_ms,p999_ms,max_ms,max_send_lag_ms,send_lag_p999_ms,generator_busy_pct"

  @tag :tmp_dir
  test "every system at every rate answers every request, into the CSV", %{tmp_dir: dir} do
    Debian.executable!("redis-server", "redis-server")
    Debian.executable!("redis-benchmark", "redis-tools")
    out = Path.join(dir, "latency.csv")

    {output, progress} =
      BenchIO.run_quietly(fn ->
        Latency.run(~w(--peak 2000 --seconds 0.2 --connections 3 --out) ++ [out])
      end)

    rows = Process.get(:results)
    assert output =~ "Redis peak 2000 XADD/s (--peak)"
    assert output =~ "p99.9 ms"
    assert progress =~ "==> ringbus_push: 300 requests at 1500/s (75% of peak)"

    assert for(r <- rows, do: {r.system, r.pct, r.rate, r.requests}) ==
             for(
               {pct, rate, n} <- [{25, 500, 100}, {50, 1000, 200}, {75, 1500, 300}],
               system <- ~w(floor redis ringbus_resp ringbus_push),
               do: {system, pct, rate, n}
             )

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == @header
    assert length(lines) == 12

    for line <- lines do
      ["shared", _system, _pct, target, achieved, behind, _n, errors, conns, _s | ms] =
        String.split(line, ",")

      assert errors == "0"
      assert conns == "3"
      assert String.to_integer(achieved) > 0
      [p50, p99, p999, max, max_lag, lag_p999, busy] = Enum.map(ms, &String.to_float/1)
      # A row is BEHIND exactly when the generator fell more than 2% short or wrote late.
      assert behind ==
               if(
                 String.to_integer(achieved) < 0.98 * String.to_integer(target) or
                   lag_p999 > 1.0,
                 do: "yes",
                 else: "no"
               )

      assert p50 <= p99 and p99 <= p999 and p999 <= max
      assert lag_p999 <= max_lag * 1.02
      assert busy >= 0.0 and busy <= 100.0
    end
  end

  @tag :tmp_dir
  test "without --peak, Redis's peak is measured in the same run", %{tmp_dir: dir} do
    out = Path.join(dir, "latency.csv")

    {output, progress} =
      BenchIO.run_quietly(fn ->
        Latency.run(
          ~w(--peak-requests 20000 --rates 1 --systems ringbus_push --seconds 0.05) ++
            ~w(--connections 2 --out) ++ [out]
        )
      end)

    [row] = Process.get(:results)
    assert progress =~ "==> Redis peak: redis-benchmark -h 127.0.0.1 -p "
    assert [_, peak] = Regex.run(~r/Redis peak (\d+) XADD\/s \(redis-benchmark/, output)
    assert row.rate == max(round(String.to_integer(peak) / 100), 1)
  end

  @tag :tmp_dir
  test "--pin runs the servers on core 0 and the generator on core 1, then unpins this VM",
       %{tmp_dir: dir} do
    out = Path.join(dir, "latency.csv")

    # This VM runs as before after it.
    {output, progress} =
      BenchIO.run_pinned_quietly(fn ->
        Latency.run(
          ~w(--pin --peak-requests 20000 --rates 1 --seconds 0.05 --connections 2 --out) ++ [out]
        )
      end)

    rows = Process.get(:results)
    assert Enum.map(rows, & &1.system) == ~w(floor redis ringbus_resp ringbus_push)
    assert Enum.all?(rows, &(&1.mode == "pinned"))
    assert output =~ ~r/^pinned +ringbus_push /m
    assert output =~ "generator: this VM on core 1, 1 scheduler online"
    assert progress =~ "==> Redis peak: taskset -c 1 redis-benchmark"
    assert [_ | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert Enum.all?(lines, &String.starts_with?(&1, "pinned,"))
  end

  test "unknown options, systems and rates are refused" do
    assert_raise OptionParser.ParseError, fn -> Latency.run(~w(--colour blue)) end
    assert_raise Mix.Error, ~r/unknown system "kafka"/, fn -> Latency.run(~w(--systems kafka)) end
    assert_raise Mix.Error, ~r/--rates to be positive/, fn -> Latency.run(~w(--rates 0,x)) end
  end
end
