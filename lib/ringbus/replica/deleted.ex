defmodule Ringbus.Replica.Deleted do
  @moduledoc false
  # The seqs a replicated channel's machine (`Ringbus.Replica.Machine`) has
  # deleted and its tail has not passed yet: a `:gb_sets` set in its state,
  # so that every member decides the same deletes, and the same pulls and
  # trims past them, and a snapshot carries them. Each member's ring holds a
  # tombstone for each (`Ringbus.Channel.Deletes`). At most one per seq held,
  # so never more than the capacity. Pure.

  @type t :: :gb_sets.set(non_neg_integer())

  @doc "None."
  @spec new() :: t()
  def new, do: :gb_sets.empty()

  @doc "How many stand at or after `tail`."
  @spec size(t(), non_neg_integer()) :: non_neg_integer()
  def size(set, tail), do: :gb_sets.size(prune(set, tail))

  @doc """
  Deletes those of `seqs` held (from `tail` to `head - 1`) and not deleted
  yet: the set, those seqs in the order given, how many they are, and how
  many seqs from `tail` on are deleted now, one after another (`leading/2`).
  """
  @spec delete(t(), [term()], non_neg_integer(), non_neg_integer()) ::
          {t(), [non_neg_integer()], non_neg_integer(), non_neg_integer()}
  def delete(set, seqs, tail, head) do
    {set, fresh, n} =
      Enum.reduce(seqs, {set, [], 0}, fn seq, {set, fresh, n} ->
        if is_integer(seq) and seq >= tail and seq < head and not :gb_sets.is_member(seq, set),
          do: {:gb_sets.add(seq, set), [seq | fresh], n + 1},
          else: {set, fresh, n}
      end)

    {set, :lists.reverse(fresh), n, leading(set, tail)}
  end

  @doc """
  How far from `tail` the tail moves to take `count` messages below
  `stop`, passing the deleted seqs among them: `{seqs, messages}`.

      iex> set = :gb_sets.from_list([3, 4, 8])
      iex> Ringbus.Replica.Deleted.span(set, 2, 3, 10)
      {5, 3}
      iex> Ringbus.Replica.Deleted.span(set, 2, 3, 5)
      {3, 1}
  """
  @spec span(t(), non_neg_integer(), non_neg_integer(), non_neg_integer()) ::
          {non_neg_integer(), non_neg_integer()}
  def span(set, tail, count, stop),
    do: walk(:gb_sets.iterator_from(tail, set), tail, tail + count, stop, 0)

  # `target`: the seq the tail reaches with the deleted seqs met so far.
  defp walk(iter, tail, target, stop, passed) do
    reach = min(target, stop)

    case :gb_sets.next(iter) do
      {seq, iter} when seq < reach -> walk(iter, tail, target + 1, stop, passed + 1)
      _ -> {max(reach - tail, 0), max(reach - tail - passed, 0)}
    end
  end

  @doc """
  How many seqs from `tail` on are deleted, one after another.

      iex> Ringbus.Replica.Deleted.leading(:gb_sets.from_list([3, 4, 6]), 3)
      2
  """
  @spec leading(t(), non_neg_integer()) :: non_neg_integer()
  def leading(set, tail), do: leading(set, tail, 0)

  defp leading(set, seq, n) do
    if :gb_sets.is_member(seq, set), do: leading(set, seq + 1, n + 1), else: n
  end

  @doc "Forgets the seqs below `tail`: the tail has passed them."
  @spec prune(t(), non_neg_integer()) :: t()
  def prune(set, tail) do
    case :gb_sets.is_empty(set) or :gb_sets.smallest(set) >= tail do
      true -> set
      false -> prune(:gb_sets.delete(:gb_sets.smallest(set), set), tail)
    end
  end
end
