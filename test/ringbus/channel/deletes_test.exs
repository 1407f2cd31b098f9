defmodule Ringbus.Channel.DeletesTest do
  # Deleting held messages by seq (`Ringbus.delete_messages/2`,
  # `Ringbus.Channel.Deletes`): on their own and inside a chunk, reads,
  # pulls, subscriptions and groups pass over them without counting them
  # lost, and every figure keeps `pushed == pulled + overwritten + expired +
  # deleted + len`, also with pushes, pulls, trims and deletes racing.
  use ExUnit.Case, async: true

  import Ringbus.Test.Counts, only: [balanced?: 1, info!: 1]

  alias Ringbus.Channel.Ring
  alias Ringbus.Test.Internals

  # A fresh channel, deleted when the test ends: its name and handle.
  defp channel(opts) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    {name, Internals.channel!(name)}
  end

  # What the ring table holds: a drained ring keeps no tombstone.
  defp rows(ch), do: :ets.info(ch.table, :size)

  # Pushes a, b, c, d, e one by one, or as one batch (a drop-oldest chunk).
  for {how, opts} <- [one_by_one: [overflow: :reject], one_by_one: [], chunk: []] do
    @tag how: how, opts: opts
    test "a deleted message is skipped by reads, pulls and len, counted deleted (#{how}, #{inspect(opts)})",
         ctx do
      {name, ch} = channel([capacity: 10] ++ ctx.opts)
      payloads = ~w(a b c d e)

      if ctx.how == :chunk,
        do: {:ok, 0} = Ringbus.push_many(name, payloads),
        else: for(p <- payloads, do: {:ok, _} = Ringbus.push(name, p))

      assert {:ok, 2} = Ringbus.delete_messages(name, [1, 3, 3, 10, -1])
      # Deleted already, or never held: nothing.
      assert {:ok, 0} = Ringbus.delete_messages(name, [1, 5])

      assert {:ok, [{0, "a"}, {2, "c"}, {4, "e"}], 0} = Ringbus.read(name, 0, 10)
      # A read counts messages, not seqs: two from seq 1 are c and e.
      assert {:ok, [{2, "c"}, {4, "e"}], 0} = Ringbus.read(name, 1, 2)
      assert 3 = Ringbus.len(name)
      assert %{deleted: 2, len: 3, pushed: 5, pulled: 0, overwritten: 0} = i = info!(name)
      assert balanced?(i)
      if ctx.how == :one_by_one, do: assert(i.bytes == 3)

      assert {:ok, 0, "a"} = Ringbus.pull(name)
      assert {:ok, 2, "c"} = Ringbus.pull(name)
      assert {:ok, 4, "e"} = Ringbus.pull(name)
      assert :empty = Ringbus.pull(name)

      # Passed by the tail, they count once: deleted, not pulled.
      assert %{deleted: 2, len: 0, pushed: 5, pulled: 3, overwritten: 0, bytes: 0} =
               i = info!(name)

      assert balanced?(i)
      assert rows(ch) == 0
    end
  end

  for how <- [:one_by_one, :chunk] do
    @tag how: how
    test "deleting the oldest messages moves the first seq at once, as Redis's first ID (#{how})",
         ctx do
      {name, ch} = channel(capacity: 10)

      if ctx.how == :chunk,
        do: {:ok, 0} = Ringbus.push_many(name, ~w(a b c d)),
        else: for(p <- ~w(a b c d), do: {:ok, _} = Ringbus.push(name, p))

      # 1 is not the oldest yet: it stays until 0 goes, then both are passed.
      assert {:ok, 1} = Ringbus.delete_messages(name, [1])
      assert %{first_seq: 0} = info!(name)
      assert {:ok, 1} = Ringbus.delete_messages(name, [0])
      assert %{first_seq: 2, len: 2, deleted: 2, pulled: 0, overwritten: 0} = i = info!(name)
      assert balanced?(i)
      assert {:ok, [{2, "c"}, {3, "d"}], 0} = Ringbus.read(name, 2, 10)
      if ctx.how == :one_by_one, do: assert(rows(ch) == 2)
    end
  end

  test "a trim passes deleted messages without counting them; MAXLEN counts the messages held" do
    {name, ch} = channel(capacity: 10)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c d e f))
    {:ok, 2} = Ringbus.delete_messages(name, [0, 2])

    # Four held (b d e f): MAXLEN 2 removes b and d.
    maxlen = %{strategy: {:maxlen, 2}, approx: false, limit: nil}
    assert {:ok, 2} = Ringbus.run(name, {:trim, maxlen})
    assert {:ok, [{4, "e"}, {5, "f"}], 0} = Ringbus.read(name, 4, 10)
    assert %{pulled: 2, deleted: 2, len: 2} = i = info!(name)
    assert balanced?(i)

    # MINID: the seqs below it, a deleted one among them.
    {:ok, 1} = Ringbus.delete_messages(name, [4])
    assert {:ok, 1} = Ringbus.run(name, {:trim, %{maxlen | strategy: {:min_seq, 6}}})
    assert %{pulled: 3, deleted: 3, len: 0} = i = info!(name)
    assert balanced?(i)
    assert rows(ch) == 0
  end

  for how <- [:one_by_one, :chunk] do
    @tag how: how
    test "the ring lapping deleted messages counts them deleted, not overwritten (#{how})", ctx do
      {name, ch} = channel(capacity: 4)

      push = fn ps ->
        if ctx.how == :chunk,
          do: Ringbus.push_many(name, ps),
          else: Enum.each(ps, &Ringbus.push(name, &1))
      end

      push.(~w(a b c d))
      {:ok, 2} = Ringbus.delete_messages(name, [1, 2])
      push.(~w(e f g h))

      assert %{pushed: 8, overwritten: 2, deleted: 2, len: 4} = i = info!(name)
      assert balanced?(i)
      # The lapped tombstones are gone with their messages: only e f g h stay.
      assert {:ok, [{4, "e"}, {5, "f"}, {6, "g"}, {7, "h"}], 2} = Ringbus.read(name, 2, 10)
      for _ <- 1..4, do: {:ok, _, _} = Ringbus.pull(name)
      assert rows(ch) == 0
    end
  end

  test "expiry passes a deleted message without counting it expired" do
    {name, _ch} = channel(capacity: 10, max_age: 50)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
    {:ok, 1} = Ringbus.delete_messages(name, [1])
    Process.sleep(60)
    assert {:ok, [], 3} = Ringbus.read(name, 0, 10)
    assert %{expired: 2, deleted: 1, len: 0} = i = info!(name)
    assert balanced?(i)
  end

  test "subscriptions and consumer groups pass over deleted messages without counting them lost" do
    {name, _ch} = channel(capacity: 10)
    :ok = Ringbus.Groups.create(name, "g", from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
    {:ok, 3} = Ringbus.push(name, "d")
    {:ok, 2} = Ringbus.delete_messages(name, [1, 3])

    {:ok, sub} = Ringbus.subscribe(name, from: 0)
    assert_receive {:ringbus, ^sub, [{0, "a"}, {2, "c"}], 0}, 5_000
    assert {:ok, [{0, "a", 1}, {2, "c", 1}]} = Ringbus.Groups.fetch(name, "g", "c", 10)
    assert {:ok, [%{lost: 0}]} = Ringbus.Groups.info(name)

    # Deleted past the subscription's cursor: the next batch skips it.
    {:ok, 4} = Ringbus.push(name, "e")
    {:ok, 1} = Ringbus.delete_messages(name, [4])
    {:ok, 5} = Ringbus.push(name, "f")
    assert_receive {:ringbus, ^sub, [{5, "f"}], 0}, 5_000
  end

  # Producers (single pushes and batches), pullers, a trimmer and deleters
  # of random held seqs, racing on a small ring. Each delete names one seq,
  # so the test knows which were deleted.
  for overflow <- [:drop_oldest, :reject], batch <- [1, 8] do
    @tag overflow: overflow, batch: batch, timeout: 60_000
    test "the counts stay exact with pushes, pulls, trims and deletes racing (#{overflow}, batches of #{batch})",
         ctx do
      {name, ch} = channel(capacity: 64, overflow: ctx.overflow)
      deadline = System.monotonic_time(:millisecond) + 1_500

      producers =
        for p <- 1..3, do: Task.async(fn -> produce(name, p, ctx.batch, 4_000, deadline) end)

      pullers = for _ <- 1..2, do: Task.async(fn -> pull_until(name, deadline, []) end)
      deleters = for _ <- 1..2, do: Task.async(fn -> delete_until(ch, name, deadline, []) end)
      trimmer = Task.async(fn -> trim_until(name, deadline, 0) end)

      pushed = producers |> Enum.map(&Task.await(&1, 30_000)) |> Enum.sum()
      pulled = pullers |> Enum.flat_map(&Task.await(&1, 30_000))
      deleted = deleters |> Enum.flat_map(&Task.await(&1, 30_000))
      trimmed = Task.await(trimmer, 30_000)

      pulled_seqs = MapSet.new(pulled, &elem(&1, 0))
      deleted_seqs = MapSet.new(deleted)
      assert MapSet.size(pulled_seqs) == length(pulled)
      assert MapSet.size(deleted_seqs) == length(deleted)
      # A message is pulled or deleted, never both.
      assert MapSet.disjoint?(pulled_seqs, deleted_seqs)

      {:ok, held, _lost} = Ringbus.read(name, 0, 1_000)
      assert MapSet.disjoint?(MapSet.new(held, &elem(&1, 0)), deleted_seqs)

      i = info!(name)
      assert i.pushed == pushed
      assert i.deleted == length(deleted)
      assert i.pulled == length(pulled) + trimmed
      assert i.len == length(held)
      assert i.overwritten == pushed - length(pulled) - trimmed - length(deleted) - length(held)
      if ctx.overflow == :reject, do: assert(i.overwritten == 0)
      assert balanced?(i)

      # Drained, the ring holds nothing: no tombstone outlives its seq.
      Ringbus.run(name, {:trim, %{strategy: {:maxlen, 0}, approx: false, limit: nil}})
      assert %{len: 0, deleted: d} = i = info!(name)
      assert d == length(deleted) and balanced?(i)
      assert rows(ch) == 0
    end
  end

  defp produce(name, p, batch, max, deadline, n \\ 0, ok \\ 0)

  defp produce(name, p, batch, max, deadline, n, ok) do
    if n >= max or System.monotonic_time(:millisecond) > deadline do
      ok
    else
      size = Enum.random(1..batch)
      payloads = for i <- n..(n + size - 1), do: "#{p}:#{i}"

      stored =
        case Ringbus.push_many(name, payloads) do
          {:ok, _} -> size
          {:error, :full} -> 0
        end

      produce(name, p, batch, max, deadline, n + size, ok + stored)
    end
  end

  # Runs `step` on the accumulator until the deadline; the last accumulator.
  defp until(deadline, acc, step) do
    if System.monotonic_time(:millisecond) > deadline,
      do: acc,
      else: until(deadline, step.(acc), step)
  end

  defp pull_until(name, deadline, acc) do
    until(deadline, acc, fn acc ->
      case Ringbus.pull(name) do
        {:ok, seq, payload} -> [{seq, payload} | acc]
        :empty -> acc
      end
    end)
  end

  defp delete_until(ch, name, deadline, acc) do
    until(deadline, acc, fn acc ->
      {first, next} = {Ring.first_seq(ch), Ring.next_seq(ch)}
      seq = if next > first, do: Enum.random(first..(next - 1)), else: first

      case Ringbus.delete_messages(name, [seq]) do
        {:ok, 1} -> [seq | acc]
        {:ok, 0} -> acc
      end
    end)
  end

  defp trim_until(name, deadline, acc) do
    trim = %{strategy: {:maxlen, 32}, approx: false, limit: nil}

    until(deadline, acc, fn acc ->
      {:ok, n} = Ringbus.run(name, {:trim, trim})
      acc + n
    end)
  end
end
