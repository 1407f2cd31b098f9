defmodule Ringbus.Replica.MemberTest do
  # A member's figures as functions: its role, the elections it saw, its
  # lag in entries and in ms as the leader's node computes it, and how a
  # reader shows a silent or disconnected member and whose lag it shows.
  use ExUnit.Case, async: true

  alias Ringbus.Replica.{Commits, Member}

  defp ra(role, term, commit, applied),
    do: %{role: role, term: term, commit_index: commit, applied_index: applied, snapshot_index: 0}

  @extra %{applied_seq: 9, snapshot_bytes: 0, log_bytes: 100}

  # The commit indexes `{index, at}`, oldest first, as a reporter saw them.
  defp commits(samples),
    do: Enum.reduce(samples, Commits.new(), fn {i, t}, h -> Commits.observe(h, i, t) end)

  test "Ra's states as four roles" do
    assert Member.role(:leader) == :leader
    assert Member.role(:pre_vote) == :candidate
    assert Member.role(:candidate) == :candidate
    assert Member.role(:await_condition) == :follower
    assert Member.role(:follower) == :follower
    assert Member.role(nil) == :down
    assert Member.role(:stopped) == :down
  end

  test "a member's own figures: Ra's, the ring's and the disk's, and its last applied index kept" do
    {f, seen} = Member.figures(ra(:follower, 2, 10, 9), %{}, @extra)

    assert %{role: :follower, term: 2, commit_index: 10, applied_index: 9, applied_seq: 9} = f
    assert %{log_bytes: 100, snapshot_bytes: 0, lag_entries: nil, lag_ms: nil} = f
    assert seen.applied == 9

    # Its server stopped: down, and the last applied index stays known.
    {f, seen} = Member.figures(nil, seen, @extra)
    assert %{role: :down, term: nil, applied_index: nil, log_bytes: 100} = f
    assert seen.applied == 9
  end

  test "elections are the terms the member went through since first seen" do
    {f, seen} = Member.figures(ra(:leader, 3, 1, 1), %{}, @extra)
    assert f.elections == 0
    {f, _} = Member.figures(ra(:follower, 5, 1, 1), seen, @extra)
    assert f.elections == 2
  end

  test "lag: the entries committed and not applied, and the age of the oldest of them" do
    # Commit index 10 first seen at 1_000, 20 at 2_000, 30 at 3_000.
    h = commits([{10, 1_000}, {20, 2_000}, {30, 3_000}])

    assert Member.lag(h, 30, 3_500) == {0, 0}
    # Entry 21 is the oldest it lacks, committed by 3_000.
    assert Member.lag(h, 20, 3_500) == {10, 500}
    # Entry 16 was committed by 2_000.
    assert Member.lag(h, 15, 3_500) == {15, 1_500}
    # As of its report at 2_500: index 30 was not known yet.
    assert Member.lag(h, 15, 2_500) == {5, 500}
    assert Member.lag(h, 20, 2_500) == {0, 0}
    # Unknown: no applied index, or no commit index seen.
    assert Member.lag(h, nil, 3_500) == nil
    assert Member.lag(Commits.new(), 5, 3_500) == nil
  end

  test "under steady load a member a few entries behind shows less than a second, and does not climb" do
    # 1000 entries/s for 5 minutes: the commit index is the time in ms. The
    # leader's node samples it once a second (Ra's tick), 7 ms late; the
    # member's Ra ticks 300 ms before, when it has applied all but the last
    # 50, and its report arrives at the leader's node 430 ms after the sample.
    lags =
      for s <- 1..300, reduce: {Commits.new(), []} do
        {h, lags} ->
          at = s * 1_000
          h = h |> Commits.observe(at, at + 7) |> Commits.prune(at - 2_000, 64, at + 7)
          applied = at - 300 - 50
          {h, [Member.lag(h, applied, at + 430) | lags]}
      end
      |> elem(1)

    assert Enum.all?(lags, &(&1 == {350, 423})), inspect(Enum.uniq(lags))
  end

  test "a stalled member's lag grows with the time since the first entry it lacks was committed" do
    # 100 entries a second; the member applied 5_000 (at 50 s) and nothing
    # since. Thinned or not, the history keeps the sample that covers 5_001.
    for s <- 1..600, reduce: Commits.new() do
      h ->
        at = s * 1_000
        h = h |> Commits.observe(s * 100, at) |> Commits.prune(5_000, 64, at)
        assert length(h) <= 64
        expected = if s > 50, do: {s * 100 - 5_000, at - 51_000}, else: {0, 0}
        assert Member.lag(h, 5_000, at) == expected
        h
    end
  end

  test "lags: every member the leader's node has an applied index for" do
    h = commits([{10, 1_000}, {20, 2_000}])

    assert Member.lags(h, [{:a@h, 20, 2_100}, {:b@h, 8, 1_900}, {:c@h, nil, 2_000}]) ==
             %{a@h: {0, 0}, b@h: {2, 900}}
  end

  test "a reader shows a disconnected node down and a silent one unknown, without figures" do
    {f, _} = Member.figures(ra(:leader, 3, 7, 7), %{}, @extra)

    assert %{node: :b@h, role: :leader, term: 3, age_ms: 400} =
             Member.view(:b@h, {f, 400}, true, nil, 2_000)

    assert %{role: :leader, age_ms: 2_000, lag_entries: 1, lag_ms: 5} =
             Member.view(:b@h, {f, 2_000}, true, {1, 5}, 2_000)

    assert %{node: :b@h, role: :unknown, term: nil, lag_entries: nil, lag_ms: nil, age_ms: 2_001} =
             Member.view(:b@h, {f, 2_001}, true, {1, 5}, 2_000)

    assert %{role: :down, term: nil, lag_ms: nil} =
             Member.view(:b@h, {f, 10}, false, {1, 5}, 2_000)

    assert %{role: :unknown, age_ms: nil} = Member.view(:b@h, nil, true, nil, 2_000)
  end

  test "every member's lag comes from the freshest leader in the highest term" do
    {leader, _} = Member.figures(ra(:leader, 4, 90, 90), %{}, @extra)
    {stalled, _} = Member.figures(ra(:leader, 3, 40, 40), %{}, @extra)
    {follower, _} = Member.figures(ra(:follower, 4, 90, 85), %{}, @extra)
    nodes = [:a@h, :b@h, :c@h]
    connected = MapSet.new(nodes)

    # a leads in term 4; b, a leader of term 3 whose server stalled, still
    # says it leads and finds nobody behind.
    reports = %{
      a@h: {leader, %{a@h: {0, 0}, b@h: {50, 7_000}, c@h: {5, 300}}, 100},
      b@h: {stalled, %{a@h: {0, 0}, b@h: {0, 0}, c@h: {0, 0}}, 200},
      c@h: {follower, nil, 300}
    }

    assert [
             %{lag_ms: 0},
             %{role: :leader, term: 3, lag_entries: 50, lag_ms: 7_000},
             %{lag_ms: 300}
           ] = Member.views(nodes, reports, connected, 2_000)

    # With a's report stale (or a not connected) b's are the freshest.
    for {reports, connected} <- [
          {Map.update!(reports, :a@h, &put_elem(&1, 2, 2_500)), connected},
          {reports, MapSet.delete(connected, :a@h)}
        ] do
      assert [_, %{lag_ms: 0}, %{lag_ms: 0}] = Member.views(nodes, reports, connected, 2_000)
    end

    # No leader heard: no lag.
    reports = Map.drop(reports, [:a@h, :b@h])

    assert [%{role: :unknown}, %{role: :unknown}, %{lag_ms: nil, lag_entries: nil}] =
             Member.views(nodes, reports, connected, 2_000)
  end
end
