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
    assert Enum.count(rows) == 18
    assert output =~ "XADD 1024 B: -P 16 Ringbus/Redis"
    assert output =~ "PING -P 16: bare gen_tcp floor/Redis"
    assert progress =~ "==> ringbus: redis-benchmark"

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)

    assert header ==
             "server,command,payload_bytes,pipeline,clients,requests_per_s,p50_ms,p99_ms,command_line"

    for server <- ["redis", "ringbus"],
        {command, size} <- [{"XADD", "16"}, {"XADD", "1024"}, {"XRANGE", ""}, {"PING", ""}],
        pipeline <- ["1", "16"] do
      line =
        Enum.find(lines, &String.starts_with?(&1, "#{server},#{command},#{size},#{pipeline},5,"))

      assert line, "no row for #{server} #{command} #{size} -P #{pipeline}"
      [_, _, _, _, _, rps | _] = String.split(line, ",")
      assert String.to_integer(rps) > 0
      assert line =~ "redis-benchmark -h 127.0.0.1 -p "
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

    assert Ringbus.Bench.Resp.parse(out) == {nil, 0.055, 0.055}

    timed = String.replace(out, "inf", "5333.33")
    assert Ringbus.Bench.Resp.parse(timed) == {5333.33, 0.055, 0.055}
  end

  test "unknown options are refused" do
    assert_raise OptionParser.ParseError, fn -> Ringbus.Bench.Resp.run(~w(--colour blue)) end
  end
end
