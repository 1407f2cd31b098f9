defmodule Ringbus.Group.Redelivery do
  @moduledoc false
  # What a group does with its pending entries as time passes, decided as
  # functions of the rows, the group's config and `now` (system ms, read
  # once per request by `Ringbus.Group`): no table, no process, no clock.
  # `Ringbus.Group.Fetch` and `Ringbus.Group.TableOwner` read the rows,
  # ask here, and write the answers back by compare-and-swap, so the same
  # decisions can later run inside a replicated channel's machine with the
  # leader's stamped time.
  #
  # A row is `{seq, consumer, delivered_ms, deliveries, due_ms}` (see
  # `Ringbus.Group.Table`). An entry is due when `due_ms <= now`: `ack_wait`
  # after a delivery, at once when its consumer's owner exited or it was
  # nacked, after a nack's delay. The table's due index finds those rows
  # (`Ringbus.Group.Table.due/5`), so a fetch reads no row that is not due.

  alias Ringbus.Group.Table

  @doc "The row of a first delivery of `seq` to `consumer` at `now`."
  @spec deliver(non_neg_integer(), binary(), Table.config(), integer()) :: Table.row()
  def deliver(seq, consumer, %{ack_wait: wait}, now), do: {seq, consumer, now, 1, now + wait}

  @doc """
  What becomes of a due row that a fetch for `consumer` finds:

    * `{:deliver, row}` - delivered again, one delivery more;
    * `{:dead, row}` - delivered `max_deliver` times: given up. With a
      dead-letter channel, `row` is the row kept while the entry is pushed
      there (due again `ack_wait` on, should that push not be confirmed);
      without one, the entry leaves the group.
  """
  @spec due(Table.row(), binary(), Table.config(), integer()) ::
          {:deliver, Table.row()} | {:dead, Table.row()}
  def due({seq, owner, at, n, _due} = row, consumer, config, now) do
    if dead?(row, config),
      do: {:dead, {seq, owner, at, n, now + config.ack_wait}},
      else: {:deliver, {seq, consumer, now, n + 1, now + config.ack_wait}}
  end

  @doc "Whether a row was delivered `max_deliver` times: it is not delivered again."
  @spec dead?(Table.row(), Table.config()) :: boolean()
  def dead?({_seq, _consumer, _at, n, _due}, config), do: dead_after?(n, config.max_deliver)

  defp dead_after?(_n, :infinity), do: false
  defp dead_after?(n, max), do: n >= max

  @doc "A row claimed by `consumer` at `now`: one delivery more, due `ack_wait` on."
  @spec claim(Table.row(), binary(), Table.config(), integer()) :: Table.row()
  def claim({seq, _owner, _at, n, _due}, consumer, config, now),
    do: {seq, consumer, now, n + 1, now + config.ack_wait}

  @doc "A row nacked at `now`: due again after `delay` ms."
  @spec nack(Table.row(), non_neg_integer(), integer()) :: Table.row()
  def nack({seq, consumer, at, n, _due}, delay, now), do: {seq, consumer, at, n, now + delay}

  @doc "A row whose consumer says it is still at work on it: `ack_wait` more from now."
  @spec in_progress(Table.row(), Table.config(), integer()) :: Table.row()
  def in_progress({seq, consumer, at, n, _due}, config, now),
    do: {seq, consumer, at, n, now + config.ack_wait}

  @doc "A row whose consumer went away (its owner exited, or it was removed): due now."
  @spec orphaned(Table.row(), integer()) :: Table.row()
  def orphaned({seq, consumer, at, n, due}, now), do: {seq, consumer, at, n, min(due, now)}

  @doc """
  How long a fetch that found nothing sleeps before it looks again, unless
  a push or a nack wakes it: until its `deadline`, the earliest due time it
  knows of (`next_due`, or nil), or `ack_wait` on, whichever comes first
  (an entry delivered while it sleeps is due no sooner than that).
  """
  @spec sleep(integer(), integer() | nil, Table.config(), integer()) :: non_neg_integer()
  def sleep(deadline, next_due, %{ack_wait: wait}, now) do
    wake = Enum.min([deadline, next_due || deadline, now + wait])
    max(wake - now, 0)
  end

  @doc """
  A group's figures from its row, its consumers (`{name, seen_ms,
  pending}`), the channel's first and next seqs, at `now`. Entries past
  `last` that the ring no longer holds are lost already, though the group
  has not reached them: so `lost` and `lag` are exact whenever they are read.
  """
  @spec figures(binary(), Table.group(), list(), non_neg_integer(), non_neg_integer(), integer()) ::
          map()
  def figures(name, g, consumers, first, next, now) do
    unread = max(first - (g.last + 1), 0)

    %{
      name: name,
      delivered: g.last,
      pending: g.pending,
      lag: max(next - max(g.last + 1, first), 0),
      redelivered: g.redelivered,
      dead: g.dead,
      acked: g.acked,
      lost: g.lost + unread,
      dropped: g.dropped,
      held: g.held,
      config: g.config,
      consumers:
        for {consumer, seen, pending} <- consumers do
          %{name: consumer, pending: pending, idle_ms: max(now - seen, 0)}
        end
    }
  end
end
