defmodule Ringbus.Bench.RespTest do
  # Runs the RESP bench at a tiny size: redis-benchmark against redis-server
  # and against the RESP listener, every workload, into the CSV.
  use ExUnit.Case, async: false

  alias Ringbus.Test.BenchIO

  @moduletag timeout: 120_000

  @tag :tmp_dir
  test "every workload runs against both servers and lands in the CSV", %{tmp_dir: dir} do
    out = Path.join(dir, "resp.csv")

    # redis-benchmark times a run in whole milliseconds: 10,000 requests take
    # several at any rate it reaches, so every run is timed.
    {output, progress} =
      BenchIO.run_quietly(fn ->
        Ringbus.Bench.Resp.run(~w(--requests 10000 --clients 5 --out) ++ [out])
      end)

    rows = Process.get(:results)
    # 4 workloads × 2 servers × 2 depths, and PING × 3 servers × 2 depths.
    assert Enum.count(rows) == 22
    assert output =~ "XADD 1024 B: -P 16 Ringbus/Redis"
    assert output =~ "XADD~ 16 B -P 16: Ringbus/Redis"
    assert output =~ "PING -P 16: bare gen_tcp floor/Redis"
    assert progress =~ "==> ringbus: redis-benchmark"
    assert_tails(output)
    assert_csv(out, "shared", "redis-benchmark -h 127.0.0.1 -p ")
  end

  @tag :tmp_dir
  test "--pin runs every server pinned to core 0 and redis-benchmark to core 1",
       %{tmp_dir: dir} do
    out = Path.join(dir, "resp.csv")

    {output, progress} =
      BenchIO.run_quietly(fn ->
        Ringbus.Bench.Resp.run(~w(--pin --requests 10000 --clients 5 --out) ++ [out])
      end)

    rows = Process.get(:results)
    assert Enum.count(rows) == 22
    assert Enum.all?(rows, &(&1.mode == "pinned"))
    assert output =~ ~r/^pinned  redis /m
    assert progress =~ "==> bare: taskset -c 1 redis-benchmark"
    assert_tails(output)
    assert_csv(out, "pinned", "taskset -c 1 redis-benchmark -h 127.0.0.1 -p ")
  end

  # p50 / p99 / max of every -P 1 workload, every server that ran it side by side.
  test "--only and --pipelines choose the workloads and the depths" do
    {output, _progress} =
      BenchIO.run_quietly(fn ->
        Ringbus.Bench.Resp.run(~w(--requests 10000 --clients 5 --only XADD~,PING --pipelines 1,4))
      end)

    rows = Process.get(:results)
    # XADD~ × 2 servers × 2 depths, and PING × 3 servers × 2 depths.
    assert Enum.count(rows) == 10
    assert Enum.map(rows, & &1.pipeline) |> Enum.uniq() |> Enum.sort() == [1, 4]
    assert output =~ "XADD~ 16 B -P 4: Ringbus/Redis"
    refute output =~ "XRANGE"
  end

  defp assert_tails(output) do
    assert output =~ "-P 1 tails, p50 / p99 / max ms:"
    number = "[0-9.]+ / [0-9.]+ / [0-9.]+"

    for name <- ["XADD 16 B", "XADD 1024 B", "XRANGE"],
        do: assert(output =~ ~r/#{name} +redis #{number}, ringbus #{number}$/m)

    assert output =~ ~r/PING +redis #{number}, ringbus #{number}, bare #{number}$/m
  end

  defp assert_csv(out, mode, command_start) do
    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)

    assert header ==
             "mode,server,command,payload_bytes,pipeline,clients,requests_per_s," <>
               "p50_ms,p99_ms,max_ms,command_line"

    assert Enum.all?(lines, &String.starts_with?(&1, mode <> ","))
    lines = Enum.map(lines, &String.replace_prefix(&1, mode <> ",", ""))

    for server <- ["redis", "ringbus"],
        {command, size} <- [{"XADD", "16"}, {"XADD", "1024"}, {"XRANGE", ""}, {"PING", ""}],
        pipeline <- ["1", "16"] do
      line =
        Enum.find(lines, &String.starts_with?(&1, "#{server},#{command},#{size},#{pipeline},5,"))

      assert line, "no row for #{server} #{command} #{size} -P #{pipeline}"
      [_, _, _, _, _, rps, p50, p99, max | _] = String.split(line, ",")
      assert String.to_integer(rps) > 0
      assert {p50, ""} = Float.parse(p50)
      assert {p99, ""} = Float.parse(p99)
      assert {max, ""} = Float.parse(max)
      assert p50 <= p99 and p99 <= max
      assert line =~ command_start
    end

    # The bare floor answers PING only.
    bare =
      for line <- lines, String.starts_with?(line, "bare,") do
        [_, command, _, pipeline, _, rps | _] = String.split(line, ",")
        assert String.to_integer(rps) > 0
        {command, pipeline}
      end

    assert bare == [{"PING", "1"}, {"PING", "16"}]

    # Both servers ran the same command lines, their ports aside.
    [redis, ringbus] =
      for server <- ["redis", "ringbus"] do
        for line <- lines,
            String.starts_with?(line, server <> ","),
            do: Regex.replace(~r/^\w+,|-p \d+/, line, "")
      end

    assert Enum.map(redis, &command_of/1) == Enum.map(ringbus, &command_of/1)
  end

  defp command_of(line), do: line |> String.split("\"") |> Enum.at(1)

  test "a run too short to time (redis-benchmark's inf requests/s) parses as not timed" do
    out = """
    "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    "PING","inf","0.052","0.048","0.055","0.055","0.055","0.055"
    """

    assert Ringbus.Bench.Resp.parse(out) == {nil, 0.055, 0.055, 0.055}

    timed =
      out |> String.replace("inf", "5333.33") |> String.replace(~s("0.055"\n), ~s("1.250"\n))

    assert Ringbus.Bench.Resp.parse(timed) == {5333.33, 0.055, 0.055, 1.25}
  end

  test "unknown options are refused" do
    assert_raise OptionParser.ParseError, fn -> Ringbus.Bench.Resp.run(~w(--colour blue)) end
  end
end
