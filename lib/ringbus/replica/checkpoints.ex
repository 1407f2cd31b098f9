defmodule Ringbus.Replica.Checkpoints do
  @moduledoc false
  # The release cursors of a replicated channel's machine
  # (`Ringbus.Replica.Machine`), as functions of its state.
  #
  # The log. Ra may drop the entries before a `release_cursor`, and on
  # recovery rebuilds the ring from the snapshot's state and the entries after
  # it, so a cursor may only pass entries whose messages are all dead
  # (overwritten or pulled). The state keeps a few checkpoints
  # `{index, head, state}`, at least a quarter of the capacity of seqs apart:
  # once `tail` reaches a checkpoint's `head`, every message stored by the
  # entries up to its `index` is dead, and the newest such checkpoint goes out
  # as the cursor. Heads are at most `capacity` apart, so there are at most
  # five checkpoints.
  #
  # Groups. A channel's consumer groups are rows of this node's group table
  # that only the log changes, so each checkpoint carries them (`groups`),
  # and a state that has them (a snapshot recovered or installed, or a
  # fresh one: none) puts them in the table before its next command. While
  # a channel has groups, checkpoints are at least @regroup entries apart,
  # so that copying the rows costs little per command; the log then keeps
  # up to that many entries more.

  alias Ringbus.{Group, Store}

  @regroup 4_096

  @doc """
  Takes a checkpoint of `state` at `index` when due, and returns the
  `release_cursor` effect of the newest checkpoint whose entries hold no live
  message, if there is one.
  """
  @spec checkpoint(struct(), non_neg_integer()) :: {struct(), list()}
  def checkpoint(state, index) do
    state = take_checkpoint(state, index)
    {released, checkpoints} = released(state.checkpoints, state.tail, nil)
    state = %{state | checkpoints: checkpoints}

    effects =
      case released do
        nil -> []
        {at, _head, snapshot} -> [{:release_cursor, at, snapshot}]
      end

    {state, effects}
  end

  defp released(checkpoints, tail, last) do
    case :queue.peek(checkpoints) do
      {:value, {_at, head, _snapshot} = cp} when head <= tail ->
        released(:queue.drop(checkpoints), tail, cp)

      _ ->
        {last, checkpoints}
    end
  end

  defp take_checkpoint(state, index) do
    spacing = max(1, div(state.capacity, 4))

    case :queue.peek_r(state.checkpoints) do
      :empty ->
        %{state | checkpoints: :queue.in(checkpoint_at(state, index), state.checkpoints)}

      # No seq stored since: the later index releases more of the log.
      {:value, {at, head, _}} when head == state.head ->
        if index - at >= @regroup or not groups?(state.channel) do
          cp = checkpoint_at(state, index)
          %{state | checkpoints: :queue.in(cp, :queue.drop_r(state.checkpoints))}
        else
          state
        end

      {:value, {at, head, _}} when state.head - head >= spacing ->
        if index - at >= @regroup or not groups?(state.channel),
          do: %{state | checkpoints: :queue.in(checkpoint_at(state, index), state.checkpoints)},
          else: state

      _ ->
        state
    end
  end

  defp checkpoint_at(state, index) do
    rows =
      case Store.fetch(state.channel) do
        {:ok, ch} -> Group.rows(ch)
        {:error, :no_channel} -> []
      end

    {index, state.head, %{state | checkpoints: :queue.new(), groups: rows}}
  end

  defp groups?(channel) do
    case Store.fetch(channel) do
      {:ok, ch} -> Group.any?(ch)
      {:error, :no_channel} -> false
    end
  end
end
