defmodule Ringbus.Bench.GroupsTest do
  # Runs the groups bench at a tiny size: every system but RabbitMQ (bin/test
  # installs nats-server and redis-server; a RabbitMQ cluster takes too long
  # to boot for the suite, groups_rabbit_test.exs runs it with `--include
  # long`), one short row each, the crashes and the failover of the
  # replicas: 3 channel's leader.
  use ExUnit.Case, async: false

  import Ringbus.Test.BenchIO

  alias Ringbus.Bench.Groups.{JetStreamClient, Meter}

  doctest JetStreamClient

  @moduletag timeout: 300_000

  @systems ~w(ringbus_memory redis_aof_always ringbus_r1 ringbus_r3 jetstream_r3)

  @tag :tmp_dir
  test "every system but RabbitMQ gives a row with acks, latencies and a crash's redelivery, in the CSV's columns",
       %{tmp_dir: dir} do
    out = Path.join(dir, "groups.csv")

    args =
      ["--only", Enum.join(@systems, ",")] ++
        ~w(--seconds 1 --max-messages 3000 --sizes 16 --consumers 2 --batch 50 --ack-wait 300 --out) ++
        [out]

    {output, progress} = run_quietly(fn -> Ringbus.Bench.Groups.run(args) end)
    rows = Process.get(:results)

    assert Enum.map(rows, & &1.system) == @systems
    assert output =~ "ringbus_r3 / jetstream_r3"
    refute output =~ "Not run"
    assert progress =~ "kill -9 of the leader's node"

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)

    assert header ==
             "system,replicas,durable,mode,clients_on,payload,producers,consumers,acked,msgs_per_s," <>
               "p50_us,p99_us,max_us,redelivered,errors,crash_first_ms,crash_all_ms,crash_missing,failover_ms," <>
               "ratio_to,ratio"

    assert Enum.map(lines, &hd(String.split(&1, ","))) == @systems
    rates = Map.new(lines, &(&1 |> String.split(",") |> then(fn f -> {hd(f), Enum.at(f, 9)} end)))

    # a match in the body, not the generator, so that a malformed row fails instead of being skipped
    for line <- lines do
      [system, replicas, _durable, "shared", _on, "16", "2", "2", acked, rate | rest] =
        String.split(line, ",")

      [p50, p99, max, _redelivered, _errors, first, all, "0", failover, ratio_to, ratio] = rest
      assert replicas in ["1", "3"]
      assert String.to_integer(acked) > 0, "#{system} acked nothing"
      assert String.to_integer(rate) > 0, "#{system} has no rate"
      assert String.to_integer(p50) <= String.to_integer(p99)
      assert String.to_integer(p99) <= String.to_integer(max)
      assert String.to_float(first) <= String.to_float(all)

      # Redis and JetStream give a crashed consumer's messages back once the
      # ack wait has passed since their delivery, a little before the kill;
      # Ringbus's groups at the consumer's exit.
      if system in ["redis_aof_always", "jetstream_r3"],
        do: assert(String.to_float(first) >= 150, "#{system} redelivered before its ack wait"),
        else: assert(String.to_float(all) < 150, "#{system} waited for the ack wait")

      if system == "ringbus_r3",
        do: assert(String.to_float(failover) > 0, "ringbus_r3 has no failover"),
        else: assert(failover == "")

      # The targets' ratios, each the row's rate over its baseline's.
      baseline = %{"ringbus_r3" => "jetstream_r3", "ringbus_memory" => "redis_aof_always"}[system]

      if baseline do
        assert ratio_to == baseline
        expected = String.to_integer(rate) / String.to_integer(rates[baseline])
        assert_in_delta String.to_float(ratio), expected, expected * 0.01 + 0.01
      else
        assert [ratio_to, ratio] == ["", ""]
      end
    end
  end

  @tag :tmp_dir
  test "--pin runs the memory channel's rows on core 0 and Redis's clients on core 1, then unpins this VM",
       %{tmp_dir: dir} do
    out = Path.join(dir, "groups.csv")

    args =
      ~w(--pin --only ringbus_memory,redis_aof_always --seconds 1 --max-messages 2000 --sizes 16) ++
        ~w(--consumers 1 --ack-wait 300 --out) ++ [out]

    {output, _progress} = run_pinned_quietly(fn -> Ringbus.Bench.Groups.run(args) end)

    assert Enum.map(Process.get(:results), &{&1.system, &1.mode}) ==
             [{"ringbus_memory", "pinned"}, {"redis_aof_always", "pinned"}]

    assert output =~ "ringbus_memory: this VM on core 0, 1 scheduler online"
    assert output =~ "redis clients: this VM on core 1, 1 scheduler online"
    assert output =~ ~r/ringbus_memory \/ redis_aof_always \d+\.\d\dx \(pinned;/
    assert [_ | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert Enum.all?(lines, &(&1 =~ ",pinned,"))
  end

  test "an unknown system, and a size too small for the push time, are errors" do
    assert_raise Mix.Error, ~r/unknown system "rabbitmq"/, fn ->
      Ringbus.Bench.Groups.run(~w(--only rabbitmq))
    end

    assert_raise Mix.Error, ~r/--sizes to be at least 8/, fn ->
      Ringbus.Bench.Groups.run(~w(--sizes 4))
    end

    assert_raise Mix.Error, ~r/--consumers to be ascending/, fn ->
      Ringbus.Bench.Groups.run(~w(--consumers 4,1))
    end
  end

  test "a meter hands out its budget once, and times first deliveries only" do
    meter = Meter.new(150)
    assert Meter.take(meter, 100) == 100
    assert Meter.take(meter, 100) == 50
    assert Meter.take(meter, 100) == 0

    [payload] = Meter.payloads(16, 1)
    assert byte_size(payload) == 16
    now = Meter.pushed_at(payload) + 1_000
    Meter.delivered(meter, payload, 1, now)
    Meter.delivered(meter, payload, 2, now)
    Meter.pushed(meter, 2)
    Meter.acked(meter, 1)
    assert Meter.backlog(meter) == 1
    refute Meter.drained?(meter, 1)

    summary = Meter.summary(meter, 1.0, 16)
    assert %{p50_us: 1_000, max_us: 1_000, redelivered: 1, acked: 1, pushed: 2} = summary
  end
end
