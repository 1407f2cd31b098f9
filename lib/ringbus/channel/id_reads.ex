defmodule Ringbus.Channel.IdReads do
  @moduledoc false
  # A channel's messages by their Redis stream IDs (`Ringbus.Channel.Ids`),
  # where the channel lives: what a front end that speaks IDs (RESP) asks
  # of `Ringbus.Op`. IDs increase in seq order, so an ID is found by binary
  # search over the seqs held (`Times.seek_id/2`), and a seq's ID by one
  # probe of its row (`Ring.stored_id/2`); nothing copies a payload it does
  # not answer.
  #
  # A seq the ring no longer holds (pulled, trimmed, overwritten) has no ID
  # left. It is named `0-<seq + 1>` (`gone/1`): below every ID held, and
  # turned back into its seq (`exact/2`), so that a front end can show and
  # take back the position of an entry a consumer group still has pending
  # after the ring dropped it.

  alias Ringbus.Channel
  alias Ringbus.Channel.{Ids, Ring, Times}

  @doc "The ID named for seq `seq`, which the ring no longer holds."
  @spec gone(non_neg_integer()) :: Ids.id()
  def gone(seq), do: {0, seq + 1}

  @doc "The ID of each seq: its stored ID, or `gone/1`'s name."
  @spec ids_of(Channel.t(), [non_neg_integer()]) :: [Ids.id()]
  def ids_of(ch, seqs), do: Enum.map(seqs, &id_of(ch, &1))

  @doc "The ID of `seq`: its stored ID, or `gone/1`'s name."
  @spec id_of(Channel.t(), non_neg_integer()) :: Ids.id()
  def id_of(ch, seq), do: Ring.stored_id(ch, seq) || gone(seq)

  # The first seq whose ID is `id` or above (the channel's next seq when
  # none is), and whether its ID is `id` exactly. An ID of the form
  # `gone/1` names, for a seq below the oldest held, that seq, exactly.
  defp exact(ch, {0, n} = id) when n > 0 do
    if n - 1 < Ring.first_seq(ch), do: {n - 1, true}, else: found(ch, id)
  end

  defp exact(ch, id), do: found(ch, id)

  defp found(ch, id) do
    seq = Times.seek_id(ch, id)
    {seq, Ring.stored_id(ch, seq) == id}
  end

  @typedoc """
  A bound an ID gives a range: `:from` (the first seq at or above it),
  `:after` (the first above), `:through` (the last at or below),
  `:before` (the last below); `:entry`, the seq of the message stored
  under it, or :none.
  """
  @type side :: :from | :after | :through | :before | :entry

  @doc "The seq each `{side, id}` bounds (`t:side/0`)."
  @spec bounds(Channel.t(), [{side(), Ids.id()}]) :: [integer() | :none]
  def bounds(ch, bounds), do: Enum.map(bounds, fn {side, id} -> bound(ch, side, id) end)

  @doc "The seq `id` bounds on `side` (`t:side/0`)."
  @spec bound(Channel.t(), side(), Ids.id()) :: integer() | :none
  def bound(ch, :entry, id), do: entry(ch, id)
  def bound(ch, :from, id), do: ch |> exact(id) |> elem(0)
  def bound(ch, :before, id), do: elem(exact(ch, id), 0) - 1
  def bound(ch, :after, id), do: beyond(ch, id)
  def bound(ch, :through, id), do: beyond(ch, id) - 1

  # The first seq above `id`: at or above the ID after it (after the
  # largest, one above every u64 pair, so past every message).
  defp beyond(ch, id), do: ch |> exact(Ids.nth(id, 1)) |> elem(0)

  @doc "The seq of the message whose ID is `id`, or :none."
  @spec entry(Channel.t(), Ids.id()) :: non_neg_integer() | :none
  def entry(ch, id) do
    case exact(ch, id) do
      {seq, true} -> seq
      {_seq, false} -> :none
    end
  end

  @doc """
  `Ring.read/3`, each message with its ID: `{seq, payload, id}`. A message
  pulled between the read and the probe of its ID gets `gone/1`'s name.
  """
  @spec read(Channel.t(), non_neg_integer(), non_neg_integer()) ::
          {[{non_neg_integer(), binary(), Ids.id()}], non_neg_integer(), non_neg_integer(),
           non_neg_integer()}
  def read(ch, from, max) do
    {messages, n, lost, next} = Ring.read(ch, from, max)
    {for({seq, payload} <- messages, do: {seq, payload, id_of(ch, seq)}), n, lost, next}
  end

  @doc """
  `info` with `:last_id` (the last ID the channel gave, `0-0` before any),
  `:first_id` (the oldest held message's ID, nil when none) and
  `:max_removed_id` (the highest ID trimmed, `Ids.removed/2`; `0-0`
  before any).
  """
  @spec put_info(map(), Channel.t()) :: map()
  def put_info(info, ch) do
    first = Ring.first_seq(ch)
    first_id = if first < Ring.next_seq(ch), do: Ring.stored_id(ch, first)

    Map.merge(info, %{
      last_id: Ids.last(ch.ids),
      first_id: first_id,
      max_removed_id: Ids.max_removed(ch.ids)
    })
  end
end
