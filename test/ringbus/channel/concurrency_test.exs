defmodule Ringbus.Channel.ConcurrencyTest do
  # Many producers, pullers, readers and subscribers on one small ring at once.
  # Payloads name their producer and their index, so every delivery can be
  # checked against what was pushed.
  use ExUnit.Case, async: false

  alias Ringbus.Test.Load

  @producers 4
  @per_producer 3_000

  for overflow <- [:drop_oldest, :reject], batch <- [1, 8] do
    @tag overflow: overflow, batch: batch
    test "the concurrency contract holds (#{overflow}, batches of up to #{batch})", ctx do
      %{overflow: overflow, batch: batch} = ctx
      name = {__MODULE__, overflow, batch}
      :ok = Ringbus.create(name, capacity: 64, overflow: overflow)
      on_exit(fn -> Ringbus.delete(name) end)

      subscribers = for _ <- 1..2, do: Load.start_subscriber(name, max_credit: 16)
      readers = for _ <- 1..2, do: Load.start_reader(name)
      pullers = for _ <- 1..3, do: Load.start_puller(name)
      # A trim takes many of the oldest at once: it must claim as pulls do.
      # (With the pullers keeping the ring near empty it may find nothing;
      # the test below makes trims and pulls race on a full ring.)
      trimmer = start_trimmer(name, 0)
      pushes = Load.run_producers(name, @producers, @per_producer, batch: batch)

      # Per-producer order: each producer's seqs rise with its index.
      for {_producer, seqs} <- pushes.seqs_by_producer do
        assert seqs == Enum.sort(seqs) and seqs == Enum.uniq(seqs)
      end

      next_seq = Ringbus.info(name) |> elem(1) |> Map.fetch!(:next_seq)
      pulled = Enum.map(pullers, &Load.stop(&1, next_seq))
      trimmed = stop_trimmer(trimmer)
      all_pulled = Enum.concat(pulled)
      pulled_seqs = Enum.map(all_pulled, fn {seq, _} -> seq end)

      # No message is pulled twice, each puller sees seqs in order, and every
      # pulled payload is the one pushed under that seq.
      assert length(pulled_seqs) == length(Enum.uniq(pulled_seqs))

      for seqs <- pulled,
          do: assert(Enum.map(seqs, &elem(&1, 0)) == Enum.sort(Enum.map(seqs, &elem(&1, 0))))

      for {seq, payload} <- all_pulled, do: assert(Map.fetch!(pushes.by_seq, seq) == payload)

      {:ok, held, _lost} = Ringbus.read(name, 0, 1_000)
      held_seqs = MapSet.new(held, &elem(&1, 0))
      assert MapSet.disjoint?(held_seqs, MapSet.new(pulled_seqs))
      for {seq, payload} <- held, do: assert(Map.fetch!(pushes.by_seq, seq) == payload)

      # Every message is delivered, held, or counted.
      {:ok, info} = Ringbus.info(name)
      assert info.pushed == pushes.ok
      assert info.rejected == pushes.full
      assert info.pulled == length(all_pulled) + trimmed
      assert info.len == length(held)
      assert info.overwritten == pushes.ok - length(all_pulled) - trimmed - length(held)
      if overflow == :reject, do: assert(info.overwritten == 0)

      # Readers and subscribers account for every seq: seen or counted lost.
      for reader <- readers ++ subscribers do
        {seen, lost, cursor} = Load.stop(reader, next_seq)
        assert cursor == next_seq
        # A seq skipped for a stalled producer holds no message.
        assert (map_size(seen) + lost) in (next_seq - info.skipped)..next_seq
        for {seq, payload} <- seen, do: assert(Map.fetch!(pushes.by_seq, seq) == payload)
      end
    end
  end

  test "subscribers and readers see every message when the ring never fills" do
    name = {__MODULE__, :roomy}
    :ok = Ringbus.create(name, capacity: @producers * @per_producer)
    on_exit(fn -> Ringbus.delete(name) end)

    subscribers = for n <- [1, 16, 1000], do: Load.start_subscriber(name, max_credit: n)
    reader = Load.start_reader(name)
    pushes = Load.run_producers(name, @producers, @per_producer)
    assert pushes.ok == @producers * @per_producer

    # A producer descheduled past the stall bound (a loaded machine) has
    # its seq given up on, and stores its message again under a new one:
    # such a seq holds nothing, and every message is still seen.
    {:ok, %{next_seq: next_seq, skipped: skipped}} = Ringbus.info(name)
    assert next_seq == pushes.ok + skipped

    for pid <- [reader | subscribers] do
      # A seq given up on may be counted lost by who gave up on it.
      assert {seen, lost, cursor} = Load.stop(pid, next_seq)
      assert lost <= skipped
      assert cursor == next_seq
      assert seen == pushes.by_seq
    end
  end

  # Batches of 64 are stored as chunks, which a trim takes a run of seqs
  # of at once while pulls take single messages out of them.
  for batch <- [1, 64] do
    @tag batch: batch
    test "trims and pulls racing on a full ring take every message once (batches of #{batch})",
         %{batch: batch} do
      trims_and_pulls(batch)
    end
  end

  defp trims_and_pulls(batch) do
    name = {__MODULE__, :trims, batch}
    :ok = Ringbus.create(name, capacity: 20_000)
    on_exit(fn -> Ringbus.delete(name) end)

    for from <- 0..9_999//batch do
      to = min(from + batch, 10_000) - 1
      {:ok, ^from} = Ringbus.push_many(name, Enum.map(from..to, &"m#{&1}"))
    end

    # Whole nodes of 100 at a time, and one trim before the race begins.
    trim = %{strategy: {:maxlen, 0}, approx: true, limit: 100}
    {:ok, first} = Ringbus.run(name, {:trim, trim})
    assert first == 100

    trimmer = start_trimmer(name, first, trim)
    pullers = for _ <- 1..3, do: Load.start_puller(name)
    pulled = Enum.flat_map(pullers, &Load.stop(&1, 10_000))
    trimmed = stop_trimmer(trimmer)

    seqs = Enum.map(pulled, &elem(&1, 0))
    assert length(seqs) == length(Enum.uniq(seqs))
    for {seq, payload} <- pulled, do: assert(payload == "m#{seq}")
    assert length(pulled) + trimmed == 10_000
    {:ok, info} = Ringbus.info(name)
    assert {info.pulled, info.len, info.overwritten} == {10_000, 0, 0}
  end

  # Trims the channel (to nothing), again and again until stopped; answers
  # how many it took in all, from `taken`.
  defp start_trimmer(name, taken, trim \\ %{strategy: {:maxlen, 0}, approx: false, limit: nil}),
    do: spawn_link(fn -> trim_loop(name, trim, taken) end)

  defp trim_loop(name, trim, taken) do
    {:ok, n} = Ringbus.run(name, {:trim, trim})

    receive do
      {:stop, from} -> send(from, {:trimmed, taken + n})
    after
      0 -> trim_loop(name, trim, taken + n)
    end
  end

  defp stop_trimmer(pid) do
    send(pid, {:stop, self()})
    assert_receive {:trimmed, taken}, 5_000
    taken
  end
end
