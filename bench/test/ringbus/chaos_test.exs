defmodule Ringbus.ChaosTest do
  # Jepsen-style: real nodes under a seeded nemesis, a recorded history and
  # the checker (Ringbus.Chaos). The long form is `mix ringbus.chaos`. A
  # test of the chaos run itself, so it lives with the benches and drives
  # their nodes.
  # Not async: it starts four nodes and wants the machine to itself.
  use ExUnit.Case, async: false

  alias Ringbus.Test.Nodes
  alias Ringbus.Chaos.Nemesis

  @moduletag :chaos
  @moduletag timeout: 180_000

  test "a partition holds until healed: the handshake fails both ways, then the links come back" do
    nodes = Nodes.start(2, "cut", net_ticktime: 2)
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    [a, b] = nodes

    :ok = Nemesis.cut(a, b)
    # Members retries every 250 ms; a handshake fails either way, as its do.
    refute Nodes.call(a, :net_kernel, :connect_node, [b.node])
    refute Nodes.call(b, :net_kernel, :connect_node, [a.node])
    refute b.node in Nodes.call(a, Node, :list, [])

    :ok = Nemesis.heal(a, b)
    assert :ok = Nodes.await_links(nodes)
  end

  test "a short seeded run: nothing acked is lost but to a crash, no false failure, nothing unexpected, no order broken" do
    %{report: report, table: table, faults: faults} = Ringbus.Chaos.run(seconds: 12, seed: 29)
    IO.puts("\n" <> table)

    assert report.ok > 0
    assert Enum.any?(faults, &match?({_, {kind, _, _}} when kind in [:stall, :kill], &1))

    # What holds on today's code.
    assert report.lost == 0
    assert report.unexpected == 0
    assert report.order == 0
    assert report.subscriber_gaps == 0
    assert report.counter_mismatches == []
    assert report.unchecked == 0
    # Calls end in three outcomes: an error means not applied, so no
    # failure was stored; what may have been applied answers :timeout
    # (:info). Producers retry an unknown outcome under the same producer
    # tag, which the channel's home stores once.
    assert report.false_failures == 0
    assert report.duplicated == 0

    # The group's consumers fetched, crashed and claimed under the same
    # faults: every message acked by its producer was acked by a consumer
    # (or counted dead or lost to the ring), none came back after its ack,
    # no delivery count went down.
    assert report.group_deliveries > 0
    assert report.group_lost == 0
    assert report.acked_redelivered == 0
    assert report.delivery_count_down == 0
    assert report.members_disagreeing == []
  end

  test "the replicated schedule comes from its seed: leaders killed and cut, members stalled, every node restarted" do
    schedule = &Nemesis.schedule_replicated(&1, [:a, :b, :c], ["x", "y"], 60_000)
    steps = schedule.(1)
    assert steps == schedule.(1)
    assert steps != schedule.(2)

    faults = for step <- steps, elem(step, 0) != :pause, do: step
    kinds = faults |> Enum.map(&elem(&1, 0)) |> Enum.uniq() |> Enum.sort()
    assert kinds == [:kill_leader, :partition_leader, :restart_all, :stall, :stall_leader]

    for step <- faults do
      case step do
        {:stall, node, ms} -> assert node in [:a, :b, :c] and ms in 21..3_000
        {:stall_leader, ch, ms} -> assert ch in ["x", "y"] and ms in 1_001..3_000
        {:kill_leader, ch, ms} -> assert ch in ["x", "y"] and ms in 301..1_500
        {:partition_leader, ch, ms} -> assert ch in ["x", "y"] and ms in 1_001..3_000
        {:restart_all, ms} -> assert ms in 301..1_000
      end
    end
  end

  test "replicated channels under kills, stalls, partitions of the leader and full restarts: nothing acked is lost, nothing stored twice" do
    %{report: report, table: table, faults: faults, divergent: divergent, stuck: stuck} =
      Ringbus.Chaos.run(seconds: 20, seed: 2, channels: :replicated)

    IO.puts("\n" <> table)

    assert report.ok > 0
    kinds = for {_, step} <- faults, do: elem(step, 0)
    assert :kill_leader in kinds and :restart_all in kinds

    # Acked means on disk on a quorum: it survives kill -9 and restarts.
    assert report.lost == 0
    assert report.lost_to_crash == %{}
    # Every retry goes under its producer tag.
    assert report.duplicated == 0
    assert report.unexpected == 0
    assert report.false_failures == 0
    assert report.order == 0
    assert report.subscriber_gaps == 0
    assert report.unchecked == 0
    # Every member reads alike, and every member's writer answers.
    assert divergent == []
    assert stuck == []

    # The group is kept in the channel's Raft log: it outlives the kills
    # and the restart of every node, and its consumers ack every message.
    assert report.group_deliveries > 0
    assert report.group_lost == 0
    assert report.delivery_count_down == 0
    assert report.members_disagreeing == []
    assert report.acked_redelivered == 0
    # Its consumers drained it (the pushes that check each member's writer
    # come after its figures).
    assert report.group_left == 0
  end
end
