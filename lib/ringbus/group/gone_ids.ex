defmodule Ringbus.Group.GoneIds do
  @moduledoc false
  # The Redis stream IDs of entries a group still has pending when the ring
  # trims them. The ring keeps a message's ID in its row, gone with it;
  # Redis's PEL keeps IDs of entries deleted under it, and its clients name
  # them (XPENDING shows them, XCLAIM drops them, XREADGROUP's history reads
  # them as deleted). So a trim where the channel has groups first notes, in
  # the group table, the ID of each seq it takes that some group's PEL
  # holds: `{{:gone, c, seq}, id}`. A note outlives no PEL row: the notes of
  # seqs no group has pending go at the next trim that notes, and all of a
  # channel's with its rows (`Table.drop/2`). Entries overwritten by a
  # drop-oldest push (no trim) and trims on a replicated channel are not
  # noted: those keep the name `Ringbus.Channel.IdReads.gone/1` gives.

  alias Ringbus.Channel
  alias Ringbus.Channel.{Ids, Ring, Trim}
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
    first = Ring.first_seq(ch)
    n = Trim.count(trim, first, Ring.next_seq(ch))
    last = before_taking(ch, first, n)
    {:ok, removed} = Ring.trim(ch, trim)
    if last && removed == n, do: Ids.removed(ch.ids, last)
    {:ok, removed}
  end

  @doc "`Ring.take_oldest/2`, noting as `trim/2` does."
  @spec take_oldest(Channel.t(), non_neg_integer()) :: non_neg_integer()
  def take_oldest(ch, n) do
    last = before_taking(ch, Ring.first_seq(ch), n)
    taken = Ring.take_oldest(ch, n)
    if last && taken == n, do: Ids.removed(ch.ids, last)
    taken
  end

  # The ID of the last of the `n` seqs from `first`, once the IDs of those
  # a group has pending are noted.
  defp before_taking(_ch, _first, 0), do: nil

  defp before_taking(%Channel{incarnation: c} = ch, first, n) do
    if Table.any?(Table.table(), c), do: note(ch, first, first + n)
    Ring.stored_id(ch, first + n - 1)
  end

  # Notes the IDs of the pending seqs in first..stop - 1, and forgets
  # those of seqs no PEL holds any more.
  defp note(%Channel{incarnation: c} = ch, first, stop) do
    t = Table.table()
    pending = Table.pending_seqs(t, c, stop)

    for {{:gone, ^c, seq}, _id} <- notes(t, c),
        not MapSet.member?(pending, seq),
        do: :ets.delete(t, {:gone, c, seq})

    for seq <- pending,
        seq >= first,
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
