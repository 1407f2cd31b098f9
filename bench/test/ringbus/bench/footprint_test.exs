defmodule Ringbus.Bench.FootprintTest do
  # A replicated channel's memory and disk stay within README's bounds
  # ("Memory and disk of a durable channel") while it takes many times its
  # capacity in pushes, on real nodes with a small WAL.
  use ExUnit.Case, async: false

  alias Ringbus.Bench.Footprint

  @moduletag timeout: 180_000

  # The payloads alone are over the ETS bound: a node that kept its log in
  # memory until the WAL rolled over at Ra's default would break it.
  @small %{
    wal_max_bytes: 1_000_000,
    capacity: 10_000,
    size: 16,
    batch: 100,
    messages: 600_000,
    every: 100_000,
    seconds: 60,
    quiet: true
  }

  test "a 1 MB WAL keeps Ra's ETS, the WAL and the segments within their bounds" do
    bounds = Footprint.bounds(@small)
    assert @small.messages * @small.size > bounds.ets

    samples = Footprint.measure(1, @small)

    assert List.last(samples).pushed == @small.messages
    assert [] = for(s <- samples, s.broken, do: s)
    # The WAL rolled over into segments, and snapshots let them go.
    assert Enum.any?(samples, &(&1.segments > 0))
    assert Enum.all?(samples, &(&1.snapshots > 0))
  end

  test "Ra's default WAL, 256 MB, breaks the ETS bound a 1 MB WAL keeps" do
    samples = Footprint.measure(1, %{@small | wal_max_bytes: 256_000_000})
    bounds = Footprint.bounds(@small)

    assert Enum.any?(samples, &(&1.ets > bounds.ets))
  end

  # `mix test bench/test/ringbus/bench/footprint_test.exs --include long`
  @tag :long
  @tag timeout: 900_000
  test "millions of pushes on one node and on three stay within the bounds" do
    config = %{
      @small
      | wal_max_bytes: 4_000_000,
        capacity: 100_000,
        batch: 1000,
        messages: 2_000_000,
        every: 250_000,
        seconds: 300
    }

    for count <- [1, 3] do
      samples = Footprint.measure(count, config)
      assert List.last(samples).pushed == config.messages
      assert [] = for(s <- samples, s.broken, do: s)
    end
  end
end
