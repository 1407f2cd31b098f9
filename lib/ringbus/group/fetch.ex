defmodule Ringbus.Group.Fetch do
  @moduledoc false
  # A group's deliveries as the Elixir API (`Ringbus.Groups`) makes them:
  # at least once. A fetch first delivers again the pending entries that
  # are due (`Ringbus.Group.Redelivery` decides which and how), then new
  # ones within the group's `max_pending`; nack, in_progress, claims and a
  # consumer's removal change when entries are due. Every change is a
  # compare-and-swap on a PEL row (`Ringbus.Group.Table.replace/5`), so two
  # fetches never deliver one entry at once, and an entry leaves the PEL
  # only acked, dead or lost to the ring, each counted.
  #
  # A fetch that finds nothing and may wait returns `{:wait, fun}`: `fun`
  # waits in the process that runs it (the caller, or the process a link
  # spawns for another node's request), registered in the channel's waiters
  # table as a subscription is, so the next push wakes it; so do changes
  # that make entries due at once (`wake/1`). It also wakes by itself when
  # the earliest entry it knows of comes due. No shared process waits.
  #
  # The process that fetches for a consumer is its owner: the first fetch
  # by a new owner asks `Ringbus.Group.TableOwner` (one cast) to monitor
  # it, and when it exits `TableOwner.orphan/4` makes the consumer's
  # entries due.

  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{Redelivery, At, Reads, Table, TableOwner}

  # Rounds of the due index a fetch reads before it answers what it has
  # (a move of the group's position has its tries in `Reads.advance/5`).
  @tries 100

  @doc """
  Up to `max` entries for `consumer`, due ones first: `{:ok, {[{seq,
  payload, deliveries}], dead_letter, dead}}`, `dead` the entries to push
  to the group's dead-letter channel (`[{seq, payload, deliveries}]`), or
  `{:wait, fun}` when there are none and the fetch may wait `wait` ms.
  """
  def fetch(at, group, consumer, owner, max, wait) do
    with {:ok, g} <- At.fetch(at, group) do
      own(at, group, consumer, owner)

      case take(at, g, group, consumer, max) do
        {[], []} when wait > 0 -> {:wait, fn -> wait(at, group, consumer, max, at.now + wait) end}
        found -> answer(g, found)
      end
    end
  end

  # The consumer is seen now, and `owner`'s; a new owner is watched. The
  # one it takes the consumer from may have exited before the table's
  # owner heard of it, which then leaves a consumer it no longer owns
  # alone: its entries are due now, as that exit would have made them.
  # When a replicated channel's log carries the request, the node that
  # sent it watches instead (`Ringbus.Group.Logged`): what this node knows
  # of processes is not the same on every member.
  @doc false
  def own(%{table: t, c: c} = at, group, consumer, owner) do
    case Table.own(t, c, group, consumer, owner, at.now) do
      {:owned, _previous} when at.logged ->
        :ok

      {:owned, previous} ->
        TableOwner.own(owner, {c, group, consumer}, at.channel)

        if TableOwner.gone?(previous),
          do: TableOwner.orphan(t, at.channel, {c, group, consumer}, at.now)

      false ->
        :ok
    end

    Table.seen(t, c, group, consumer, at.now)
  end

  defp wait(at, group, consumer, max, deadline) do
    at = %{at | now: At.now()}
    Ring.arm_wake(at.channel)

    case At.fetch(at, group) do
      {:ok, g} -> wait(at, g, group, consumer, max, deadline)
      error -> done(at, error)
    end
  end

  defp wait(at, g, group, consumer, max, deadline) do
    case take(at, g, group, consumer, max) do
      {[], []} when at.now < deadline ->
        next_due = Table.next_due(at.table, at.c, group)
        sleep = max(Redelivery.sleep(deadline, next_due, g.config, at.now), 1)

        receive do
          :ringbus_wake -> :ok
        after
          sleep -> unwait(at)
        end

        wait(at, group, consumer, max, deadline)

      found ->
        done(at, answer(g, found))
    end
  end

  defp done(at, answer) do
    unwait(at)
    answer
  end

  defp unwait(at), do: disarm(at.channel)

  @doc "Out of the channel's waiters, and a wake that came meanwhile taken out of the mailbox."
  @spec disarm(Ringbus.Channel.t()) :: :ok
  def disarm(channel) do
    Ring.disarm(channel)

    receive do
      :ringbus_wake -> :ok
    after
      0 -> :ok
    end
  end

  defp answer(g, {entries, dead}), do: {:ok, {entries, g.config.dead_letter, dead}}

  ## Taking entries

  # Due entries first, then new ones: `{entries, dead}`.
  defp take(at, g, group, consumer, max) do
    {due, n, dead, bytes} = take_due(at, g, group, consumer, {max, at.bytes}, [], 0, [], @tries)
    {due, dead} = {:lists.reverse(due), :lists.reverse(dead)}
    {due ++ take_new(at, g, group, consumer, max - n, bytes, due != []), dead}
  end

  defp take_due(_at, _g, _group, _consumer, {left, bytes}, acc, n, dead, tries)
       when left <= 0 or tries <= 0,
       do: {acc, n, dead, bytes}

  defp take_due(%{table: t, c: c} = at, g, group, consumer, {left, bytes}, acc, n, dead, tries) do
    case Table.due(t, c, group, at.now, left) do
      [] ->
        {acc, n, dead, bytes}

      index ->
        case due_rows(at, g, group, consumer, index, {left, bytes}, acc, n, dead) do
          {:full, acc, n, dead, bytes} ->
            {acc, n, dead, bytes}

          {:more, acc, n2, dead, bytes} ->
            take_due(
              at,
              g,
              group,
              consumer,
              {max(left - (n2 - n), 0), bytes},
              acc,
              n2,
              dead,
              tries - 1
            )
        end
    end
  end

  defp due_rows(_at, _g, _group, _consumer, [], {_left, bytes}, acc, n, dead),
    do: {:more, acc, n, dead, bytes}

  defp due_rows(_at, _g, _group, _consumer, _index, {0, bytes}, acc, n, dead),
    do: {:full, acc, n, dead, bytes}

  defp due_rows(
         %{table: t, c: c} = at,
         g,
         group,
         consumer,
         [{due, seq} | index],
         {left, bytes},
         acc,
         n,
         dead
       ) do
    next = &due_rows(at, g, group, consumer, index, &1, &2, &3, &4)

    case Table.row(t, c, group, seq) do
      {^seq, _, _, _, ^due} = row ->
        case {Redelivery.due(row, consumer, g.config, at.now), read(at, seq)} do
          {_, :gone} ->
            Table.remove(t, c, group, row, :lost)
            next.({left, bytes}, acc, n, dead)

          {{:deliver, new}, {:ok, payload}} ->
            cond do
              not fits?(bytes, payload, acc) ->
                {:full, acc, n, dead, bytes}

              Table.replace(t, c, group, row, new) ->
                Table.count_up(t, c, group, :redelivered, 1)
                entry = {seq, payload, elem(new, 3)}
                next.({left - 1, less(bytes, payload)}, [entry | acc], n + 1, dead)

              true ->
                next.({left, bytes}, acc, n, dead)
            end

          {{:dead, keep}, {:ok, payload}} ->
            cond do
              g.config.dead_letter == nil ->
                Table.remove(t, c, group, row, :dead)
                next.({left, bytes}, acc, n, dead)

              Table.replace(t, c, group, row, keep) ->
                next.({left, bytes}, acc, n, [{seq, payload, elem(row, 3)} | dead])

              true ->
                next.({left, bytes}, acc, n, dead)
            end
        end

      # Stale: the row is gone or due at another time.
      _ ->
        Table.unindex(t, c, group, due, seq)
        next.({left, bytes}, acc, n, dead)
    end
  end

  # New entries after the group's position, within the room `max_pending`
  # leaves (reserved first, so concurrent fetches stay within it), moving
  # the position past them (and past any the ring lost) by compare-and-swap.
  defp take_new(_at, _g, _group, _consumer, want, _bytes, _some?) when want <= 0, do: []

  defp take_new(%{table: t, c: c} = at, g, group, consumer, want, bytes, some?) do
    granted = Table.reserve(t, c, group, want, g.config.max_pending)

    if granted < want and Ring.next_seq(at.channel) > g.last + 1,
      do: Table.count_up(t, c, group, :held, 1)

    {entries, taken} = take_reserved(at, g.config, group, consumer, granted, bytes, some?)
    Table.release(t, c, group, granted - taken)
    entries
  end

  # A holding group's are pending before its position moves past them.
  defp take_reserved(at, config, group, consumer, n, bytes, some?) do
    {_, _, now, _, due} = Redelivery.deliver(0, consumer, config, at.now)
    entries = &for({seq, payload} <- &1, do: {seq, payload, 1})

    if Map.get(config, :hold, false) do
      messages = Reads.advance(at, group, n, &cut(&1, bytes, some?), {consumer, {now, due}})
      {entries.(messages), Enum.count(messages)}
    else
      messages = Reads.advance(at, group, n, &cut(&1, bytes, some?))
      seqs = for {seq, _} <- messages, do: seq
      taken = Table.add_reserved(at.table, at.c, group, consumer, seqs, {now, due})
      {entries.(messages), taken}
    end
  end

  # Within the bytes left: the first entry of an answer always, as a read's.
  defp cut(messages, bytes, false), do: At.cut(messages, bytes)
  defp cut(messages, bytes, true), do: cut_more(messages, bytes, [])

  defp cut_more([{_, payload} = m | rest], bytes, acc) do
    if fits?(bytes, payload, [m]),
      do: cut_more(rest, less(bytes, payload), [m | acc]),
      else: :lists.reverse(acc)
  end

  defp cut_more([], _bytes, acc), do: :lists.reverse(acc)

  defp fits?(:infinity, _payload, _acc), do: true
  defp fits?(_bytes, _payload, []), do: true
  defp fits?(bytes, payload, _acc), do: byte_size(payload) <= bytes

  defp less(:infinity, _payload), do: :infinity
  defp less(bytes, payload), do: bytes - byte_size(payload)

  defp read(at, seq) do
    case Ring.read(at.channel, seq, 1) do
      {[{^seq, payload}], _, _, _} -> {:ok, payload}
      _ -> :gone
    end
  end

  ## Settling entries

  @doc "Entries due again after `delay` ms (0: at once): `{:ok, nacked}`."
  def nack(at, group, refs, delay) do
    with {:ok, _} <- At.fetch(at, group) do
      n = change(at, group, refs, &Redelivery.nack(&1, delay, at.now))
      # Waiting fetches look again, and learn when these are due.
      if n > 0, do: Ring.wake_waiters(at.channel)
      {:ok, n}
    end
  end

  @doc "Entries whose ack_wait starts again: `{:ok, touched}`."
  def in_progress(at, group, refs) do
    with {:ok, g} <- At.fetch(at, group),
         do: {:ok, change(at, group, refs, &Redelivery.in_progress(&1, g.config, at.now))}
  end

  defp change(%{table: t, c: c} = at, group, refs, fun) do
    Enum.count(seqs(at, refs), fn seq ->
      case Table.row(t, c, group, seq) do
        nil -> false
        row -> Table.replace(t, c, group, row, fun.(row))
      end
    end)
  end

  defp seqs(at, refs), do: for(ref <- refs, {:ok, seq} <- [At.entry(at, ref)], do: seq)

  @doc """
  Pending entries `refs` names go to `consumer`, delivered once more:
  `{:ok, [{seq, payload, deliveries}]}`.
  """
  def claim(%{table: t, c: c} = at, group, consumer, owner, refs) do
    with {:ok, g} <- At.fetch(at, group) do
      own(at, group, consumer, owner)
      rows = for seq <- seqs(at, refs), row = Table.row(t, c, group, seq), do: row
      {:ok, claim_rows(at, g, group, consumer, rows)}
    end
  end

  @doc "Up to `count` pending entries delivered `min_idle` ms ago or more go to `consumer`."
  def autoclaim(%{table: t, c: c} = at, group, consumer, owner, min_idle, count) do
    with {:ok, g} <- At.fetch(at, group) do
      own(at, group, consumer, owner)
      rows = Table.delivered_before(t, c, group, at.now - min_idle, count)
      {:ok, claim_rows(at, g, group, consumer, rows)}
    end
  end

  defp claim_rows(%{table: t, c: c} = at, g, group, consumer, rows) do
    {claimed, _bytes} =
      Enum.reduce_while(rows, {[], at.bytes}, fn {seq, _, _, _, _} = row, {acc, bytes} ->
        case read(at, seq) do
          :gone ->
            Table.remove(t, c, group, row, :lost)
            {:cont, {acc, bytes}}

          {:ok, payload} ->
            new = Redelivery.claim(row, consumer, g.config, at.now)

            cond do
              not fits?(bytes, payload, acc) ->
                {:halt, {acc, bytes}}

              Table.replace(t, c, group, row, new) ->
                Table.count_up(t, c, group, :redelivered, 1)
                {:cont, {[{seq, payload, elem(new, 3)} | acc], less(bytes, payload)}}

              true ->
                {:cont, {acc, bytes}}
            end
        end
      end)

    :lists.reverse(claimed)
  end

  @doc """
  Entries given to the dead-letter channel: they leave the group, counted
  dead (those still pending and delivered `max_deliver` times).
  """
  def bury(%{table: t, c: c} = at, group, seqs) do
    with {:ok, g} <- At.fetch(at, group) do
      n =
        Enum.count(seqs, fn seq ->
          case Table.row(t, c, group, seq) do
            {^seq, _, _, _, _} = row ->
              Redelivery.dead?(row, g.config) and Table.remove(t, c, group, row, :dead)

            nil ->
              false
          end
        end)

      {:ok, n}
    end
  end

  @doc "A consumer goes; its pending entries are due at once: `{:ok, entries}`."
  def remove_consumer(%{table: t, c: c} = at, group, consumer) do
    with {:ok, _} <- At.fetch(at, group) do
      Table.forget_consumer(t, c, group, consumer)
      {:ok, TableOwner.orphan(t, at.channel, {c, group, consumer}, at.now)}
    end
  end

  @doc """
  The figures (`Ringbus.Group.Redelivery.figures/6`) of the first `groups`
  groups by name, with the first `consumers` consumers among them (by
  group, then name): `{figures, groups_omitted, consumers_omitted}`, each
  group's with its own `:consumers_omitted`. Consumers' pending counts
  cost one pass over the PEL of a group that shows any consumer and has
  entries pending; the rest reads group and consumer rows only.
  """
  def figures(%{table: t, c: c, channel: channel} = at, groups, consumers) do
    {first, next} = {Ring.first_seq(channel), Ring.next_seq(channel)}
    {shown, rest} = Enum.split(Table.groups(t, c), groups)

    {figures, {_left, omitted}} =
      Enum.map_reduce(shown, {consumers, 0}, fn {name, g}, {left, omitted} ->
        {listed, all} = Table.consumers(t, c, name, left, g.pending > 0)
        shown = Enum.count(listed)
        n = max(all - shown, 0)

        figures =
          name
          |> Redelivery.figures(g, listed, first, next, at.now)
          |> Map.put(:consumers_omitted, n)

        {figures, {left - shown, omitted + n}}
      end)

    {figures, Enum.count(rest), omitted + Enum.sum(for {n, _} <- rest, do: consumer_count(at, n))}
  end

  defp consumer_count(%{table: t, c: c}, group), do: Table.consumer_count(t, c, group)
end
