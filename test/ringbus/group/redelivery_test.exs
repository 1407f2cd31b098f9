defmodule Ringbus.Group.RedeliveryTest do
  # The group's decisions in time, as functions of rows, config and `now`:
  # no table, no process, no clock.
  use ExUnit.Case, async: true

  alias Ringbus.Group.{Redelivery, Table}

  @config Table.config(ack_wait: 100, max_deliver: 3)

  test "a delivery is due ack_wait later; a due row is delivered again, one count more" do
    row = Redelivery.deliver(7, "a", @config, 1_000)
    assert row == {7, "a", 1_000, 1, 1_100}
    assert Redelivery.due(row, "b", @config, 1_200) == {:deliver, {7, "b", 1_200, 2, 1_300}}
  end

  test "a row delivered max_deliver times is dead, kept due ack_wait on for its dead letter" do
    row = {7, "a", 1_000, 3, 1_100}
    assert Redelivery.dead?(row, @config)
    assert Redelivery.due(row, "b", @config, 1_200) == {:dead, {7, "a", 1_000, 3, 1_300}}
    refute Redelivery.dead?(row, Table.config())
  end

  test "nack, in_progress, claim and an owner gone move the due time" do
    row = {7, "a", 1_000, 2, 1_100}
    assert Redelivery.nack(row, 0, 1_050) == {7, "a", 1_000, 2, 1_050}
    assert Redelivery.nack(row, 500, 1_050) == {7, "a", 1_000, 2, 1_550}
    assert Redelivery.in_progress(row, @config, 1_050) == {7, "a", 1_000, 2, 1_150}
    assert Redelivery.claim(row, "b", @config, 1_050) == {7, "b", 1_050, 3, 1_150}
    assert Redelivery.orphaned(row, 1_050) == {7, "a", 1_000, 2, 1_050}
    # Due already: it stays as due as it was.
    assert Redelivery.orphaned(row, 2_000) == row
  end

  test "a waiting fetch sleeps to its deadline, the next due time, or ack_wait on" do
    assert Redelivery.sleep(5_000, nil, @config, 1_000) == 100
    assert Redelivery.sleep(1_050, nil, @config, 1_000) == 50
    assert Redelivery.sleep(5_000, 1_020, @config, 1_000) == 20
    assert Redelivery.sleep(900, 1_020, @config, 1_000) == 0
  end

  test "figures: what the ring lost past the group's position counts as lost at once" do
    g = %{
      last: 4,
      pending: 2,
      redelivered: 1,
      dead: 0,
      acked: 3,
      lost: 0,
      dropped: 0,
      held: 0,
      config: @config
    }

    figures = Redelivery.figures("g", g, [{"a", 900, 2}], 8, 12, 1_000)
    assert %{delivered: 4, lost: 3, lag: 4, consumers: [%{idle_ms: 100}]} = figures
    assert figures.acked + figures.lost + figures.pending + figures.lag == 12
  end
end
