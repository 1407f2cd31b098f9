defmodule Ringbus.Replica.Commits do
  @moduledoc false
  # When this node first knew that a replicated channel's commit index had
  # reached a value: a short history of samples `{index, at}`, `at` in this
  # node's monotonic ms, newest first, both increasing. Pure; the reporter
  # (`Ringbus.Replica.Reporter`) keeps one per channel and feeds it every
  # commit index it sees: its own member's at each report, and each other
  # member's as its report arrives. No member ever overstates a commit
  # index (a follower's trails the leader's), so the history is the
  # earliest this node could know, whoever told it.
  #
  # `reached/2` is then an upper bound on when an entry was committed: the
  # sample that first covered it. Its error is how late the samples are:
  # Ra refreshes the indexes it publishes once per tick (1 s) and the
  # reporter reads them once per report (1 s), so about 2 s for recent
  # entries.
  #
  # Bounded: `prune/4` drops every sample no member needs (its index at or
  # below the lowest applied index of the members; the newest stays, it is
  # the highest index known) and, past `max` samples, the inner sample whose
  # removal widens a gap the least relative to its age, so old samples thin
  # out (about evenly in the log of their age) and recent ones stay.

  @type t :: [{index :: non_neg_integer(), at :: integer()}]

  @doc "An empty history."
  @spec new() :: t()
  def new, do: []

  @doc "Records that the commit index was at least `index` at `at`; nil or a lower index adds nothing."
  @spec observe(t(), non_neg_integer() | nil, integer()) :: t()
  def observe(history, nil, _at), do: history
  def observe([{top, _} | _] = history, index, _at) when index <= top, do: history
  def observe(history, index, at), do: [{index, at} | history]

  @doc "The highest commit index known, or nil."
  @spec top(t()) :: non_neg_integer() | nil
  def top([{index, _} | _]), do: index
  def top([]), do: nil

  @doc """
  The highest commit index known at `at` (the newest sample no later than
  `at`), or nil when no sample is that old.
  """
  @spec known_at(t(), integer()) :: non_neg_integer() | nil
  def known_at(history, at) do
    Enum.find_value(history, fn {index, t} -> if t <= at, do: index end)
  end

  @doc """
  When the commit index was first known to be at least `index` (the oldest
  sample that covers it), or nil when no sample does yet.
  """
  @spec reached(t(), non_neg_integer()) :: integer() | nil
  def reached(history, index) do
    Enum.reduce_while(history, nil, fn
      {i, t}, _acc when i >= index -> {:cont, t}
      _older, acc -> {:halt, acc}
    end)
  end

  @doc """
  Drops the samples at or below `floor` (the lowest applied index of the
  members; nil when none is known) but the newest, then thins the history
  to at most `max` (2 or more) samples, as of `now`.
  """
  @spec prune(t(), non_neg_integer() | nil, pos_integer(), integer()) :: t()
  def prune([], _floor, _max, _now), do: []

  def prune([newest | older], floor, max, now) when max >= 2 do
    kept = if floor, do: Enum.take_while(older, fn {i, _} -> i > floor end), else: older
    thin([newest | kept], max, now)
  end

  defp thin(history, max, now) do
    if length(history) <= max, do: history, else: history |> drop_one(now) |> thin(max, now)
  end

  # Newest first: the sample between `newer` and `older` that leaves the
  # narrowest gap for its age goes. The newest and the oldest stay.
  defp drop_one(history, now) do
    triples = Enum.zip([history, tl(history), tl(tl(history))])

    {_, drop} =
      triples
      |> Enum.with_index(1)
      |> Enum.min_by(fn {{{_, newer}, _, {_, older}}, _i} ->
        (newer - older) / max(now - older, 1)
      end)

    List.delete_at(history, drop)
  end
end
