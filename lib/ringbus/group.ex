defmodule Ringbus.Group do
  @moduledoc false
  # Consumer groups of a channel, as Redis keeps them for a stream, in
  # seqs: each group has the seq of the last entry it delivered, how many
  # it has read, its consumers and its pending entries list (PEL), with
  # each entry's consumer, delivery time (system ms) and delivery count.
  # Entries are claimed by idle time, read again by their consumer, acked.
  # Any front end may offer them: a group request is an operation of
  # `Ringbus.Op`, `{:group, request}`, which `run/3` carries out on the
  # channel's handle, where the channel lives (its home; see
  # `Ringbus.Group.Table` for the rows and their bounds). Requests and
  # answers are plain data: seqs, counts, names, `{:error, reason}`.
  #
  # A request never waits on a process: it reads the ring and changes the
  # table, so a link runs another node's at once. A read of entries answers
  # at most `room` div 4 bytes of payloads (the first entry always), as a
  # channel read does, and the rest at the next.
  #
  # Known limit: a replicated channel's groups are those of the member that
  # runs the request (its ring and this node's table), not kept in its log.
  #
  # The seqs a caller gives (`ref`) may say which incarnation of the channel
  # they are of, so that a position kept from a creation gone is refused
  # (`{:error, :new_incarnation}`) and an entry of it names nothing here.

  alias Ringbus.Channel
  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{At, Claims, Reads, Table, TableOwner}

  @typedoc """
  Part of an incarnation: `{mask, bits}` fits incarnation `i` when
  `band(i, mask) == bits`. A caller that knows the whole incarnation masks
  none of it; one that keeps only some bits of it (a front end's IDs) masks
  the rest; one with bits outside the mask fits none.
  """
  @type mark :: {non_neg_integer(), non_neg_integer()}

  @typedoc "A seq a caller gives: of whatever incarnation the channel has, or of those `mark` fits."
  @type ref :: integer() | {integer(), mark()}

  @typedoc """
  A group request (`group` and `consumer` are binaries, `count` at least 1):

    * `{:create, group, from, entries_read}` - a group whose last delivered
      seq is `from` (-1: none; `:last`: the channel's last) and which has
      read `entries_read` (nil: `from` + 1): `:ok`, or `{:error, :exists |
      {:too_many_groups, limit} | :new_incarnation}`
    * `{:set_id, group, from, entries_read}` - moves a group (nil
      `entries_read` keeps it): `:ok` or `{:error, :no_group | :new_incarnation}`
    * `{:destroy, group}` - `{:ok, destroyed?}`
    * `{:create_consumer, group, consumer}` - `{:ok, :created | :exists}`,
      or `{:error, :no_group | {:too_many_consumers, limit}}`
    * `{:delete_consumer, group, consumer}` - `{:ok, pending_entries_dropped}`
    * `{:info, group}` - `{:ok, %{last, entries_read, lost, pending, dropped}}`
    * `:count` - `{:ok, groups}`
    * `{:groups, count}` - `{:ok, [group]}`, each a map: `name`, `last`,
      `entries_read`, `lag`, `lost`, `pending` (how many), `dropped`,
      `entries` (its first `count` pending, `{seq, consumer, delivered,
      deliveries}`), `consumers` (`name`, `seen`, `pending`, `entries`:
      their first `count`, `{seq, delivered, deliveries}`)
    * `{:consumers, group}` - `{:ok, [{consumer, pending, idle_ms}]}`
    * `{:read, group, consumer, count, noack}` - the consumer is seen (made
      if new) and takes up to `count` new entries, `{:ok, [{seq,
      payload}]}`, pending unless `noack`
    * `{:take, group, consumer, count, noack}` - the same for a consumer
      already seen, which waited for entries: it is not seen again
    * `{:history, group, consumer, after, count}` - the consumer is seen
      and reads its own pending entries after seq `after` again (each
      delivered once more): `{:ok, [{seq, payload | nil}]}`, nil for one
      the ring no longer holds
    * `{:ack, group, [ref]}` - `{:ok, acked}`
    * `{:pending, group}` - `{:ok, nil | {count, low, high, [{consumer, n}]}}`
    * `{:pending, group, from, to, count, consumer | nil, min_idle}` - up to
      `count` PEL rows from seq `from` through `to`, those idle `min_idle`
      ms or more: `{:ok, [{seq, consumer, idle_ms, deliveries}]}`
    * `{:autoclaim, group, consumer, min_idle, from, count, justid}` - up to
      `count` entries idle `min_idle` ms, from seq `from`, go to `consumer`:
      `{:ok, {next | nil, claimed, deleted_seqs}}`, claimed `[{seq,
      payload}]` or, with `justid` (their delivery counts unchanged), seqs
    * `{:claim, group, consumer, [ref], min_idle, opts}` - those pending
      entries idle `min_idle` ms go to `consumer`: `{:ok, claimed}` as
      above. `opts`: `time` (`nil`, `{:idle, ms}` or `{:at, system_ms}`: the
      delivery time given), `retry` (the delivery count given, or nil),
      `force` (make pending the entries no PEL has), `justid`, `last` (a
      `ref`: the group's last delivered seq moves up to it, or nil)

  Every request on a group that does not exist answers `{:error,
  :no_group}`, except `:ack` (`{:ok, 0}`) and `:destroy`.
  """
  @type request ::
          {:create, binary(), ref() | :last, non_neg_integer() | nil}
          | {:set_id, binary(), ref() | :last, non_neg_integer() | nil}
          | {:destroy, binary()}
          | {:create_consumer, binary(), binary()}
          | {:delete_consumer, binary(), binary()}
          | {:info, binary()}
          | :count
          | {:groups, non_neg_integer()}
          | {:consumers, binary()}
          | {:read | :take, binary(), binary(), pos_integer(), boolean()}
          | {:history, binary(), binary(), ref(), pos_integer()}
          | {:ack, binary(), [ref()]}
          | {:pending, binary()}
          | {:pending, binary(), ref(), ref(), integer(), binary() | nil, integer()}
          | {:autoclaim, binary(), binary(), non_neg_integer(), ref(), pos_integer(), boolean()}
          | {:claim, binary(), binary(), [ref()], non_neg_integer(), map()}

  @doc "Runs `request` on the groups of `channel`; `room` bounds the entries it answers."
  @spec run(Channel.t(), request(), pos_integer() | :infinity) :: term()
  def run(%Channel{incarnation: c, anchor: anchor} = channel, request, room) do
    t = Table.table()
    if Table.watch(t, c, anchor), do: TableOwner.watch(c, anchor)
    request(%{channel: channel, table: t, c: c, bytes: bytes(room)}, request)
  end

  defp bytes(:infinity), do: :infinity
  defp bytes(room), do: div(room, 4)

  defp request(at, {:read, group, consumer, count, noack}),
    do: Reads.read(at, group, consumer, count, noack, true)

  defp request(at, {:take, group, consumer, count, noack}),
    do: Reads.read(at, group, consumer, count, noack, false)

  defp request(at, {:history, group, consumer, after_seq, count}),
    do: Reads.history(at, group, consumer, after_seq, count)

  defp request(at, {:ack, group, refs}), do: Reads.ack(at, group, refs)
  defp request(at, {:pending, group}), do: Claims.summary(at, group)

  defp request(at, {:pending, group, from, to, count, consumer, min_idle}),
    do: Claims.pending(at, group, {from, to}, count, consumer, min_idle)

  defp request(at, {:autoclaim, group, consumer, min_idle, from, count, justid}),
    do: Claims.autoclaim(at, group, consumer, min_idle, from, count, justid)

  defp request(at, {:claim, group, consumer, refs, min_idle, opts}),
    do: Claims.claim(at, group, consumer, refs, min_idle, opts)

  defp request(at, {:create, group, from, entries_read}) do
    with {:ok, last} <- At.position(at, from) do
      case Table.create(at.table, at.c, group, last, entries_read || max(last + 1, 0)) do
        :ok -> :ok
        {:error, :exists} -> {:error, :exists}
        {:error, :too_many} -> {:error, {:too_many_groups, Table.limits().groups}}
      end
    end
  end

  defp request(at, {:set_id, group, from, entries_read}) do
    with {:ok, last} <- At.position(at, from) do
      if Table.set_last(at.table, at.c, group, last, entries_read),
        do: :ok,
        else: {:error, :no_group}
    end
  end

  defp request(at, {:destroy, group}), do: {:ok, Table.destroy(at.table, at.c, group)}

  defp request(at, {:create_consumer, group, consumer}) do
    with {:ok, _} <- At.fetch(at, group) do
      case Table.add_consumer(at.table, at.c, group, consumer, At.now()) do
        :too_many -> {:error, {:too_many_consumers, Table.limits().consumers}}
        made -> {:ok, made}
      end
    end
  end

  defp request(at, {:delete_consumer, group, consumer}) do
    with {:ok, _} <- At.fetch(at, group),
         do: {:ok, Table.delete_consumer(at.table, at.c, group, consumer)}
  end

  defp request(at, {:info, group}), do: At.fetch(at, group)
  defp request(at, :count), do: {:ok, Table.group_count(at.table, at.c)}
  defp request(at, {:groups, count}), do: {:ok, groups(at, count)}

  defp request(at, {:consumers, group}) do
    with {:ok, _} <- At.fetch(at, group) do
      now = At.now()
      consumers = Table.consumers(at.table, at.c, group)
      {:ok, for({name, seen, pending} <- consumers, do: {name, pending, max(now - seen, 0)})}
    end
  end

  defp groups(%{table: t, c: c} = at, count) do
    next = Ring.next_seq(at.channel)

    for {name, g} <- Table.groups(t, c) do
      consumers =
        for {consumer, seen, pending} <- Table.consumers(t, c, name) do
          mine = Table.pending(t, c, name, 0, At.all(), count, consumer)
          entries = for {seq, _, time, n} <- mine, do: {seq, time, n}
          %{name: consumer, seen: seen, pending: pending, entries: entries}
        end

      %{
        name: name,
        last: g.last,
        entries_read: g.entries_read,
        lag: max(next - (g.last + 1), 0),
        lost: g.lost,
        pending: g.pending,
        dropped: g.dropped,
        entries: Table.pending(t, c, name, 0, At.all(), count),
        consumers: consumers
      }
    end
  end

  @doc """
  Every group of this node, for its figures (`Ringbus.Group.Table.summary/1`):
  each names its channel by incarnation, for the caller to name it.
  """
  @spec summary() :: [map()]
  def summary, do: Table.summary(Table.table())
end
