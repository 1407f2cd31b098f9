defmodule Ringbus.Cluster.OutboxTest do
  use ExUnit.Case, async: true

  alias Ringbus.Cluster.Outbox

  test "holds items in order within its bound, and says when one does not fit" do
    {:ok, box} = Outbox.new(100) |> Outbox.push(:a, 40)
    {:ok, box} = Outbox.push(box, :b, 60)
    assert Outbox.bytes(box) == 100
    assert Outbox.full?(box)
    assert Outbox.push(box, :c, 1) == :full

    assert {[:a, :b], 100, rest} = Outbox.take(box, 1_000)
    assert Outbox.empty?(rest) and Outbox.bytes(rest) == 0
  end

  test "an empty outbox takes one item of any size" do
    assert {:ok, box} = Outbox.new(10) |> Outbox.push(:huge, 500)
    assert Outbox.push(box, :b, 1) == :full
  end

  test "forced items go in past the bound" do
    {:ok, box} = Outbox.new(10) |> Outbox.push(:a, 10)
    box = Outbox.force_push(box, :close, 64)
    assert Outbox.bytes(box) == 74
    assert Outbox.push(box, :b, 1) == :full
    assert {[:a, :close], 74, _} = Outbox.take(box, 1_000)
  end

  test "a batch takes items while they fit, and at least one" do
    box = Enum.reduce(1..5, Outbox.new(1_000), fn i, box -> Outbox.force_push(box, i, 30) end)

    assert {[1, 2, 3], 90, rest} = Outbox.take(box, 100)
    assert {[4, 5], 60, rest} = Outbox.take(rest, 100)
    assert Outbox.empty?(rest)

    big = Outbox.force_push(Outbox.new(10), :huge, 500)
    assert {[:huge], 500, _} = Outbox.take(big, 100)
    assert {[], 0, _} = Outbox.take(Outbox.new(10), 100)
  end

  test "a batch not sent leaves the outbox it was cut from as it was" do
    box = Enum.reduce(1..3, Outbox.new(1_000), fn i, box -> Outbox.force_push(box, i, 10) end)
    {_batch, _bytes, _rest} = Outbox.take(box, 15)
    assert {[1, 2, 3], 30, _} = Outbox.take(box, 1_000)
  end
end
