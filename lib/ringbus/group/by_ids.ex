defmodule Ringbus.Group.ByIds do
  @moduledoc false
  # A group request in Redis stream IDs (`Ringbus.Channel.Ids`), for a
  # front end that speaks them (RESP): `resolve/2` turns the IDs it gives
  # into the seqs the request takes, and `answer/3` the seqs of its answer
  # into IDs, both where the channel lives, so that a request by IDs is
  # still one request there (one link round trip from another node).
  #
  # In a request, `{:id, side, id}` is a position (`IdReads.bound/3`) and
  # `{:entry, id}` the message stored under `id`; entries that name none
  # leave a list. In an answer, each seq becomes its message's ID; for a
  # message the ring no longer holds, the ID noted when it was trimmed
  # (`Ringbus.Group.GoneIds`), else `IdReads.gone/1`'s name. Both kinds of
  # dropped entry are in a range that starts below the oldest held.

  alias Ringbus.Channel
  alias Ringbus.Channel.{IdReads, Ids, Ring}
  alias Ringbus.Group.GoneIds

  @doc "`request` with its IDs as seqs."
  @spec resolve(Channel.t(), term()) :: term()
  def resolve(ch, {:id, side, id}) when side in [:from, :after, :through, :before],
    do: below_held(ch, side, id, IdReads.bound(ch, side, id))

  def resolve(ch, {:entry, id}) do
    case IdReads.entry(ch, id) do
      :none -> GoneIds.seq(ch, id)
      seq -> seq
    end
  end

  def resolve(ch, list) when is_list(list),
    do: for(item <- list, (seq = resolve(ch, item)) != :none, do: seq)

  def resolve(ch, %{} = map), do: Map.new(map, fn {k, v} -> {k, resolve(ch, v)} end)

  def resolve(ch, tuple) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> Enum.map(&resolve(ch, &1)) |> List.to_tuple()

  def resolve(_ch, other), do: other

  # A range that starts at or below the oldest message held starts at the
  # first seq the ring dropped whose ID (noted, or its name) is in it.
  defp below_held(ch, side, id, seq) when side in [:from, :after] do
    first = Ring.first_seq(ch)

    if seq <= first do
      noted = for {s, gone} <- GoneIds.all(ch), s < first, in_range?(side, gone, id), do: s
      Enum.min([seq | noted ++ named(side, id, first)])
    else
      seq
    end
  end

  defp below_held(_ch, _side, _id, seq), do: seq

  defp in_range?(:from, gone, id), do: not Ids.above?(id, gone)
  defp in_range?(:after, gone, id), do: Ids.above?(gone, id)

  # The first seq below `first` whose name `0-<seq + 1>` is in the range.
  defp named(:from, {0, 0}, first) when first > 0, do: [0]
  defp named(:from, {0, n}, first) when n - 1 < first, do: [n - 1]
  defp named(:after, {0, n}, first) when n < first, do: [n]
  defp named(_side, _id, _first), do: []

  @doc "The answer to `request` (resolved) with IDs for its seqs."
  @spec answer(Channel.t(), term(), term()) :: term()
  def answer(ch, request, {:ok, answer}) when is_tuple(request),
    do: {:ok, ided(ch, elem(request, 0), answer)}

  def answer(_ch, _request, answer), do: answer

  defp ided(ch, kind, messages) when kind in [:read, :take, :history, :claim],
    do: listed(ch, messages)

  defp ided(ch, :autoclaim, {next, claimed, deleted}),
    do: {next && id(ch, next), listed(ch, claimed), ids(ch, deleted)}

  defp ided(ch, :pending, {total, low, high, counts}),
    do: {total, id(ch, low), id(ch, high), counts}

  defp ided(ch, :pending, rows) when is_list(rows),
    do: for({seq, owner, idle, n} <- rows, do: {id(ch, seq), owner, idle, n})

  defp ided(ch, :groups, groups), do: Enum.map(groups, &group(ch, &1))
  defp ided(ch, :info, group), do: last_id(ch, group)
  defp ided(_ch, _kind, answer), do: answer

  defp group(ch, g) do
    consumers =
      for c <- g.consumers,
          do: %{c | entries: for({seq, time, n} <- c.entries, do: {id(ch, seq), time, n})}

    entries = for {seq, c, time, n} <- g.entries, do: {id(ch, seq), c, time, n}
    last_id(ch, %{g | entries: entries, consumers: consumers})
  end

  # A group's last delivered entry's ID, nil before any.
  defp last_id(ch, %{last: last} = g), do: Map.put(g, :last_id, if(last >= 0, do: id(ch, last)))

  # Messages `{seq, payload}` (payload nil for one gone) with their IDs; seqs alone, their IDs.
  defp listed(ch, messages) do
    Enum.map(messages, fn
      {seq, payload} -> {seq, payload, id(ch, seq)}
      seq -> id(ch, seq)
    end)
  end

  defp ids(ch, seqs), do: Enum.map(seqs, &id(ch, &1))
  defp id(ch, seq), do: Ring.stored_id(ch, seq) || GoneIds.id(ch, seq) || IdReads.gone(seq)
end
