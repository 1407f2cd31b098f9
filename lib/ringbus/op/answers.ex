defmodule Ringbus.Op.Answers do
  @moduledoc false
  # What `Ringbus.Op` answers a front end that speaks Redis stream IDs: the
  # operations on IDs, a push's first ID, and a group answer's seqs as IDs
  # (`Ringbus.Group.ByIds`), read on this member's ring. A replicated
  # channel's answer comes from its leader; this member has applied what it
  # names, or soon will: its IDs are read here once it has, waiting 1 ms at
  # a time, at most @apply_waits times.

  alias Ringbus.Channel.{GivenIds, IdReads, Ids, Ring}
  require Ids
  alias Ringbus.Group.ByIds

  @apply_waits 100

  @doc """
  A push's answer with its first ID, probed where it was stored: a
  message pulled or overwritten meanwhile gets `IdReads.gone/1`'s name.
  """
  def with_ids(channel, {:ok, seq}) when is_integer(seq),
    do: {:ok, seq, IdReads.id_of(channel, seq)}

  def with_ids(channel, {:ok, results}) when is_list(results),
    do: {:ok, Enum.map(results, &with_ids(channel, &1))}

  def with_ids(_channel, refused), do: refused

  @doc "`with_ids/2` of a replicated push, once this member has applied it."
  def replicated_ids(channel, pushed) do
    applied(channel, newest(pushed), @apply_waits)
    with_ids(channel, pushed)
  end

  @doc """
  The answer to an operation on IDs where the channel lives: `{:ids_of,
  seqs}`, `{:id_bounds, bounds}` (`IdReads`), `{:set_id, id}`
  (`GivenIds.set/2`); `{:error, :badarg}` for a malformed one.
  """
  def id_op(channel, {:ids_of, seqs}) when is_list(seqs) do
    if Enum.all?(seqs, &(is_integer(&1) and &1 >= 0)),
      do: {:ok, IdReads.ids_of(channel, seqs)},
      else: {:error, :badarg}
  end

  def id_op(channel, {:id_bounds, bounds}) when is_list(bounds) do
    if Enum.all?(bounds, &bound?/1),
      do: {:ok, IdReads.bounds(channel, bounds)},
      else: {:error, :badarg}
  end

  def id_op(channel, {:set_id, id}) when Ids.is_id(id), do: GivenIds.set(channel, id)
  def id_op(_channel, _op), do: {:error, :badarg}

  defp bound?({side, id}) when side in [:from, :after, :through, :before, :entry],
    do: Ids.is_id(id)

  defp bound?(_bound), do: false

  @doc "A group request's outcome with IDs for its seqs (`ByIds.answer/3`)."
  def ided(channel, request, {:reply, answer}),
    do: {:reply, ByIds.answer(channel, request, answer)}

  def ided(channel, request, {:wait, fun}) do
    {:wait,
     fn ->
       answer = fun.()
       if channel.replica, do: applied(channel, newest(answer), @apply_waits)
       ByIds.answer(channel, request, answer)
     end}
  end

  defp applied(channel, seq, waits) do
    if Ring.next_seq(channel) <= seq and waits > 0 do
      Process.sleep(1)
      applied(channel, seq, waits - 1)
    end
  end

  # The newest seq an answer names: a push's, a batch's results', a group
  # answer's messages' (or seqs'); -1 for none.
  defp newest({:ok, seq}) when is_integer(seq), do: seq
  defp newest({:ok, {_next, claimed, _deleted}}) when is_list(claimed), do: newest({:ok, claimed})
  defp newest({:ok, items}) when is_list(items), do: Enum.reduce(items, -1, &max(seq_of(&1), &2))
  defp newest(_answer), do: -1

  defp seq_of({:ok, seq}) when is_integer(seq), do: seq
  defp seq_of({seq, _payload}) when is_integer(seq), do: seq
  defp seq_of(seq) when is_integer(seq), do: seq
  defp seq_of(_other), do: -1
end
