defmodule Ringbus.Bench.IngestTest do
  # Runs the ingest bench at tiny sizes, generator BEAMs included.
  use ExUnit.Case, async: false

  alias Ringbus.Bench.Ingest
  alias Ringbus.Test.{BenchIO, Debian}

  @header "mode,how,payload_bytes,messages,connections,pipeline,msgs_per_frame,acks,ack_frames," <>
            "seconds,msgs_per_s,mb_per_s,server_cpu_us_per_msg,server_sys_pct," <>
            "generator_cpu_us_per_msg,overwritten,vs_redis_xadd,cpu_mode"

  @tag :tmp_dir
  test "every mode stores and acks every message, with its shape and CPU in the CSV",
       %{tmp_dir: dir} do
    out = Path.join(dir, "ingest.csv")

    args =
      ~w(--messages 3000 --rr-messages 200 --batch 100 --window 1000 --chunk-bytes 4096) ++
        ~w(--connections 3 --pipeline 8 --capacity 2500 --quiet --out) ++ [out]

    {output, _progress} = BenchIO.run_quietly(fn -> Ingest.run(args) end)
    rows = Process.get(:results)

    assert Enum.map(rows, & &1.mode) ==
             ~w(request_reply pipelined coalesced batched batched_1kb encoded encoded_1kb)

    # Unpinned, the generator's BEAM may run on the cores this one may.
    [_, mask] = Regex.run(~r/^Cpus_allowed:\s*([0-9a-f]+)$/m, File.read!("/proc/self/status"))
    assert Enum.all?(rows, &(&1.generator_cores == String.to_integer(mask, 16)))

    assert output =~ "msgs/s"
    assert output =~ "srv µs/msg"
    assert output =~ "Targets:"
    refute output =~ "redis_xadd_1kb"

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == @header
    csv = Map.new(lines, fn line -> {hd(String.split(line, ",")), csv_fields(line)} end)

    # {payload, messages, connections, in flight, messages a frame, acks, overwritten}
    expected = %{
      "request_reply" => {"16", "200", "1", "1", "1", "200", "0"},
      "pipelined" => {"16", "3000", "1", "100000", "1", "3000", "500"},
      "coalesced" => {"16", "3000", "1", "100000", "1", "3000", "500"},
      "batched" => {"16", "3000", "1", "100000", "100", "30", "500"},
      "batched_1kb" => {"1024", "3000", "1", "100000", "100", "30", "0"},
      "encoded" => {"16", "3000", "1", "1000", "1", "3000", "500"},
      "encoded_1kb" => {"1024", "3000", "3", "8", "1", "3000", "0"}
    }

    for {mode, {payload, n, conns, in_flight, per_frame, acks, overwritten}} <- expected do
      row = Map.fetch!(csv, mode)
      assert {row.payload_bytes, row.messages, row.connections} == {payload, n, conns}
      assert {row.pipeline, row.msgs_per_frame, row.acks} == {in_flight, per_frame, acks}
      assert row.overwritten == overwritten
      assert String.to_integer(row.msgs_per_s) > 0
      assert row.vs_redis_xadd == ""
      assert row.cpu_mode == "shared"

      # CPU per message, for the server and the generator, from Linux's /proc.
      assert {_, ""} = Float.parse(row.server_cpu_us_per_msg)
      assert {_, ""} = Float.parse(row.generator_cpu_us_per_msg)
    end

    # The batched rows say so; the client shows its PUSH_ACKS frames.
    assert csv["batched"].how =~ "batched: PUSH_BATCH of 100"
    assert csv["coalesced"].how =~ "linger: 0"
    assert String.to_integer(csv["pipelined"].ack_frames) in 1..3000
    # Lock-step like redis-benchmark: each connection waits for its 8 acks.
    assert String.to_integer(csv["encoded_1kb"].ack_frames) >= div(3000, 8)
    assert csv["request_reply"].ack_frames == ""
  end

  @tag :tmp_dir
  test "--vs-redis runs redis-benchmark with the same connections and pipelining",
       %{tmp_dir: dir} do
    Debian.executable!("redis-server", "redis-server")
    Debian.executable!("redis-benchmark", "redis-tools")
    out = Path.join(dir, "redis.csv")

    args =
      ~w(--messages 2000 --modes batched_1kb,encoded_1kb --connections 4 --pipeline 8) ++
        ~w(--vs-redis --quiet --out) ++ [out]

    {output, _progress} = BenchIO.run_quietly(fn -> Ingest.run(args) end)
    rows = Process.get(:results)

    assert Enum.map(rows, & &1.mode) == ~w(batched_1kb encoded_1kb redis_xadd_1kb)
    redis = List.last(rows)
    assert %{connections: 4, pipeline: 8, per_frame: 1, acks: 2000, messages: 2000} = redis
    assert redis.msgs_per_s > 0

    assert output =~
             ~r/Redis: redis-benchmark -h 127.0.0.1 -p \d+ -c 4 -P 8 -n 2000 XADD s MAXLEN 200000/

    assert output =~ ~r/encoded_1kb \/ redis_xadd_1kb: [\d.]+x .*like for like.*4 connections x 8/
    assert output =~ ~r/batched_1kb \/ redis_xadd_1kb: [\d.]+x .*not like for like/

    csv =
      out
      |> File.read!()
      |> String.split("\n", trim: true)
      |> tl()
      |> Map.new(fn line -> {hd(String.split(line, ",")), csv_fields(line)} end)

    assert %{connections: "4", pipeline: "8", msgs_per_frame: "1", acks: "2000"} =
             csv["redis_xadd_1kb"]

    assert %{connections: "4", pipeline: "8", msgs_per_frame: "1"} = csv["encoded_1kb"]
    assert {_, ""} = Float.parse(csv["encoded_1kb"].vs_redis_xadd)
    assert {_, ""} = Float.parse(csv["batched_1kb"].vs_redis_xadd)
    assert {_, ""} = Float.parse(csv["redis_xadd_1kb"].server_cpu_us_per_msg)
  end

  @tag :tmp_dir
  test "--pin runs the server in a BEAM on core 0 and the generators on core 1",
       %{tmp_dir: dir} do
    Debian.executable!("redis-server", "redis-server")
    Debian.executable!("redis-benchmark", "redis-tools")
    out = Path.join(dir, "pinned.csv")

    args =
      ~w(--messages 2000 --modes encoded,batched_1kb,encoded_1kb --connections 2 --pipeline 4) ++
        ~w(--window 500 --chunk-bytes 4096 --capacity 1500 --pin --vs-redis --quiet --out) ++
        [out]

    {output, _progress} = BenchIO.run_quietly(fn -> Ingest.run(args) end)
    rows = Process.get(:results)

    assert Enum.map(rows, & &1.mode) == ~w(encoded batched_1kb encoded_1kb redis_xadd_1kb)
    assert Enum.all?(rows, &(&1.cpu_mode == "pinned"))
    # The generator's BEAM may run on core 1 alone (the mask 0b10).
    ringbus_rows = Enum.reject(rows, &(&1.mode == "redis_xadd_1kb"))
    assert Enum.map(ringbus_rows, & &1.generator_cores) == [2, 2, 2]
    assert output =~ "Ringbus ingest, pinned: server on 127.0.0.1:"
    assert output =~ ~r/Redis: taskset -c 1 redis-benchmark -h 127.0.0.1 -p \d+ -c 2 -P 4 -n 2000/
    assert output =~ ~r/^pinned +encoded /m

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == @header
    csv = Map.new(lines, fn line -> {hd(String.split(line, ",")), csv_fields(line)} end)

    for {mode, row} <- csv do
      assert row.cpu_mode == "pinned", mode
      assert {_, ""} = Float.parse(row.server_cpu_us_per_msg)
      assert {_, ""} = Float.parse(row.generator_cpu_us_per_msg)
    end

    # The server BEAM's channel counted every push and overwrote the overflow.
    assert csv["encoded"].overwritten == "500"
    assert csv["encoded_1kb"].acks == "2000"
  end

  test "without redis on the PATH, --vs-redis says what is missing and skips the row" do
    empty = Path.join(System.tmp_dir!(), "ringbus-no-redis-#{System.unique_integer([:positive])}")
    File.mkdir_p!(empty)
    path = System.get_env("PATH")

    try do
      System.put_env("PATH", empty)

      args = ~w(--modes) ++ ["", "--vs-redis"]
      {output, _progress} = BenchIO.run_quietly(fn -> Ingest.run(args) end)
      assert Process.get(:results) == []
      assert output =~ "--vs-redis: redis-server and redis-benchmark not on the PATH"
      assert output =~ "no Redis row"
    after
      System.put_env("PATH", path)
      File.rm_rf!(empty)
    end
  end

  test "unknown options and modes are refused" do
    assert_raise OptionParser.ParseError, fn -> Ingest.run(~w(--colour blue)) end
    assert_raise Mix.Error, ~r/unknown mode "1kb"/, fn -> Ingest.run(~w(--modes 1kb)) end

    assert_raise Mix.Error, ~r/--pipeline to be a positive/, fn ->
      Ingest.run(~w(--pipeline 0))
    end
  end

  defp csv_fields(line) do
    keys = @header |> String.split(",") |> Enum.map(&String.to_atom/1)
    # No `how` holds a comma, so no field is quoted.
    Map.new(Enum.zip(keys, String.split(line, ",")))
  end
end
