defmodule Ringbus.Chaos.GroupCheckerTest do
  # Hand-made histories of a group's consumers, one per anomaly: each count
  # is shown able to be non-zero, and a clean history counts none.
  use ExUnit.Case, async: true

  alias Ringbus.Chaos.{Checker, GroupChecker}

  @ch "g.ch"
  @g "workers"

  defp push(seq, time),
    do: [
      {1, :invoke, :push, {@ch, [{1, seq}]}, time},
      {1, :ok, :push, {@ch, [{1, seq}], seq}, time + 1}
    ]

  defp fetch(process, messages, time, op \\ :fetch),
    do: [
      {process, :invoke, op, {@ch, @g, "c#{process}"}, time},
      {process, :ok, op, {@ch, @g, "c#{process}", for({s, n} <- messages, do: {s, {1, s}, n})},
       time + 1}
    ]

  defp ack(process, seq, n, time),
    do: [
      {process, :invoke, :group_ack, {@ch, @g, seq}, time},
      {process, :ok, :group_ack, {@ch, @g, seq, n}, time + 1}
    ]

  defp figures(opts \\ []) do
    %{
      name: @g,
      delivered: 1,
      pending: 0,
      lag: 0,
      redelivered: 0,
      acked: 2,
      dead: 0,
      lost: 0,
      dropped: 0,
      held: 0,
      config: %{},
      consumers: [%{name: "c7", pending: 0, idle_ms: 10}]
    }
    |> Map.merge(Map.new(opts))
  end

  defp groups(figures, views \\ nil),
    do: %{{@ch, @g} => %{figures: figures, views: views || [{:a, figures}]}}

  defp zero?(report, except) do
    for key <- [:group_lost, :acked_redelivered, :delivery_count_down, :group_left] -- except,
        do: assert(report[key] == 0, "#{key}: #{inspect(report)}")

    assert report.members_disagreeing == [] or :members_disagreeing in except
  end

  # Two messages pushed, fetched by consumer 7, which crashes holding 1;
  # consumer 8 gets 1 again and acks it.
  defp clean do
    push(0, 1) ++
      push(1, 3) ++
      fetch(7, [{0, 1}, {1, 1}], 10) ++
      ack(7, 0, 1, 20) ++
      [{7, :info, :crash, {@ch, @g, "c7", [1]}, 30}] ++
      fetch(8, [{1, 2}], 40) ++ ack(8, 1, 1, 50)
  end

  test "a clean history counts its deliveries, acks and redeliveries, and nothing wrong" do
    report = GroupChecker.check(clean(), groups(figures()))
    zero?(report, [])
    assert %{group_deliveries: 3, group_acks: 2, redeliveries: 1} = report
  end

  test "lost: pushed and never acked, beyond what the group counts dead or lost to the ring" do
    history = clean() ++ push(2, 60) ++ push(3, 62)
    report = GroupChecker.check(history, groups(figures()))
    assert report.group_lost == 2
    zero?(report, [:group_lost])

    excused = GroupChecker.check(history, groups(figures(dead: 1, lost: 1)))
    assert %{group_lost: 0, group_counted: %{acked: 2, dead: 1, lost: 1}} = excused
    assert GroupChecker.check(history, groups(figures(dead: 1))).group_lost == 1
    # A group that is not there excuses nothing.
    assert GroupChecker.check(history, groups(nil, [{:a, nil}])).group_lost == 2
  end

  test "lost: still pending at the end is not excused, and shown as left" do
    history = clean() ++ push(2, 60) ++ fetch(7, [{2, 1}], 70)
    report = GroupChecker.check(history, groups(figures(pending: 1)))
    assert %{group_lost: 1, group_left: 1} = report
  end

  test "lost: an ack of unknown outcome excuses as many as the group acked beyond the oks" do
    history =
      push(0, 1) ++
        push(1, 3) ++
        fetch(7, [{0, 1}, {1, 1}], 10) ++
        [
          {7, :invoke, :group_ack, {@ch, @g, 0}, 20},
          {7, :info, :group_ack, {@ch, @g, 0, :timeout}, 21}
        ] ++ ack(7, 1, 1, 30)

    report = GroupChecker.check(history, groups(figures(acked: 2)))
    assert %{group_lost: 0, group_acks: 1, group_acks_unknown: 1} = report

    # The group counts one ack: the unknown one was not applied.
    report = GroupChecker.check(history, groups(figures(acked: 1)))
    assert %{group_lost: 1, group_unacked: [{@ch, @g, 0}]} = report
  end

  test "lost: an ack answered 0 (not pending) acks nothing" do
    history = push(0, 1) ++ fetch(7, [{0, 1}], 10) ++ ack(7, 0, 0, 20)
    assert %{group_lost: 1, group_acks: 0} = GroupChecker.check(history, groups(figures()))
  end

  test "acked redelivered: a fetch invoked after an ack answered {:ok, 1} returns the message" do
    history = clean() ++ fetch(9, [{0, 2}], 60)
    report = GroupChecker.check(history, groups(figures()))
    assert report.acked_redelivered == 1
    zero?(report, [:acked_redelivered])

    # A claim is a delivery too.
    claimed = clean() ++ fetch(9, [{0, 2}], 60, :autoclaim)
    assert GroupChecker.check(claimed, groups(figures())).acked_redelivered == 1
  end

  test "acked redelivered: a fetch that began before the ack was answered is not counted" do
    history =
      push(0, 1) ++
        fetch(7, [{0, 1}], 10) ++
        [{8, :invoke, :fetch, {@ch, @g, "c8"}, 15}] ++
        ack(7, 0, 1, 16) ++
        [{8, :ok, :fetch, {@ch, @g, "c8", [{0, {1, 0}, 2}]}, 30}]

    assert GroupChecker.check(history, groups(figures())).acked_redelivered == 0
  end

  test "delivery count down: a later delivery whose count is not above an earlier one's" do
    down = push(0, 1) ++ fetch(7, [{0, 2}], 10) ++ fetch(8, [{0, 1}], 20)
    report = GroupChecker.check(down, groups(figures(acked: 0)))
    assert report.delivery_count_down == 1
    zero?(report, [:delivery_count_down, :group_lost])

    same = push(0, 1) ++ fetch(7, [{0, 1}], 10) ++ fetch(8, [{0, 1}], 20)
    assert GroupChecker.check(same, groups(figures())).delivery_count_down == 1

    up = push(0, 1) ++ fetch(7, [{0, 1}], 10) ++ fetch(8, [{0, 2}], 20)
    assert GroupChecker.check(up, groups(figures())).delivery_count_down == 0
  end

  test "members disagreeing: a member whose view differs from the reference's, idle time aside" do
    idle = figures(consumers: [%{name: "c7", pending: 0, idle_ms: 99}])
    alike = GroupChecker.check(clean(), groups(figures(), [{:a, figures()}, {:b, idle}]))
    assert alike.members_disagreeing == []

    views = [{:a, figures()}, {:b, figures(acked: 1)}, {:c, nil}, {:d, {:error, :node_down}}]
    report = GroupChecker.check(clean(), groups(figures(), views))
    assert report.members_disagreeing == [{@ch, @g, :b}, {@ch, @g, :c}, {@ch, @g, :d}]
    zero?(report, [:members_disagreeing])
  end

  test "the checker's report and table carry the group counts" do
    history = clean() ++ fetch(9, [{0, 2}], 60)
    report = Checker.check(history, %{}, groups(figures()))
    assert %{acked_redelivered: 1, group_lost: 0, redeliveries: 2} = report
    assert Checker.table(report) =~ ~r/acked redelivered\s+1 /
    assert %{group_deliveries: 4, group_lost: 0} = Checker.check(history, %{})
  end
end
