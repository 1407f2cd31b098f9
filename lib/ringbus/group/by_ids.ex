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
  # leave a list. In an answer, each seq becomes its message's ID, or for a
  # message the ring no longer holds, `IdReads.gone/1`'s name.

  alias Ringbus.Channel
  alias Ringbus.Channel.IdReads

  @doc "`request` with its IDs as seqs."
  @spec resolve(Channel.t(), term()) :: term()
  def resolve(ch, {:id, side, id}) when side in [:from, :after, :through, :before],
    do: IdReads.bound(ch, side, id)

  def resolve(ch, {:entry, id}), do: IdReads.entry(ch, id)

  def resolve(ch, list) when is_list(list),
    do: for(item <- list, (seq = resolve(ch, item)) != :none, do: seq)

  def resolve(ch, %{} = map), do: Map.new(map, fn {k, v} -> {k, resolve(ch, v)} end)

  def resolve(ch, tuple) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> Enum.map(&resolve(ch, &1)) |> List.to_tuple()

  def resolve(_ch, other), do: other

  @doc "The answer to `request` (resolved) with IDs for its seqs."
  @spec answer(Channel.t(), term(), term()) :: term()
  def answer(ch, request, {:ok, answer}), do: {:ok, ided(ch, elem(request, 0), answer)}
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
  defp id(ch, seq), do: IdReads.id_of(ch, seq)
end
