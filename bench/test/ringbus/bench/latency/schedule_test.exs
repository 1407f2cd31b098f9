defmodule Ringbus.Bench.Latency.ScheduleTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Latency.Schedule

  doctest Schedule

  test "requests are due at i / rate over all connections, round robin" do
    # 10 requests at 4,000/s over 3 connections: one every 250 µs.
    s = Schedule.new(4_000, 10, 3)

    intended =
      for c <- 0..2, k <- 0..(Schedule.count(s, c) - 1), do: {Schedule.intended(s, c, k), c}

    assert Enum.sort(intended) == for(i <- 0..9, do: {i * 250_000, rem(i, 3)})
    assert Enum.map(0..2, &Schedule.count(s, &1)) == [4, 3, 3]
  end

  test "due/3 counts each connection's requests whose intended time has come" do
    s = Schedule.new(4_000, 10, 3)

    for t <- [0, 1, 249_999, 250_000, 600_000, 2_249_999, 2_250_000, 10_000_000_000] do
      for c <- 0..2 do
        expected = Enum.count(0..9, &(rem(&1, 3) == c and &1 * 250_000 <= t))
        assert Schedule.due(s, c, t) == expected, "connection #{c} at #{t} ns"
      end
    end

    assert Schedule.due(s, 0, -1) == 0
  end

  test "latency runs from the intended time, not from a late send" do
    s = Schedule.new(1_000, 100, 1)
    # Request 5 was due at 5 ms; the generator wrote it at 9 ms and the reply came at 10 ms:
    # its latency is 5 ms, though it spent 1 ms on the wire.
    assert Schedule.latency(s, 0, 5, 10_000_000) == 5_000_000
    # A stall holds every request due in it: each counts from its own time.
    assert for(k <- 5..9, do: Schedule.latency(s, 0, k, 10_000_000)) ==
             [5_000_000, 4_000_000, 3_000_000, 2_000_000, 1_000_000]
  end

  test "a run that sent its last request late fell behind" do
    s = Schedule.new(10_000, 1_001, 4)
    # On time: the last request (index 1000) is due at 100 ms.
    assert Schedule.achieved(s, 100_000_000) == 10_000.0
    refute Schedule.behind?(s, Schedule.achieved(s, 100_000_000), 0)
    refute Schedule.behind?(s, Schedule.achieved(s, 102_000_000), 0)
    assert Schedule.behind?(s, Schedule.achieved(s, 103_000_000), 0)
  end

  test "a run that wrote its requests more than 1 ms late (p99.9) fell behind, at any rate" do
    s = Schedule.new(10_000, 1_001, 4)
    refute Schedule.behind?(s, 10_000.0, 1_000_000)
    assert Schedule.behind?(s, 10_000.0, 1_000_001)
    assert Schedule.behind?(s, 9_000.0, 0)
  end

  test "due_total/2 and at/2 agree with the per-connection schedule" do
    s = Schedule.new(3_000, 20, 3)

    for t <- [0, 333_332, 333_334, 1_000_000, 5_000_000, 6_333_333, 7_000_000] do
      assert Schedule.due_total(s, t) == Enum.sum(for c <- 0..2, do: Schedule.due(s, c, t))
    end

    for i <- 0..19, do: assert(Schedule.at(s, i) == Schedule.intended(s, rem(i, 3), div(i, 3)))
  end
end
