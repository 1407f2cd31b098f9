defmodule Ringbus.Resp.Trim do
  @moduledoc false
  # How many of a stream's oldest entries an XTRIM, or the MAXLEN/MINID of
  # an XADD, removes: Redis 7.0's `streamTrim`, as arithmetic on seqs. Pure.
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

  alias Ringbus.Resp.Entry

  @node 100

  @typedoc "A trim as the commands parse it."
  @type t :: %{
          strategy: {:maxlen, non_neg_integer()} | {:minid, Entry.id()},
          approx: boolean(),
          limit: non_neg_integer() | nil
        }

  @doc "Entries per node, as Redis's default `stream-node-max-entries`."
  def node_size, do: @node

  @doc """
  How many entries to remove from a stream holding the seqs `first..next - 1`.
  """
  @spec count(t(), Ringbus.seq(), Ringbus.seq()) :: non_neg_integer()
  def count(%{strategy: strategy, approx: approx} = trim, first, next) do
    limit = limit(trim)
    walk(strategy, approx, limit, first, next, 0)
  end

  # As Redis: `~` without LIMIT may remove 100 nodes' worth; LIMIT 0 is no bound.
  defp limit(%{approx: true, limit: nil}), do: @node * 100
  defp limit(%{approx: true, limit: limit}), do: limit
  defp limit(_trim), do: 0

  defp walk({:maxlen, max}, _approx, _limit, first, next, deleted) when next - first <= max,
    do: deleted

  defp walk(_strategy, _approx, _limit, first, next, deleted) when first >= next, do: deleted

  defp walk(strategy, approx, limit, first, next, deleted) do
    node_end = min((div(first, @node) + 1) * @node, next)
    entries = node_end - first

    cond do
      limit > 0 and deleted + entries > limit ->
        deleted

      whole_node?(strategy, first, next, node_end, entries) ->
        walk(strategy, approx, limit, node_end, next, deleted + entries)

      approx ->
        deleted

      true ->
        deleted + within(strategy, first, next)
    end
  end

  defp whole_node?({:maxlen, max}, first, next, _node_end, entries),
    do: next - first - entries >= max

  defp whole_node?({:minid, id}, _first, _next, node_end, _entries),
    do: node_end <= Entry.seq_from(id)

  # Entries of the oldest node removed one by one: it does not go whole.
  defp within({:maxlen, max}, first, next), do: next - first - max
  defp within({:minid, id}, first, _next), do: max(Entry.seq_from(id) - first, 0)
end
