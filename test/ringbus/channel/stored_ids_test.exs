defmodule Ringbus.Channel.StoredIdsTest do
  # Every message carries its Redis stream ID (`Ringbus.Channel.Ids`),
  # reserved with its time inside its seq reservation: IDs increase in seq
  # order under concurrent producers, in every kind of row; an ID's ms is
  # the message's time; `Times.seek_id/2` finds the first message at or
  # above an ID; replicated rings given the same decisions, or a snapshot,
  # hold the same IDs; a channel created again gives later IDs.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.{GivenIds, Ids, Ring, Times}
  alias Ringbus.Test.Internals

  @max 0xFFFF_FFFF_FFFF_FFFF

  defp channel(opts) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  defp ids(ch, seqs), do: Enum.map(seqs, &Ring.stored_id(ch, &1))

  # Single rows, chunks (drop-oldest batches), batches row by row (reject;
  # drop-oldest under max_bytes).
  @kinds [
    [capacity: 200_000],
    [capacity: 200_000, overflow: :reject],
    [capacity: 200_000, max_bytes: 100_000_000]
  ]

  for opts <- @kinds do
    test "IDs increase in seq order under concurrent producers (#{inspect(opts)})" do
      name = channel(unquote(opts))
      ch = Internals.channel!(name)
      before = System.system_time(:millisecond)

      1..(2 * System.schedulers_online() + 2)
      |> Enum.map(fn p ->
        Task.async(fn ->
          for i <- 1..1_500 do
            if rem(i + p, 3) == 0,
              do: {:ok, _} = Ringbus.push_many(name, List.duplicate("b#{p}", rem(i, 5) + 2)),
              else: {:ok, _} = Ringbus.push(name, "s#{p}")
          end
        end)
      end)
      |> Task.await_many(60_000)

      after_ = System.system_time(:millisecond)
      {:ok, %{len: len, next_seq: len}} = Ringbus.info(name)
      ids = ids(ch, 0..(len - 1))
      assert Enum.all?(ids, &match?({_, _}, &1))
      assert Enum.zip(ids, tl(ids)) |> Enum.all?(fn {a, b} -> Ids.above?(b, a) end)
      assert Ids.last(ch.ids) == List.last(ids)

      {:ok, timed, 0} = Ringbus.read(name, 0, len, times: true)

      for {{_seq, _payload, ms}, {id_ms, _n}} <- Enum.zip(timed, ids) do
        assert id_ms == ms
        assert ms in before..after_
      end
    end
  end

  test "a client's ID: above the last only, Redis's refusals, auto IDs after it" do
    name = channel(capacity: 100)
    ch = Internals.channel!(name)
    assert GivenIds.push(ch, "a", {0, 0}) == {:error, :zero}
    assert GivenIds.push(ch, "a", {1, 1}) == {:ok, 0, {1, 1}}
    assert GivenIds.push(ch, "b", {1, 1}) == {:error, :not_greater}
    assert GivenIds.push(ch, "b", {1, :auto}) == {:ok, 1, {1, 2}}
    assert GivenIds.push(ch, "c", {@max, @max - 1}) == {:ok, 2, {@max, @max - 1}}
    {:ok, 3} = Ringbus.push(name, "d")
    assert ids(ch, 0..3) == [{1, 1}, {1, 2}, {@max, @max - 1}, {@max, @max}]
    assert Ringbus.push(name, "e") == {:error, :ids_exhausted}
    assert GivenIds.push(ch, "e", {@max, :auto}) == {:error, :not_greater}
    assert {:ok, [{0, "a"}, {1, "b"}, {2, "c"}, {3, "d"}], 0} = Ringbus.read(name, 0, 10)
    assert {:ok, %{pushed: 4, rejected: 1}} = Ringbus.info(name)
  end

  test "a client's ID over a full rejecting channel is refused and counted, the ID not taken" do
    ch = Internals.temp_channel!(capacity: 1, overflow: :reject)
    assert {:ok, 0, {5, 0}} = GivenIds.push(ch, "a", {5, 0})
    assert GivenIds.push(ch, "b", {6, 0}) == {:error, :full}
    assert Ids.last(ch.ids) == {5, 0}
  end

  test "clients' IDs mixed with auto IDs from concurrent producers increase in seq order" do
    name = channel(capacity: 200_000)
    ch = Internals.channel!(name)

    explicit =
      Task.async(fn ->
        for _ <- 1..2_000 do
          ms = System.system_time(:millisecond)

          case GivenIds.push(ch, "x", {ms, :auto}) do
            {:ok, _seq, _id} -> 1
            {:error, :not_greater} -> 0
          end
        end
      end)

    for p <- 1..3 do
      Task.async(fn ->
        for i <- 1..2_000 do
          if rem(i + p, 3) == 0,
            do: {:ok, _} = Ringbus.push_many(name, ["b", "b", "b"]),
            else: {:ok, _} = Ringbus.push(name, "s")
        end
      end)
    end
    |> Task.await_many(60_000)

    assert Enum.sum(Task.await(explicit, 60_000)) > 0
    {:ok, %{len: len}} = Ringbus.info(name)
    ids = ids(ch, 0..(len - 1))
    assert Enum.zip(ids, tl(ids)) |> Enum.all?(fn {a, b} -> Ids.above?(b, a) end)
  end

  test "seek_id finds the first message at or above an ID, also past the ring's start" do
    name = channel(capacity: 500)
    ch = Internals.channel!(name)

    for i <- 1..400 do
      if rem(i, 4) == 0,
        do: {:ok, _} = Ringbus.push_many(name, ["a", "b", "c"]),
        else: {:ok, _} = Ringbus.push(name, "m")
    end

    {:ok, %{first_seq: first, next_seq: next}} = Ringbus.info(name)
    assert first > 0
    held = Enum.zip(first..(next - 1), ids(ch, first..(next - 1)))

    for {seq, {ms, n} = id} <- Enum.take_every(held, 7) do
      assert Times.seek_id(ch, id) == seq
      assert Times.seek_id(ch, {ms, n + 1}) == seq + 1
      assert Times.seek_id(ch, {ms, 0}) <= seq
      assert Times.seek_id(ch, {ms + 1, 0}) > seq
    end

    assert Times.seek_id(ch, {0, 1}) == first
    assert Times.seek_id(ch, Ids.nth(Ids.last(ch.ids), 1)) == next
  end

  test "replicated rings given the same decisions, or a snapshot, hold the same IDs" do
    [a, b, c] = for _ <- 1..3, do: Internals.temp_channel!(capacity: 100)
    at = Times.at_of(System.system_time(:millisecond))

    for ch <- [a, b] do
      :ok = Ring.put_decided(ch, 0, ["x", "y", "z"], 3, 3, at)
      :ok = Ring.put_decided(ch, 3, ["w"], 1, 1, at)
      :ok = Ring.put_decided(ch, 4, ["v"], 1, 1, at + 5_000)
    end

    assert ids(a, 0..4) == ids(b, 0..4)
    [{ms, 0}, {ms, 1}, {ms, 2}, {ms, 3}, {later, 0}] = ids(a, 0..4)
    assert later == ms + 5

    for {seq, payload, at, id} <- Ring.dump_decided(a, 1),
        do: :ok = Ring.put_decided(c, seq, [payload], 1, byte_size(payload), {at, id})

    assert ids(c, 1..4) == ids(a, 1..4)
    :ok = Ring.put_decided(c, 5, ["u"], 1, 1, at)
    assert Ids.above?(Ring.stored_id(c, 5), Ring.stored_id(c, 4))
  end

  test "a channel created again gives IDs after the old ones" do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: 10)
    {:ok, _} = Ringbus.push(name, "old")
    old = Ring.stored_id(Internals.channel!(name), 0)
    :ok = Ringbus.delete(name)
    # As in Redis, an ID is later once its ms has passed.
    past(elem(old, 0))
    :ok = Ringbus.create(name, capacity: 10)
    on_exit(fn -> Ringbus.delete(name) end)
    {:ok, _} = Ringbus.push(name, "new")
    assert Ids.above?(Ring.stored_id(Internals.channel!(name), 0), old)
  end

  defp past(ms) do
    if System.system_time(:millisecond) <= ms, do: past(ms)
  end
end
