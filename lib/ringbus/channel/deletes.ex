defmodule Ringbus.Channel.Deletes do
  @moduledoc false
  # Tombstones: messages deleted from the middle of a ring (RESP's XDEL,
  # `Ringbus.delete_messages/2`), which reads skip and nothing counts lost.
  # `Ringbus.Channel.Ring` calls these; they never call it.
  #
  # A tombstone keeps its seq's place in the ring until the tail passes it:
  # it frees the message's bytes, not a place in the capacity, so the
  # cursors and the counts that follow from them stay as they are. Two
  # `:atomics` slots of the channel, after `Ringbus.Channel.Hold`'s, count
  #
  #   deleted  tombstones made (`info/1`'s `deleted`)
  #   passed   tombstones the tail has passed (a pull, trim, overwrite or
  #            expiry that claimed their seq and found one)
  #
  # so that `len` is the seqs held less the tombstones standing (deleted -
  # passed), and `overwritten` leaves out the tombstones passed: `pushed ==
  # pulled + overwritten + expired + deleted + len` still holds. Whoever
  # removes a tombstone from the table counts it passed, and each is
  # removed once (`:ets.take` or `select_delete` of it), so none counts
  # twice.
  #
  # Where a tombstone lives. A message stored on its own is replaced by
  # `{seq, :deleted, at, id}`, atomically with `select_replace`: a claimer's
  # take finds the message or the tombstone, never both, and its payload
  # goes at once. It keeps its time and ID, so that a search over times or
  # IDs probes it as a message (the read from there skips it), and a
  # replicated channel's snapshot carries it (`Ring.dump_decided/2`). A message inside a chunk (a drop-oldest batch stored as one
  # object) cannot be cut out of it without racing the pulls that count the
  # chunk down, and cutting it would cost a copy of the rest; so it gets a
  # row `{{:deleted, seq}}` beside the chunk. Tuple keys sort after every
  # number, so no walk of the ring's seqs, chunks or reservations meets
  # one; they are looked up only while a tombstone stands (deleted >
  # passed), and whoever claims their seq takes them (a pull, a trim, an
  # expiry, or a push that overwrites), never whoever drops the chunk. The
  # payload stays in the chunk until the chunk goes, as a pulled one does.
  #
  # A chunk's tombstone and a claim of its seq exclude each other as a
  # mark and a late producer do (`Ring`'s "Stalls"): the deleter counts
  # its tombstone, then looks at the tail; the claimer moves the tail, then
  # looks for a tombstone. If the deleter finds the seq claimed, it takes
  # its tombstone back, unless the claimer took it first (then the message
  # is deleted, and the claimer went past it).

  alias Ringbus.Channel
  alias Ringbus.Channel.Payloads

  @deleted 14
  @passed 15

  @doc "The last `:atomics` slot this module uses: the ring makes that many."
  @spec last_slot() :: pos_integer()
  def last_slot, do: @passed

  @doc "Tombstones made, and passed by the tail."
  @spec counts(Channel.t()) :: {non_neg_integer(), non_neg_integer()}
  def counts(%Channel{atomics: a}), do: {:atomics.get(a, @deleted), :atomics.get(a, @passed)}

  @doc "How many tombstones stand (made, not passed yet)."
  @spec standing(Channel.t()) :: non_neg_integer()
  def standing(%Channel{atomics: a}) do
    passed = :atomics.get(a, @passed)
    max(:atomics.get(a, @deleted) - passed, 0)
  end

  @doc "Whether a tombstone may stand: the only case anyone looks for one."
  @spec standing?(Channel.t()) :: boolean()
  def standing?(%Channel{atomics: a}) do
    # Every tombstone is counted deleted before it goes in, and passed after
    # it goes: read in this order, a tombstone in the table all along is
    # never missed.
    passed = :atomics.get(a, @passed)
    :atomics.get(a, @deleted) > passed
  end

  @doc """
  Replaces the message stored on its own under `seq` with a tombstone:
  `{:ok, bytes}` freed, or `:none` when no message stands there.
  """
  @spec delete_row(Channel.t(), non_neg_integer()) :: {:ok, non_neg_integer()} | :none
  def delete_row(%Channel{table: t, atomics: a}, seq) do
    with payload when is_binary(payload) <- payload(t, seq) do
      # Counted first, so that `deleted - passed` never misses a tombstone.
      :atomics.add(a, @deleted, 1)

      spec = [
        {{seq, :"$1", :"$2", :"$3"}, [{:is_binary, :"$1"}], [{{seq, :deleted, :"$2", :"$3"}}]}
      ]

      if :ets.select_replace(t, spec) == 1 do
        {:ok, byte_size(payload)}
      else
        uncount(a)
        :none
      end
    else
      _ -> :none
    end
  end

  @doc """
  A tombstone for `seq` inside a chunk, once `claimed?` (read after it is
  in) says the seq is not claimed: true when it stands.
  """
  @spec delete_in_chunk(Channel.t(), non_neg_integer(), (() -> boolean())) :: boolean()
  def delete_in_chunk(%Channel{table: t, atomics: a}, seq, claimed?) do
    :atomics.add(a, @deleted, 1)

    if :ets.insert_new(t, {{:deleted, seq}}) do
      cond do
        not claimed?.() -> true
        # Its claimer has not seen it: it took the message.
        :ets.select_delete(t, [{{{:deleted, seq}}, [], [true]}]) == 1 -> uncount(a)
        # Its claimer took it, and went past the message.
        true -> true
      end
    else
      uncount(a)
    end
  end

  defp uncount(a) do
    :atomics.sub(a, @deleted, 1)
    false
  end

  @doc "A row tombstone the tail passed was taken: counts it."
  @spec passed(Channel.t(), non_neg_integer()) :: :ok
  def passed(_ch, 0), do: :ok
  def passed(%Channel{atomics: a}, n), do: :atomics.add(a, @passed, n)

  @doc """
  Takes the tombstone of chunk seq `seq`, claimed by the caller: true if
  there was one (the message is not the caller's).
  """
  @spec take(Channel.t(), non_neg_integer()) :: boolean()
  def take(%Channel{table: t} = ch, seq) do
    standing?(ch) and :ets.take(t, {:deleted, seq}) != [] and passed(ch, 1) == :ok
  end

  @doc "Takes the tombstones of chunk seqs `first..last`: how many there were."
  @spec take_range(Channel.t(), non_neg_integer(), non_neg_integer()) :: non_neg_integer()
  def take_range(%Channel{table: t} = ch, first, last) do
    if standing?(ch) do
      spec = [{{{:deleted, :"$1"}}, [{:>=, :"$1", first}, {:"=<", :"$1", last}], [true]}]
      n = :ets.select_delete(t, spec)
      passed(ch, n)
      n
    else
      0
    end
  end

  @doc "Whether `seq` holds a tombstone, on its own or in a chunk."
  @spec deleted?(Channel.t(), non_neg_integer()) :: boolean()
  def deleted?(%Channel{table: t} = ch, seq) do
    standing?(ch) and
      (:ets.member(t, {:deleted, seq}) or match?([{_, :deleted, _, _}], :ets.lookup(t, seq)))
  end

  @doc "Whether chunk seq `seq` has a tombstone, for a reader (which takes nothing)."
  @spec in_chunk?(Channel.t(), non_neg_integer()) :: boolean()
  def in_chunk?(%Channel{table: t} = ch, seq),
    do: standing?(ch) and :ets.member(t, {:deleted, seq})

  @doc """
  The messages of `chunk` in `seqs` but the deleted, onto `acc` newest
  first, and how many they are.
  """
  @spec slices(Channel.t(), tuple(), Range.t(), list()) :: {list(), non_neg_integer()}
  def slices(ch, chunk, seqs, acc) do
    Enum.reduce(seqs, {acc, 0}, fn seq, {acc, got} ->
      if in_chunk?(ch, seq),
        do: {acc, got},
        else: {[{seq, Payloads.slice(chunk, seq)} | acc], got + 1}
    end)
  end

  defp payload(t, seq) do
    :ets.lookup_element(t, seq, 2)
  rescue
    ArgumentError -> nil
  end
end
