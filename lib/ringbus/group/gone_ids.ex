defmodule Ringbus.Group.GoneIds do
  @moduledoc false
  # The Redis stream IDs of entries a group still has pending when the ring
  # trims them. The ring keeps a message's ID in its row, gone with it;
  # Redis's PEL keeps IDs of entries deleted under it, and its clients name
  # them (XPENDING shows them, XCLAIM drops them, XREADGROUP's history reads
  # them as deleted). So a trim, or a delete (a tombstone at the oldest end
  # goes at once), where the channel has groups first notes, in the group
  # table, the ID of each seq it takes that some group's PEL holds:
  # `{{:gone, c, seq}, id}`. A note outlives no PEL row: the notes of
  # seqs no group has pending go at the next trim that notes, and all of a
  # channel's with its rows (`Table.drop/2`). Entries overwritten by a
  # drop-oldest push (no trim) and trims on a replicated channel are not
  # noted: those keep the name `Ringbus.Channel.IdReads.gone/1` gives.

  alias Ringbus.Channel
  alias Ringbus.Channel.{Deletes, Ids, Ring, Trim}
  alias Ringbus.Group.Table

  @doc """
  `Ring.trim/2`, first noting the IDs a group still needs, and after it
  the highest ID it removed (`Ids.removed/2`: Redis's
  max-deleted-entry-id), read before the trim: the ID of the last seq the
  trim names (an entry a holding group keeps makes the trim stop short,
  and then nothing is noted).
  """
  @spec trim(Channel.t(), Trim.t()) :: {:ok, non_neg_integer()}
  def trim(ch, trim) do
    {first, next, standing} = {Ring.first_seq(ch), Ring.next_seq(ch), Deletes.standing(ch)}
    {count, _bound} = Trim.bounds(trim, first, next, standing)
    taking(ch, first, min(first + count + standing, next), fn -> Ring.trim(ch, trim) end)
  end

  @doc "`Ring.take_oldest/3`, noting as `trim/2` does."
  @spec take_oldest(Channel.t(), non_neg_integer(), Ringbus.seq() | :infinity) ::
          non_neg_integer()
  def take_oldest(ch, n, bound \\ :infinity)

  # Nothing to take (a push that a `~` trim lets through whole): nothing to
  # look at either.
  def take_oldest(_ch, 0, _bound), do: 0

  def take_oldest(ch, n, bound) do
    {first, next} = {Ring.first_seq(ch), Ring.next_seq(ch)}
    stop = min(first + n + Deletes.standing(ch), next)
    {:ok, taken} = taking(ch, first, stop, fn -> {:ok, Ring.take_oldest(ch, n, bound)} end)
    taken
  end

  @doc """
  `Ring.delete/2`, noting the IDs a group still needs (deleted at the
  oldest end, a message goes at once) and the highest ID deleted.
  """
  @spec delete(Channel.t(), [non_neg_integer()]) :: {:ok, non_neg_integer()}
  def delete(%Channel{incarnation: c} = ch, seqs) do
    held = for seq <- seqs, id = Ring.stored_id(ch, seq), id != nil, do: {seq, id}
    if held != [] and Table.any?(Table.table(), c), do: note(ch, Enum.map(held, &elem(&1, 0)))
    {:ok, deleted} = Ring.delete(ch, seqs)
    # A message stored between the look and the delete is deleted unnoted.
    if deleted > 0 and held != [],
      do: Ids.removed(ch.ids, held |> Enum.map(&elem(&1, 1)) |> Enum.max())

    {:ok, deleted}
  end

  # Takes what `take` takes from the seqs `first..stop - 1` at most: the IDs
  # of those a group has pending noted first, and after, if everything
  # below `stop` went, the last one's as the highest removed.
  defp taking(_ch, first, stop, take) when stop <= first, do: take.()

  defp taking(%Channel{incarnation: c} = ch, first, stop, take) do
    if Table.any?(Table.table(), c), do: note(ch, first, stop)
    last = Ring.stored_id(ch, stop - 1)
    taken = take.()
    if last && Ring.first_seq(ch) >= stop, do: Ids.removed(ch.ids, last)
    taken
  end

  # Notes the IDs of the pending seqs in first..stop - 1 (or of `seqs`),
  # and forgets those of seqs no PEL holds any more.
  defp note(ch, first, stop), do: note_taken(ch, &(&1 >= first), stop)
  defp note(ch, seqs), do: note_taken(ch, &(&1 in seqs), Enum.max(seqs) + 1)

  defp note_taken(%Channel{incarnation: c} = ch, taken?, stop) do
    t = Table.table()
    pending = Table.pending_seqs(t, c, stop)

    for {{:gone, ^c, seq}, _id} <- notes(t, c),
        not MapSet.member?(pending, seq),
        do: :ets.delete(t, {:gone, c, seq})

    for seq <- pending,
        taken?.(seq),
        id = Ring.stored_id(ch, seq),
        id != nil,
        do: :ets.insert(t, {{:gone, c, seq}, id})

    :ok
  end

  defp notes(t, c), do: :ets.select(t, [{{{:gone, c, :_}, :_}, [], [:"$_"]}])

  @doc "The ID noted for `seq`, or nil."
  @spec id(Channel.t(), non_neg_integer()) :: term() | nil
  def id(%Channel{incarnation: c}, seq) do
    case :ets.lookup(Table.table(), {:gone, c, seq}) do
      [{_, id}] -> id
      [] -> nil
    end
  end

  @doc "The seq whose noted ID is `id`, or :none."
  @spec seq(Channel.t(), term()) :: non_neg_integer() | :none
  def seq(%Channel{incarnation: c}, id) do
    case :ets.select(Table.table(), [{{{:gone, c, :"$1"}, id}, [], [:"$1"]}]) do
      [seq | _] -> seq
      [] -> :none
    end
  end

  @doc "The seqs noted, with their IDs, in seq order."
  @spec all(Channel.t()) :: [{non_neg_integer(), term()}]
  def all(%Channel{incarnation: c}) do
    for {{:gone, _c, seq}, id} <- notes(Table.table(), c), do: {seq, id}
  end
end
