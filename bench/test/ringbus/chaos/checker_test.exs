defmodule Ringbus.Chaos.CheckerTest do
  # Hand-made histories, one per anomaly: each count of the report is shown
  # able to be non-zero, and a clean history counts nothing.
  use ExUnit.Case, async: true

  alias Ringbus.Chaos.Checker

  @ch "c"

  defp push(process, key, result, type, time \\ 1),
    do: [
      {process, :invoke, :push, {@ch, [key]}, time},
      {process, type, :push, {@ch, [key], result}, time + 1}
    ]

  defp info(pushed, opts \\ []) do
    len = Keyword.get(opts, :len, pushed)

    %{
      pushed: pushed,
      pulled: Keyword.get(opts, :pulled, 0),
      overwritten: Keyword.get(opts, :overwritten, pushed - len),
      len: len,
      next_seq: pushed
    }
  end

  defp final(messages, info, restarts \\ []),
    do: %{@ch => %{messages: messages, info: info, restarts: restarts}}

  defp zero?(report, except) do
    counts = [
      :lost,
      :duplicated,
      :unexpected,
      :false_failures,
      :info_stored,
      :order,
      :subscriber_gaps,
      :unchecked
    ]

    for key <- counts -- except, do: assert(report[key] == 0, "#{key}: #{inspect(report)}")
    assert report.lost_to_crash == %{} or :lost_to_crash in except
    assert report.counter_mismatches == [] or :counter_mismatches in except
  end

  test "a clean history counts nothing but what was acked and held" do
    history = push(1, {1, 0}, 0, :ok) ++ push(1, {1, 1}, 1, :ok, 3)
    report = Checker.check(history, final([{0, {1, 0}}, {1, {1, 1}}], info(2)))
    zero?(report, [])
    assert %{ok: 2, held: 2, fail: 0, info: 0} = report
  end

  test "lost: an acked seq in the held range that holds nothing" do
    history = push(1, {1, 0}, 0, :ok) ++ push(1, {1, 1}, 1, :ok, 3)
    report = Checker.check(history, final([{0, {1, 0}}], info(2, len: 2)))
    assert report.lost == 1
    assert report.counter_mismatches == [@ch]
    zero?(report, [:lost, :counter_mismatches])
  end

  test "gone below the held range is counted by overwritten, and lost beyond it" do
    history = push(1, {1, 0}, 0, :ok) ++ push(1, {1, 1}, 1, :ok, 3)
    counted = Checker.check(history, final([{1, {1, 1}}], info(2, len: 1)))
    assert %{gone: 1, lost: 0} = counted
    zero?(counted, [])

    uncounted = Checker.check(history, final([{1, {1, 1}}], info(2, len: 1, overwritten: 0)))
    assert %{gone: 0, lost: 1} = uncounted
  end

  test "lost to a crash: acked before the home restarted, by incarnation" do
    history = push(1, {1, 0}, 0, :ok, 10) ++ push(1, {1, 1}, 0, :ok, 30)
    report = Checker.check(history, final([{0, {1, 1}}], info(1), [20]))
    assert report.lost_to_crash == %{{@ch, 0} => 1}
    assert report.held == 1
    zero?(report, [:lost_to_crash])
  end

  test "a failed push that was stored is a false failure, and its retry a duplicate" do
    history = push(1, {1, 0}, :node_busy, :fail) ++ push(1, {1, 0}, 1, :ok, 3)
    report = Checker.check(history, final([{0, {1, 0}}, {1, {1, 0}}], info(2)))
    assert %{false_failures: 1, duplicated: 1, false_failures_by_reason: %{node_busy: 1}} = report
    zero?(report, [:false_failures, :duplicated])
  end

  test "unexpected: payloads nobody pushed, and more copies than attempts" do
    history = push(1, {1, 0}, 0, :ok)
    messages = [{0, {1, 0}}, {1, {:unknown, 3}}, {2, {9, 9}}, {3, {1, 0}}]
    report = Checker.check(history, final(messages, info(4)))
    assert report.unexpected == 3
    assert report.duplicated == 1
    zero?(report, [:unexpected, :duplicated])
  end

  test "info: unknown outcomes stored or not, and an invocation never completed" do
    history =
      push(1, {1, 0}, :timeout, :info) ++
        push(1, {1, 1}, :timeout, :info, 3) ++ [{1, :invoke, :push, {@ch, [{1, 2}]}, 5}]

    report = Checker.check(history, final([{0, {1, 0}}], info(1)))
    assert %{info: 3, info_stored: 1, info_not_stored: 2} = report
    zero?(report, [:info_stored])
  end

  test "order: acked seqs going back, and counters going down in a read" do
    history = push(1, {1, 0}, 5, :ok) ++ push(1, {1, 1}, 3, :ok, 3)

    report =
      Checker.check(history, final([{3, {1, 1}}, {5, {1, 0}}], info(6, len: 2, overwritten: 4)))

    assert report.order == 2

    assert [{:acked, 1, @ch, {5, _}, {3, _}}, {:read, 1, @ch, {3, 1}, {5, 0}}] =
             report.examples.order

    zero?(report, [:order])
  end

  test "a batch stored twice is duplicated, not out of order" do
    keys = [{1, 0}, {1, 1}]

    history = [
      {1, :invoke, :push_many, {@ch, keys}, 1},
      {1, :fail, :push_many, {@ch, keys, :node_busy}, 2},
      {1, :invoke, :push_many, {@ch, keys}, 3},
      {1, :ok, :push_many, {@ch, keys, 2}, 4}
    ]

    messages = [{0, {1, 0}}, {1, {1, 1}}, {2, {1, 0}}, {3, {1, 1}}]
    report = Checker.check(history, final(messages, info(4)))
    assert %{duplicated: 2, false_failures: 2, order: 0} = report
  end

  test "subscriber gaps: a batch that skips seqs its lost does not count; a seq sent twice" do
    deliver = fn first, last, lost ->
      {2, :ok, :deliver, {@ch, 0, for(s <- first..last, do: {s, {9, s}}), lost}, first}
    end

    history = [deliver.(0, 1, 0), deliver.(5, 6, 1), deliver.(6, 6, 0)]
    report = Checker.check(history, %{})
    assert report.subscriber_gaps == 2
    assert report.order == 1
    # Nobody pushed {9, _}: its four copies (seq 6 seen twice is one) are unexpected too.
    assert report.unexpected == 4
  end

  test "a delivery of only a lost count: the next batch starts that much further on" do
    deliver = fn first, last, lost ->
      {2, :ok, :deliver, {@ch, 0, for(s <- first..last, do: {s, {9, s}}), lost}, first}
    end

    lost_only = fn lost -> {2, :ok, :deliver, {@ch, 0, [], lost}, 0} end

    history = [deliver.(0, 1, 0), lost_only.(3), deliver.(5, 6, 0)]
    assert Checker.check(history, %{}).subscriber_gaps == 0

    # Counted lost, yet one seq more was skipped.
    history = [deliver.(0, 1, 0), lost_only.(2), deliver.(5, 6, 0)]
    assert Checker.check(history, %{}).subscriber_gaps == 1
  end

  test "unchecked: acked pushes to a channel with no final read" do
    report = Checker.check(push(1, {1, 0}, 0, :ok), %{})
    assert report.unchecked == 1
    zero?(report, [:unchecked])
  end

  test "the table names every count" do
    history = push(1, {1, 0}, :node_busy, :fail) ++ push(1, {1, 0}, 1, :ok, 3)
    table = Checker.table(Checker.check(history, final([{0, {1, 0}}, {1, {1, 0}}], info(2))))

    for row <- [
          "lost ",
          "lost to a crash",
          "duplicated",
          "unexpected",
          "false failures",
          "info stored",
          "order"
        ],
        do: assert(table =~ row)

    assert table =~ ~r/false failures\s+1  .*node_busy: 1/
  end
end
