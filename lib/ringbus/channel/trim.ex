defmodule Ringbus.Channel.Trim do
  @moduledoc false
  # How many of a channel's oldest messages a trim removes: Redis 7.0's
  # `streamTrim` (XTRIM, and the MAXLEN/MINID of an XADD), as arithmetic on
  # seqs. Pure. It runs where the channel lives (`Ringbus.Op`, and a
  # replicated channel's machine), so a trim is one operation however many
  # messages it removes. A front end turns its own bounds into seqs first:
  # RESP's MINID is the seq of the ID it names (`{:min_seq, seq}`).
  #
  # Redis keeps a stream in nodes of at most 100 entries
  # (`stream-node-max-entries`) and trims by walking them from the oldest:
  # a node goes whole while the stream stays at the threshold without it;
  # then, with `=`, entries of the next node go one by one until the
  # threshold is met, and with `~` trimming stops. LIMIT bounds the entries
  # removed, whole nodes only (`~` only; 100 nodes' worth by default, 0 for
  # no bound). A ring's entries leave from its oldest end only, so the nodes
  # are the seqs cut at every multiple of 100: node k holds seqs 100k to
  # 100k + 99, those still held. Redis also starts a node after 4,096 bytes
  # (`stream-node-max-bytes`), so with large entries its `~` removes fewer.

  # A node's entries, unless the trim says (`:node`: RESP's CONFIG SET
  # stream-node-max-entries, for a stream whose nodes are all of that size).
  @node 100

  @typedoc "A trim as the commands parse it."
  @type t :: %{
          optional(:run) => pos_integer(),
          optional(:node) => pos_integer(),
          strategy: {:maxlen, non_neg_integer()} | {:min_seq, non_neg_integer()},
          approx: boolean(),
          limit: non_neg_integer() | nil
        }

  @doc "How many nodes, as `count/3` cuts them, hold the seqs from `first` to `next - 1`."
  @spec nodes(non_neg_integer(), non_neg_integer()) :: non_neg_integer()
  def nodes(first, next) when next > first, do: div(next - 1, @node) - div(first, @node) + 1
  def nodes(_first, _next), do: 0

  @doc """
  How many entries to remove from a stream holding the seqs `first..next - 1`.

      iex> Ringbus.Channel.Trim.count(%{strategy: {:maxlen, 2}, approx: false, limit: nil}, 0, 6)
      4
      iex> Ringbus.Channel.Trim.count(%{strategy: {:maxlen, 2}, approx: true, limit: nil}, 0, 6)
      0
  """
  @spec count(t(), Ringbus.seq(), Ringbus.seq()) :: non_neg_integer()
  def count(%{run: n} = trim, first, next) do
    # Each push of the run trims the stream as it was then: `first` as the
    # earlier ones left it, and the end just past its own entry.
    one = Map.delete(trim, :run)

    Enum.reduce((next - n + 1)..next//1, 0, fn end_at, removed ->
      removed + count(one, first + removed, end_at)
    end)
  end

  def count(%{strategy: strategy, approx: approx} = trim, first, next) do
    node = Map.get(trim, :node, @node)
    walk({strategy, node}, approx, limit(trim, node), first, next, 0)
  end

  @doc """
  What a trim of a stream holding the seqs `first..next - 1`, `deleted`
  of them deleted (`Ringbus.Channel.Deletes`), removes: `{count, bound}`,
  up to `count` messages, those below seq `bound`. A MAXLEN counts the
  messages held; a MINID, the seqs below it, deleted ones among them.

      iex> Ringbus.Channel.Trim.bounds(%{strategy: {:maxlen, 2}, approx: false, limit: nil}, 0, 6, 1)
      {3, :infinity}
      iex> Ringbus.Channel.Trim.bounds(%{strategy: {:min_seq, 4}, approx: false, limit: nil}, 0, 6, 1)
      {4, 4}
  """
  @spec bounds(t(), Ringbus.seq(), Ringbus.seq(), non_neg_integer()) ::
          {non_neg_integer(), Ringbus.seq() | :infinity}
  def bounds(%{strategy: {:min_seq, _}} = trim, first, next, _deleted) do
    count = count(trim, first, next)
    {count, first + count}
  end

  def bounds(trim, first, next, deleted),
    do: {count(trim, first, max(next - deleted, first)), :infinity}

  @doc """
  The trim of a run of `n` pushes that each carry `trim`, run once after
  them all, removing what the pushes trimming one by one would have.
  Only `~` needs to know the run: with it (and with LIMIT), what a push
  removes depends on where the stream's end was at that push.

      iex> trim = Ringbus.Channel.Trim.of_run(%{strategy: {:maxlen, 10}, approx: true, limit: 150}, 2)
      iex> Ringbus.Channel.Trim.count(trim, 0, 1000)
      200
      iex> Ringbus.Channel.Trim.count(%{trim | limit: 300}, 0, 1000)
      600
  """
  @spec of_run(t() | nil, pos_integer()) :: t() | nil
  def of_run(%{approx: true} = trim, n) when n > 1, do: Map.put(trim, :run, n)
  def of_run(trim, _n), do: trim

  # As Redis: `~` without LIMIT may remove 100 nodes' worth; LIMIT 0 is no bound.
  defp limit(%{approx: true, limit: nil}, node), do: node * 100
  defp limit(%{approx: true, limit: limit}, _node), do: limit
  defp limit(_trim, _node), do: 0

  defp walk({{:maxlen, max}, _node}, _approx, _limit, first, next, deleted)
       when next - first <= max,
       do: deleted

  defp walk(_strategy, _approx, _limit, first, next, deleted) when first >= next, do: deleted

  defp walk({strategy, node} = cut, approx, limit, first, next, deleted) do
    node_end = min((div(first, node) + 1) * node, next)
    entries = node_end - first

    cond do
      limit > 0 and deleted + entries > limit ->
        deleted

      whole_node?(strategy, first, next, node_end, entries) ->
        walk(cut, approx, limit, node_end, next, deleted + entries)

      approx ->
        deleted

      true ->
        deleted + within(strategy, first, next)
    end
  end

  defp whole_node?({:maxlen, max}, first, next, _node_end, entries),
    do: next - first - entries >= max

  defp whole_node?({:min_seq, seq}, _first, _next, node_end, _entries),
    do: node_end <= seq

  # Entries of the oldest node removed one by one: it does not go whole.
  defp within({:maxlen, max}, first, next), do: next - first - max
  defp within({:min_seq, seq}, first, _next), do: max(seq - first, 0)
end
