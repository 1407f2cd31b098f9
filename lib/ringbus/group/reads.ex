defmodule Ringbus.Group.Reads do
  @moduledoc false
  # A group's reads (`Ringbus.Group`'s `:read`, `:take`, `:history`) and
  # acks. A group reads new entries from the seq after its `last`. When the
  # ring has moved past that seq, the entries in between are gone: the
  # group's `lost` counts them and it goes on from the oldest entry held.

  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{At, Table}

  # A move of the group's position is tried again when another request moved it first.
  @tries 100
  # The most pending entries a consumer reads again at once.
  @history_max 10_000

  @doc "New entries for `consumer`, seen first when `see?`."
  def read(%{table: t, c: c} = at, group, consumer, count, noack, see?) do
    with {:ok, g} <- At.fetch(at, group) do
      if see?, do: see(t, c, group, consumer, at.now)
      {:ok, take(at, g, group, consumer, count, noack)}
    end
  end

  # A consumer reads: made if new (past the bound of consumers, it reads all
  # the same), and seen now.
  defp see(t, c, group, consumer, now) do
    Table.add_consumer(t, c, group, consumer, now)
    Table.seen(t, c, group, consumer, now)
    :ok
  end

  # Takes up to `max` new entries for `consumer` (at least one, then as
  # many as fit in the bytes of `at`), pending unless `noack`.
  # A holding group's are pending before its position moves past them.
  defp take(%{table: t, c: c} = at, g, group, consumer, max, noack) do
    cond do
      noack ->
        advance(at, group, max, &At.cut(&1, at.bytes))

      Map.get(g.config, :hold, false) ->
        times = {at.now, at.now + g.config.ack_wait}
        messages = advance(at, group, max, &At.cut(&1, at.bytes), {consumer, times})
        Table.count_pending(t, c, group, Enum.count(messages))
        messages

      true ->
        messages = advance(at, group, max, &At.cut(&1, at.bytes))
        Table.add_pending(t, c, group, consumer, seqs(messages), at.now)
        messages
    end
  end

  @doc """
  Moves the group's position past up to `max` new entries, `cut` to the
  room the answer has, and past any the ring lost before them (counted
  `lost`), by compare-and-swap, tried again when another request moved it
  first: the entries passed, `[]` when none or no group. With `stage`,
  `{consumer, {now, due}}`, the entries are pending for `consumer` before
  the position moves past them (`Ringbus.Group.Table.stage/6`), so that a
  holding group's floor (`Ringbus.Group.Hold`) never passes one in flight.
  """
  def advance(at, group, max, cut, stage \\ nil, tries \\ @tries)
  def advance(_at, _group, 0, _cut, _stage, _tries), do: []
  def advance(_at, _group, _max, _cut, _stage, 0), do: []

  def advance(%{table: t, c: c} = at, group, max, cut, stage, tries) do
    case Table.fetch(t, c, group) do
      {:ok, %{last: last, entries_read: read}} ->
        {messages, _n, lost, _next} = Ring.read(at.channel, last + 1, max)
        messages = cut.(messages)
        {count, new_last} = span(messages, last + lost)
        new_read = entries_read(at, read, last, new_last, count)

        cond do
          count == 0 and lost == 0 ->
            []

          not stage(at, group, stage, messages) ->
            advance(at, group, max, cut, stage, tries - 1)

          Table.advance(t, c, group, {last, read}, new_last, new_read, lost) ->
            messages

          true ->
            unstage(at, group, stage, messages)
            advance(at, group, max, cut, stage, tries - 1)
        end

      :error ->
        []
    end
  end

  # A known count grows by the entries read. An unknown one (-1: a group
  # made or moved over RESP without ENTRIESREAD) becomes known as Redis's
  # estimate makes it: once a read passes the stream's first entry or
  # reaches its last.
  defp entries_read(_at, read, _last, _new_last, count) when read >= 0, do: read + count

  defp entries_read(at, read, last, new_last, _count) do
    first = Ring.first_seq(at.channel)

    if (last < first and new_last >= first) or new_last + 1 >= Ring.next_seq(at.channel),
      do: new_last + 1,
      else: read
  end

  defp stage(_at, _group, nil, _messages), do: true

  defp stage(%{table: t, c: c}, group, {consumer, times}, messages),
    do: Table.stage(t, c, group, consumer, seqs(messages), times) != :taken

  defp unstage(_at, _group, nil, _messages), do: :ok

  defp unstage(%{table: t, c: c}, group, {consumer, times}, messages),
    do: Table.unstage(t, c, group, consumer, seqs(messages), times)

  defp span(messages, last),
    do: Enum.reduce(messages, {0, last}, fn {seq, _}, {n, _} -> {n + 1, seq} end)

  defp seqs(messages), do: Enum.map(messages, &elem(&1, 0))

  @doc """
  A consumer's own pending entries after seq `after_seq`, each delivered
  again: its count goes up and its idle time restarts. nil for one the ring
  no longer holds. Those past the bytes of `at` (after the first) wait for
  the next read, from the last seq returned.
  """
  def history(%{table: t, c: c, now: now} = at, group, consumer, after_seq, max) do
    with {:ok, _} <- At.fetch(at, group),
         :ok <- see(t, c, group, consumer, now),
         {:ok, from} <- At.position(at, after_seq) do
      rows = Table.pending(t, c, group, from, At.all(), min(max, @history_max), consumer)

      rows
      |> Enum.reduce_while({[], at.bytes}, fn {seq, _owner, _time, _n}, {acc, left} ->
        case Ring.read(at.channel, seq, 1) do
          {[{^seq, payload}], _, _, _} when acc == [] or byte_size(payload) <= left ->
            redeliver(t, c, group, seq, consumer, now)
            {:cont, {[{seq, payload} | acc], less(left, payload)}}

          {[{^seq, _payload}], _, _, _} ->
            {:halt, {acc, left}}

          _ ->
            {:cont, {[{seq, nil} | acc], left}}
        end
      end)
      |> then(fn {acc, _left} -> {:ok, :lists.reverse(acc)} end)
    end
  end

  # A consumer read its pending entry again: one more delivery, delivered
  # now. False if the entry is no longer that consumer's.
  defp redeliver(t, c, group, seq, consumer, now) do
    case Table.row(t, c, group, seq) do
      {^seq, ^consumer, _at, n, _due} = row ->
        due = now + Table.config_of(t, c, group).ack_wait
        Table.replace(t, c, group, row, {seq, consumer, now, n + 1, due})

      _ ->
        false
    end
  end

  defp less(:infinity, _payload), do: :infinity
  defp less(left, payload), do: left - byte_size(payload)

  @doc """
  Acks the entries `refs` names; those of another incarnation name none.
  A consumer with a push subscription is told its seqs acked
  (`Ringbus.Group.Push`): its credit comes back.
  """
  def ack(%{table: t, c: c} = at, group, refs) do
    seqs = for ref <- refs, {:ok, seq} <- [At.entry(at, ref)], do: seq
    {n, by_consumer} = Table.ack(t, c, group, seqs)

    for {consumer, acked} <- by_consumer,
        {pid, ref} <- [Table.push_of(t, c, group, consumer)],
        do: send(pid, {:ringbus_group_acked, ref, acked})

    {:ok, n}
  end
end
