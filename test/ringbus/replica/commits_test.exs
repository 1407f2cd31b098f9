defmodule Ringbus.Replica.CommitsTest do
  # When a node first knew each commit index: samples, what they answer,
  # and the bound on how many are kept.
  use ExUnit.Case, async: true

  alias Ringbus.Replica.Commits

  defp commits(samples),
    do: Enum.reduce(samples, Commits.new(), fn {i, t}, h -> Commits.observe(h, i, t) end)

  test "only a higher index adds a sample; nothing known answers nil" do
    h = commits([{5, 100}, {5, 200}, {3, 300}, {nil, 400}, {9, 500}])
    assert h == [{9, 500}, {5, 100}]
    assert Commits.top(h) == 9
    assert Commits.top(Commits.new()) == nil
    assert Commits.reached(Commits.new(), 1) == nil
  end

  test "reached: the first time an index was covered; known_at: the highest index known then" do
    h = commits([{10, 1_000}, {20, 2_000}, {30, 3_000}])
    assert Commits.reached(h, 1) == 1_000
    assert Commits.reached(h, 10) == 1_000
    assert Commits.reached(h, 11) == 2_000
    assert Commits.reached(h, 30) == 3_000
    assert Commits.reached(h, 31) == nil

    assert Commits.known_at(h, 999) == nil
    assert Commits.known_at(h, 1_000) == 10
    assert Commits.known_at(h, 2_999) == 20
    assert Commits.known_at(h, 9_999) == 30
  end

  test "prune drops what every member applied, but the newest, and the one that covers the floor stays" do
    h = commits([{10, 1_000}, {20, 2_000}, {30, 3_000}, {40, 4_000}])
    assert Commits.prune(h, 20, 64, 5_000) == [{40, 4_000}, {30, 3_000}]
    assert Commits.prune(h, 25, 64, 5_000) == [{40, 4_000}, {30, 3_000}]
    assert Commits.prune(h, 40, 64, 5_000) == [{40, 4_000}]
    assert Commits.prune(h, 99, 64, 5_000) == [{40, 4_000}]
    assert Commits.prune(h, nil, 64, 5_000) == h
  end

  test "past the bound old samples thin out: after a day of one a second, 64 answer within a quarter of their age" do
    seconds = 86_400

    h =
      for s <- 1..seconds, reduce: Commits.new() do
        h -> h |> Commits.observe(s * 10, s * 1_000) |> Commits.prune(nil, 64, s * 1_000)
      end

    now = seconds * 1_000
    assert length(h) == 64
    # The oldest and the newest stay.
    assert List.last(h) == {10, 1_000}
    assert hd(h) == {seconds * 10, now}

    # Each index is answered no earlier than it was reached, and late by
    # less than a quarter of its age: a lag reads at most that much low.
    for s <- 1..seconds//37 do
      late = Commits.reached(h, s * 10) - s * 1_000
      assert late >= 0 and late <= 0.25 * (now - s * 1_000), "index #{s * 10}: #{late} ms late"
    end

    # The last ten seconds keep every sample.
    for s <- (seconds - 9)..seconds, do: assert(Commits.reached(h, s * 10) == s * 1_000)
  end
end
