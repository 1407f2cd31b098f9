defmodule Ringbus.Bench.ReplicationTest do
  # Runs the replication bench at a tiny size: every system (bin/test
  # installs nats-server and redis-server; bin/setup-ra puts Osiris in
  # _vendor/ra/), one short row each, with both failovers.
  use ExUnit.Case, async: false

  import Ringbus.Test.BenchIO

  alias Ringbus.Bench.Replication.NatsClient

  doctest NatsClient

  @moduletag timeout: 300_000

  @systems ~w(ringbus_memory ringbus_r1 ringbus_r3 ringbus_r3_half_rate ringbus_r3_read_follower
              ringbus_memory_read jetstream_r3 jetstream_r1 osiris redis_aof_always redis_aof_everysec)

  @tag :tmp_dir
  test "every system gives a row with a positive rate, and the CSV has the columns", %{
    tmp_dir: dir
  } do
    out = Path.join(dir, "replication.csv")
    args = ~w(--seconds 1 --max-messages 3000 --payloads 16 --window 32 --out) ++ [out]
    {output, progress} = run_quietly(fn -> Ringbus.Bench.Replication.run(args) end)
    rows = Process.get(:results)

    assert Enum.map(rows, & &1.system) == @systems
    assert output =~ "Ringbus R3 msgs/s / JetStream R3"
    assert progress =~ "kill -9 of the leader's node"
    assert progress =~ "kill -9 of the stream leader's server"

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)

    assert header ==
             "system,replicas,durable,payload,producers,msgs_per_s,mb_per_s,p50_us,p99_us,max_us,failover_ms"

    by = Map.new(lines, fn line -> {hd(String.split(line, ",")), String.split(line, ",")} end)
    assert Map.keys(by) |> Enum.sort() == Enum.sort(@systems)

    # a match in the body, not the generator, so that a malformed row fails instead of being skipped
    for {system, fields} <- by do
      [_, replicas, _durable, "16", _producers, rate, _mb | latencies] = fields
      assert String.to_integer(rate) > 0, "#{system} has no rate"
      assert replicas in ["1", "3"]
      [p50, p99, max, failover] = latencies

      if String.ends_with?(system, "_read") or String.ends_with?(system, "_follower") do
        assert [p50, p99, max] == ["", "", ""]
      else
        assert String.to_integer(p50) <= String.to_integer(p99)
        assert String.to_integer(p99) <= String.to_integer(max)
      end

      if system in ["ringbus_r3", "jetstream_r3"],
        do: assert(String.to_float(failover) > 0, "#{system} has no failover"),
        else: assert(failover == "")
    end
  end

  test "an unknown system is an error" do
    assert_raise Mix.Error, ~r/unknown system "kafka"/, fn ->
      Ringbus.Bench.Replication.run(~w(--systems kafka))
    end
  end
end
