defmodule Ringbus.Channel.IdsTest do
  # A channel's Redis stream IDs: auto IDs after the last, at the time or
  # later; explicit IDs under Redis's rules and refusals; wide IDs beyond
  # the packing; unique and increasing under concurrent reservations.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.Ids

  @max 0xFFFF_FFFF_FFFF_FFFF

  test "auto IDs: the time with counter 0, then counters within a ms, never backwards" do
    ids = Ids.new()
    assert Ids.last(ids) == {0, 0}
    assert Ids.reserve(ids, 1, 1_000) == {:ok, {1_000, 0}}
    assert Ids.reserve(ids, 3, 1_000) == {:ok, {1_000, 1}}
    assert Ids.last(ids) == {1_000, 3}
    # A clock that went back still gets IDs after the last.
    assert Ids.reserve(ids, 1, 999) == {:ok, {1_000, 4}}
    assert Ids.reserve(ids, 2, 1_005) == {:ok, {1_005, 0}}
    assert Ids.last(ids) == {1_005, 1}
  end

  test "a batch's counter never carries into the next ms: it starts there" do
    ids = Ids.new()
    t = System.system_time(:millisecond)
    counters = Ids.packed_per_ms()
    assert {:ok, {^t, 0}} = Ids.reserve(ids, counters - 2, t)
    assert Ids.reserve(ids, 5, t) == {:ok, {t + 1, 0}}
    assert Ids.nth({t + 1, 0}, 4) == {t + 1, 4}
    assert Ids.last(ids) == {t + 1, 4}
    # A batch of more than a ms holds: its counters go on, and so do the next.
    assert Ids.reserve(ids, counters + 1, t) == {:ok, {t + 1, 5}}
    assert Ids.last(ids) == {t + 1, counters + 5}
    assert Ids.reserve(ids, 1, t) == {:ok, {t + 1, counters + 6}}
    assert Ids.reserve(ids, 1, t + 2) == {:ok, {t + 2, 0}}
  end

  test "a stamp of this century's IDs is a small integer: a reservation builds no bignum" do
    now = System.system_time(:millisecond)
    packed = Ids.pack({now, Ids.packed_per_ms() - 1})
    assert is_integer(packed) and :erts_debug.flat_size(packed) == 0
    ids = Ids.new()
    {:ok, _} = Ids.reserve(ids, 3, now)
    assert :erts_debug.flat_size(:atomics.get(ids, 1)) == 0
    # Below the epoch or beyond the counters: wide, and still right.
    assert Ids.pack({1, 1}) == :wide
    assert Ids.pack({now, Ids.packed_per_ms()}) == :wide
  end

  test "explicit IDs: above the last only, 0-0 refused, ms-* takes the next counter" do
    ids = Ids.new()
    assert Ids.reserve_explicit(ids, {0, 0}) == {:error, :zero}
    assert Ids.reserve_explicit(ids, {0, :auto}) == {:ok, {0, 1}}
    assert Ids.reserve_explicit(ids, {1, 1}) == {:ok, {1, 1}}
    assert Ids.reserve_explicit(ids, {1, 1}) == {:error, :not_greater}
    assert Ids.reserve_explicit(ids, {0, 5}) == {:error, :not_greater}
    assert Ids.reserve_explicit(ids, {1, :auto}) == {:ok, {1, 2}}
    assert Ids.reserve_explicit(ids, {0, :auto}) == {:error, :not_greater}
    assert Ids.reserve_explicit(ids, {5, :auto}) == {:ok, {5, 0}}
    # Auto IDs after an explicit one in the future stay after it.
    assert Ids.reserve_explicit(ids, {9_000, 3}) == {:ok, {9_000, 3}}
    assert Ids.reserve(ids, 1, 10) == {:ok, {9_000, 4}}
  end

  test "wide IDs: beyond the packing, explicit and auto, up to exhaustion" do
    ids = Ids.new()
    assert Ids.reserve_explicit(ids, {1, 0x40_0000}) == {:ok, {1, 0x40_0000}}
    assert Ids.last(ids) == {1, 0x40_0000}
    assert Ids.reserve(ids, 2, 1) == {:ok, {1, 0x40_0001}}
    assert Ids.last(ids) == {1, 0x40_0002}
    assert Ids.reserve_explicit(ids, {1, 5}) == {:error, :not_greater}
    assert Ids.reserve_explicit(ids, {2, 0}) == {:ok, {2, 0}}

    assert Ids.reserve_explicit(ids, {@max, @max - 1}) == {:ok, {@max, @max - 1}}
    assert Ids.reserve(ids, 2, 5) == {:error, :exhausted}
    assert Ids.reserve(ids, 1, 5) == {:ok, {@max, @max}}
    assert Ids.reserve(ids, 1, 5) == {:error, :exhausted}
    assert Ids.reserve_explicit(ids, {@max, :auto}) == {:error, :not_greater}
    assert Ids.last(ids) == {@max, @max}
  end

  test "a counter at the largest u64 goes on in the next ms" do
    ids = Ids.new()
    assert Ids.reserve_explicit(ids, {3, @max}) == {:ok, {3, @max}}
    assert Ids.reserve_explicit(ids, {3, :auto}) == {:error, :not_greater}
    assert Ids.reserve(ids, 2, 1) == {:ok, {4, 0}}
    assert Ids.nth({3, @max}, 2) == {4, 1}
  end

  test "set moves the last ID either way, packed or wide" do
    ids = Ids.new()
    assert {:ok, _} = Ids.reserve(ids, 1, 500)
    assert Ids.set(ids, {@max, 1}) == :ok
    assert Ids.last(ids) == {@max, 1}
    assert Ids.set(ids, {100, 0}) == :ok
    assert Ids.last(ids) == {100, 0}
    assert Ids.reserve(ids, 1, 50) == {:ok, {100, 1}}
  end

  test "concurrent reservations, packed and wide, give IDs that never repeat" do
    ids = Ids.new()

    # Half the processes force the stamp wide now and then.
    tasks =
      for p <- 1..8 do
        Task.async(fn ->
          Enum.flat_map(1..2_000, fn i ->
            now = System.os_time(:millisecond)
            count = rem(i, 3) + 1

            if rem(p, 2) == 0 and rem(i, 500) == 0 do
              case Ids.reserve_explicit(ids, {now + 1, Bitwise.bsl(1, 23) + i}) do
                {:ok, id} -> [id]
                {:error, :not_greater} -> []
              end
            else
              {:ok, first} = Ids.reserve(ids, count, now)
              for k <- 0..(count - 1), do: Ids.nth(first, k)
            end
          end)
        end)
      end

    all = Enum.flat_map(tasks, &Task.await(&1, 30_000))
    assert MapSet.size(MapSet.new(all)) == Enum.count(all)
    assert Ids.last(ids) == Enum.max(all)
  end
end
