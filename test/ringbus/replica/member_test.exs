defmodule Ringbus.Replica.MemberTest do
  # A member's figures as functions: its role, its lag in entries and in
  # ms, the elections it saw, and how a reader shows a silent or
  # disconnected member.
  use ExUnit.Case, async: true

  alias Ringbus.Replica.Member

  defp ra(role, term, commit, applied),
    do: %{role: role, term: term, commit_index: commit, applied_index: applied, snapshot_index: 0}

  @extra %{applied_seq: 9, snapshot_bytes: 0, log_bytes: 100}

  test "Ra's states as four roles" do
    assert Member.role(:leader) == :leader
    assert Member.role(:pre_vote) == :candidate
    assert Member.role(:candidate) == :candidate
    assert Member.role(:await_condition) == :follower
    assert Member.role(:follower) == :follower
    assert Member.role(nil) == :down
    assert Member.role(:stopped) == :down
  end

  test "a member caught up has no lag; one behind counts entries and the time since it was caught up" do
    {f, seen} = Member.figures(ra(:follower, 2, 10, 10), 10, %{}, @extra, 1_000)
    assert %{role: :follower, lag_entries: 0, lag_ms: 0, applied_seq: 9, log_bytes: 100} = f

    # The leader committed 15; this member applied 12: behind since 1_000.
    {f, seen} = Member.figures(ra(:follower, 2, 12, 12), 15, seen, @extra, 1_500)
    assert %{lag_entries: 3, lag_ms: 500} = f
    {f, seen} = Member.figures(ra(:follower, 2, 14, 13), 20, seen, @extra, 2_700)
    assert %{lag_entries: 7, lag_ms: 1_700} = f

    {f, _seen} = Member.figures(ra(:follower, 2, 20, 20), 20, seen, @extra, 3_000)
    assert %{lag_entries: 0, lag_ms: 0} = f
  end

  test "the leader's commit index is at least the member's own" do
    {f, _} = Member.figures(ra(:follower, 2, 12, 10), 11, %{}, @extra, 0)
    assert f.lag_entries == 2
  end

  test "with no fresh figure of the leader the lag in entries is unknown and the time grows" do
    {_f, seen} = Member.figures(ra(:follower, 1, 5, 5), 5, %{}, @extra, 0)
    {f, seen} = Member.figures(ra(:follower, 1, 5, 5), nil, seen, @extra, 2_000)
    assert %{lag_entries: nil, lag_ms: 2_000} = f
    # Its server stopped: down, still counting.
    {f, _} = Member.figures(nil, nil, seen, @extra, 3_000)
    assert %{role: :down, term: nil, lag_ms: 3_000, log_bytes: 100} = f
  end

  test "elections are the terms the member went through since first seen" do
    {f, seen} = Member.figures(ra(:leader, 3, 1, 1), 1, %{}, @extra, 0)
    assert f.elections == 0
    {f, _} = Member.figures(ra(:follower, 5, 1, 1), 1, seen, @extra, 10)
    assert f.elections == 2
  end

  test "a reader shows a disconnected node down and a silent one unknown, without figures" do
    {f, _} = Member.figures(ra(:leader, 3, 7, 7), 7, %{}, @extra, 0)

    assert %{node: :b@h, role: :leader, term: 3, age_ms: 400} =
             Member.view(:b@h, {f, 400}, true, 2_000)

    assert %{role: :leader, age_ms: 2_000} = Member.view(:b@h, {f, 2_000}, true, 2_000)

    assert %{node: :b@h, role: :unknown, term: nil, lag_entries: nil, age_ms: 2_001} =
             Member.view(:b@h, {f, 2_001}, true, 2_000)

    assert %{role: :down, term: nil} = Member.view(:b@h, {f, 10}, false, 2_000)
    assert %{role: :unknown, age_ms: nil} = Member.view(:b@h, nil, true, 2_000)
  end
end
