defmodule Ringbus.Replica.StreamIds do
  @moduledoc false
  # A replicated channel's Redis stream IDs (`Ringbus.Channel.Ids`), decided
  # in its Raft log from machine version 6 (`Ringbus.Replica.Machine`): the
  # state keeps the last ID given (`last_id`) and the newest stored
  # message's (`top_id`); a push's IDs follow the last one at the command's
  # stamp (the leader's system ms, never less than the one before), or are
  # the one a client gave, under Redis's rules (`Ids.next_auto/3`,
  # `Ids.next_given/2`). A put carries its first ID, so every member stores
  # the same IDs whatever its ring's history, and a snapshot carries the
  # last ID with the state. Pure.
  #
  # Before version 6 each member's ring stamped its own IDs at apply time:
  # under an older version in effect, puts carry no ID and the state's IDs
  # stay as they were, as those versions run. At the change to version 6 the
  # last ID becomes the last stamp's ms with the largest counter (nothing
  # before was given an ID past it), so the IDs decided after it are above
  # every ID any member gave; a channel that never stored keeps `0-0`.

  alias Ringbus.Channel.Ids

  @since 6
  @max_u64 0xFFFF_FFFF_FFFF_FFFF

  @doc "The IDs of `count` messages pushed under `given`: `{:ok, {first, last}}` or a refusal."
  @spec next(map(), Ids.given(), pos_integer()) ::
          {:ok, {Ids.id(), Ids.id()}} | {:error, Ids.error() | :ids_exhausted}
  def next(state, :auto, count) do
    case Ids.next_auto(state.last_id, count, state.stamp) do
      {:ok, first, last} -> {:ok, {first, last}}
      {:error, :exhausted} -> {:error, :ids_exhausted}
    end
  end

  def next(state, given, 1) do
    with {:ok, id} <- Ids.next_given(state.last_id, given), do: {:ok, {id, id}}
  end

  @doc "The state once messages were stored under `ids` (`next/3`)."
  @spec taken(map(), {Ids.id(), Ids.id()}) :: map()
  def taken(state, {_first, last}), do: %{state | last_id: last, top_id: last}

  @doc """
  XSETID: the last ID becomes `id`, unless it is below the newest message
  held (`{:error, :below_top}`, as Redis refuses it). Every member's ring
  is told (`{:last_id, id}`).
  """
  @spec set(map(), Ids.id()) :: {map(), :ok | {:error, :below_top}, list()}
  def set(state, id) do
    if state.head > state.tail and Ids.above?(state.top_id, id),
      do: {state, {:error, :below_top}, []},
      else: {%{state | last_id: id}, :ok, [{:last_id, id}]}
  end

  @doc "The state at Ra's change of machine version from `from` to `to`, and the ring's op."
  @spec upgrade(map(), non_neg_integer(), non_neg_integer()) :: {map(), list()}
  def upgrade(%{head: head, stamp: stamp} = state, from, to)
      when from < @since and to >= @since and head > 0 do
    last = {stamp, @max_u64}
    {%{state | last_id: last, top_id: last}, [{:last_id, last}]}
  end

  def upgrade(state, _from, _to), do: {state, []}

  @doc """
  A decision (`{state, reply, ops}`) from `before` as `version` makes it:
  before version 6, no ID is decided.
  """
  @spec in_version(non_neg_integer(), map(), {map(), term(), list()}) :: {map(), term(), list()}
  def in_version(version, _before, decided) when version >= @since, do: decided

  def in_version(_version, before, {state, reply, ops}) do
    state = %{state | last_id: before.last_id, top_id: before.top_id}
    {state, reply, Enum.map(ops, &undecided/1)}
  end

  defp undecided({:put, first, payloads, count, bytes, _id}),
    do: {:put, first, payloads, count, bytes, nil}

  defp undecided(op), do: op
end
