defmodule Ringbus.Replica.Checkpoints do
  @moduledoc false
  # When a replicated channel's log may be released (`Ringbus.Replica.Machine`'s
  # `release_cursor`), and what the snapshot at the cursor holds.
  #
  # On recovery Ra rebuilds the machine from the snapshot and the entries
  # after it, and the ring from what those entries carry out. So a snapshot
  # must leave nothing a later entry reads outside the ring.
  #
  # Without consumer groups, a read changes nothing in the state: a cursor
  # may pass every entry whose messages are all dead (overwritten or
  # pulled). The state keeps a few checkpoints `{index, head, state}`, at
  # least a quarter of the capacity of seqs apart: once `tail` reaches a
  # checkpoint's `head`, every message stored by the entries up to its
  # `index` is dead, and the newest such checkpoint goes out as the cursor.
  # Heads are at most `capacity` apart, so there are at most five.
  #
  # With groups, a read is a decision: a fetch delivers what the ring holds
  # and counts `lost` what it does not. An old checkpoint would not do: the
  # fetches after it read messages stored before it, which a rebuilt ring
  # lacks, and the rebuilt groups would differ from those that were. So the
  # snapshot is the state now, with the group rows (`groups`) and the
  # messages the ring holds (`messages`, each with its time), which a state
  # puts back in the ring and the table before its next command (and when
  # Ra starts it, `load/1`). It costs a copy of the ring, so it is taken at
  # most once per capacity of entries (and @regroup at least); the log keeps
  # up to that many entries more. A machine before version 4 in effect keeps
  # to the checkpoints, as those versions do.

  alias Ringbus.Channel.{Ring, Times}
  alias Ringbus.{Group, Store}

  @regroup 4_096

  @doc """
  Takes a checkpoint of `state` at `index` when due, and returns the
  `release_cursor` effect of the snapshot to keep, if there is one.
  """
  @spec checkpoint(map(), non_neg_integer(), non_neg_integer()) :: {map(), list()}
  def checkpoint(state, index, version) do
    case Store.fetch(state.channel) do
      {:ok, ch} when version >= 4 -> grouped(state, index, ch, Group.any?(ch))
      {:ok, ch} -> checkpoints(state, index, ch)
      # Not on this node (yet): its groups could not be copied; the log stays.
      {:error, :no_channel} -> {state, []}
    end
  end

  defp grouped(state, index, ch, true) do
    # Ra writes a snapshot only past its own interval since the last one
    # (`ra_log`): more than @regroup entries, its default.
    if index - state.released > max(@regroup, state.capacity) do
      state = %{state | checkpoints: :queue.new(), released: index}
      snapshot = %{state | groups: Group.rows(ch), messages: messages(ch, state)}
      {state, [{:release_cursor, index, snapshot}]}
    else
      {%{state | checkpoints: :queue.new()}, []}
    end
  end

  defp grouped(state, index, ch, false), do: checkpoints(state, index, ch)

  # The messages the ring holds from `tail`: `{seq, payload, ms, id}`,
  # payload `:deleted` for a tombstone.
  defp messages(ch, state) do
    for {seq, payload, at, id} <- Ring.dump_decided(ch, state.tail),
        seq < state.head,
        do: {seq, payload, Times.ms(at), id}
  end

  @doc """
  Puts the messages of a snapshot (`checkpoint/3`) back in the ring of
  `channel`, those it lacks, at their times: nil when done, else the
  messages still to put (the channel is not on this node yet).
  """
  @spec load(term(), [tuple()] | nil) :: [tuple()] | nil
  def load(_channel, nil), do: nil

  def load(channel, messages) do
    case Store.fetch(channel) do
      {:ok, ch} ->
        for message <- messages, do: put(ch, message)

        nil

      {:error, :no_channel} ->
        messages
    end
  end

  # A snapshot's message, with its ID or (a snapshot from before IDs)
  # without; a deleted one goes in as its tombstone, so the seqs stay
  # contiguous.
  defp put(ch, {seq, :deleted, ms, id}) do
    put(ch, {seq, "", ms, id})
    {:ok, _} = Ring.delete(ch, [seq])
  end

  defp put(ch, {seq, payload, ms, id}),
    do: Ring.put_decided(ch, seq, [payload], 1, byte_size(payload), {Times.at_of(ms), id})

  defp put(ch, {seq, payload, ms}),
    do: Ring.put_decided(ch, seq, [payload], 1, byte_size(payload), Times.at_of(ms))

  defp checkpoints(state, index, ch) do
    state = take(state, index, ch)
    {released, checkpoints} = released(state.checkpoints, state.tail, nil)
    state = %{state | checkpoints: checkpoints}

    case released do
      nil -> {state, []}
      {at, _head, snapshot} -> {state, [{:release_cursor, at, snapshot}]}
    end
  end

  defp released(checkpoints, tail, last) do
    case :queue.peek(checkpoints) do
      {:value, {_at, head, _snapshot} = cp} when head <= tail ->
        released(:queue.drop(checkpoints), tail, cp)

      _ ->
        {last, checkpoints}
    end
  end

  defp take(state, index, ch) do
    spacing = max(1, div(state.capacity, 4))

    case :queue.peek_r(state.checkpoints) do
      :empty ->
        %{state | checkpoints: :queue.in(at(state, index, ch), state.checkpoints)}

      # No seq stored since: the later index releases more of the log.
      {:value, {at, head, _}} when head == state.head ->
        if index - at >= @regroup or not Group.any?(ch) do
          cp = at(state, index, ch)
          %{state | checkpoints: :queue.in(cp, :queue.drop_r(state.checkpoints))}
        else
          state
        end

      {:value, {at, head, _}} when state.head - head >= spacing ->
        if index - at >= @regroup or not Group.any?(ch),
          do: %{state | checkpoints: :queue.in(at(state, index, ch), state.checkpoints)},
          else: state

      _ ->
        state
    end
  end

  defp at(state, index, ch),
    do: {index, state.head, %{state | checkpoints: :queue.new(), groups: Group.rows(ch)}}
end
