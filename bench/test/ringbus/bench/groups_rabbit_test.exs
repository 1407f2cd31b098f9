defmodule Ringbus.Bench.GroupsRabbitTest do
  # The groups bench's RabbitMQ quorum queue rows. A cluster of three
  # brokers takes tens of seconds to boot on a small machine, so the run end
  # to end is a `:long` test (`mix test --include long`); the rest is quick.
  # All of it needs the broker unpacked by bin/setup-rabbitmq: bin/test runs
  # it, and without it the tests fail, naming it.
  use ExUnit.Case, async: false

  import Ringbus.Test.BenchIO

  alias Ringbus.Bench.Groups.{RabbitClient, RabbitServers}

  @moduletag timeout: 300_000

  setup_all do
    RabbitServers.home() ||
      flunk("RabbitMQ is not unpacked: run bin/setup-rabbitmq (bin/test does)")

    :ok
  end

  # The command lines of the broker nodes the bench starts.
  @node_pattern "rb[0-9]+@127.0.0.1 -setcookie ringbus_bench_"

  @tag :long
  @tag :tmp_dir
  test "a 3-node quorum queue gives rows with acks, latencies and a redelivery at the consumer's death",
       %{tmp_dir: dir} do
    out = Path.join(dir, "groups.csv")

    args =
      ~w(--only rabbitmq_quorum --seconds 1 --max-messages 3000 --sizes 16 --consumers 1,2) ++
        ~w(--batch 50 --ack-wait 300 --out) ++ [out]

    {_output, progress} = run_quietly(fn -> Ringbus.Bench.Groups.run(args) end)
    assert progress =~ "starting 3 RabbitMQ nodes"
    assert Enum.map(Process.get(:results), & &1.consumers) == [1, 2]
    [_header | lines] = out |> File.read!() |> String.split("\n", trim: true)

    for line <- lines do
      ["rabbitmq_quorum", "3", "fsync", "shared", "bench_vm", "16", "2", _, acked, rate | rest] =
        String.split(line, ",")

      [p50, p99, max, _redelivered, "0", first, all, "0", "", "", ""] = rest
      assert String.to_integer(acked) > 0
      assert String.to_integer(rate) > 0
      assert String.to_integer(p50) <= String.to_integer(p99)
      assert String.to_integer(p99) <= String.to_integer(max)
      assert String.to_float(first) <= String.to_float(all)
      # Delivered again when the connection closes, not after the ack wait.
      assert String.to_float(all) < 150
    end

    assert broker_processes() == ""
  end

  test "a cluster that does not come up in time is an error naming it, and its nodes are stopped" do
    error = assert_raise RuntimeError, fn -> RabbitServers.start!(1, 1) end
    message = Exception.message(error)

    assert message =~ "RabbitMQ did not come up as a cluster of 1 in time"
    assert message =~ "rb1@127.0.0.1"
    assert broker_processes() == ""
  end

  test "AMQP methods are the client's records with the fields given, the rest at their defaults" do
    :ok = RabbitServers.load_client!(RabbitServers.home())

    assert RabbitClient.method(:"basic.ack", delivery_tag: 7, multiple: true) ==
             {:"basic.ack", 7, true}

    assert {:"basic.qos", 0, 50, false} = RabbitClient.method(:"basic.qos", prefetch_count: 50)

    assert_raise RuntimeError, ~r/no field nope/, fn ->
      RabbitClient.method(:"basic.ack", nope: 1)
    end
  end

  # pgrep exits 1 when nothing matches.
  defp broker_processes do
    case System.cmd("pgrep", ["-af", "--", @node_pattern]) do
      {_, 1} -> ""
      {out, 0} -> out
    end
  end
end
