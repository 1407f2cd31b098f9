defmodule Ringbus.Group do
  @moduledoc false
  # Consumer groups of a channel, as Redis keeps them for a stream, in
  # seqs: each group has the seq of the last entry it delivered, how many
  # it has read, what left it (acked, dead, lost, dropped) and was
  # delivered again, its consumers and its pending entries list (PEL), with
  # each entry's consumer, delivery time (system ms), delivery count and
  # the time it is due again. Entries are claimed by idle time, read again
  # by their consumer, acked; the Elixir API's fetches also deliver again
  # those that come due.
  # Any front end may offer them: a group request is an operation of
  # `Ringbus.Op`, `{:group, request}`, which `run/3` carries out on the
  # channel's handle, where the channel lives (its home; see
  # `Ringbus.Group.Table` for the rows and their bounds). Requests and
  # answers are plain data: seqs, counts, names, `{:error, reason}`.
  #
  # A request never waits on a process: it reads the ring and changes the
  # table, so a link runs another node's at once. A read of entries answers
  # at most `room` div 4 bytes of payloads (the first entry always), as a
  # channel read does, and the rest at the next. The one request that may
  # wait, a fetch for new entries, returns an effect, `{:wait, fun}`, that
  # waits in whoever runs it (`Ringbus.Group.Fetch`).
  #
  # Time: each request reads the clock once (`Ringbus.Group.At.now/0`,
  # system ms; a fetch that waits reads it again each time it wakes) and
  # every decision that depends on it takes that `now`
  # (`Ringbus.Group.Redelivery`).
  #
  # A replicated channel's groups are kept in its log: every group request
  # on it is a command that each member's machine applies with `decided/4`
  # to its own ring and table, at the time the leader stamped in it, so
  # every member holds the same groups and a new leader carries on
  # (`Ringbus.Group.Logged` sends them and waits). A snapshot of the
  # channel carries its rows (`rows/1`, `load/2`).
  #
  # The seqs a caller gives (`ref`) may say which incarnation of the channel
  # they are of, so that a position kept from a creation gone is refused
  # (`{:error, :new_incarnation}`) and an entry of it names nothing here.

  alias Ringbus.Channel
  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{Claims, Fetch, Hold, Push, Reads, At, Table, TableOwner}

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
      read `entries_read` (nil: `from` + 1; -1: unknown, as Redis's until a
      read passes the first entry or reaches the last): `:ok`, or `{:error, :exists |
      {:too_many_groups, limit} | :new_incarnation}`
    * `{:set_id, group, from, entries_read}` - moves a group (nil
      `entries_read` keeps it): `:ok` or `{:error, :no_group | :new_incarnation}`
    * `{:destroy, group}` - `{:ok, destroyed?}`
    * `{:create_consumer, group, consumer}` - `{:ok, :created | :exists}`,
      or `{:error, :no_group | {:too_many_consumers, limit}}`
    * `{:delete_consumer, group, consumer}` - `{:ok, pending_entries_dropped}`
    * `{:info, group}` - `{:ok, %{last, entries_read, lost, pending, dropped,
      acked, redelivered, dead, held, config}}` (`Ringbus.Group.Table.group()`)
    * `:count` - `{:ok, groups}`
    * `{:groups, count}` - `{:ok, [group]}`, each a map: `name`, `last`,
      `entries_read`, `lag`, `lost`, `pending` (how many), `dropped`,
      `first` and `next` (the channel's first and next seqs),
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

  The Elixir API's requests (`Ringbus.Groups`; `owner` is the process
  that fetches, watched so that its consumer's entries are due when it
  exits):

    * `{:create, group, from, entries_read, config}` - as `:create`, with
      `Ringbus.Group.Table.config()`; `from` may also be `:first`, before
      the oldest entry the channel holds. A holding group (`hold: true`,
      `Ringbus.Group.Hold`) needs a channel that rejects, else
      `{:error, :hold_needs_reject_channel}`
    * `{:fetch, group, consumer, owner, max, wait_ms}` - up to `max`
      entries, due ones first, then new ones: `{:ok, {[{seq, payload,
      deliveries}], dead_letter, dead}}`, `dead` the entries for the
      group's `dead_letter` channel (same shape); with none and `wait_ms` >
      0, waits for them. A fetch that takes the consumer from an owner that
      has exited makes that owner's entries due first
    * `{:ack_fetch, [ref], fetch}` - acks as `:ack` does, then `fetch` (a
      `:fetch` of the same group): `{:ok, {acked, fetched}}`, `fetched`
      as the fetch answers, or the fetch's error (on a replicated channel,
      one command where the two are two)
    * `{:nack, group, [ref], delay_ms}`, `{:in_progress, group, [ref]}` -
      `{:ok, changed}`
    * `{:reclaim, group, consumer, owner, [ref]}`, `{:reclaim_idle, group,
      consumer, owner, min_idle, count}` - pending entries go to
      `consumer`, delivered once more: `{:ok, [{seq, payload, deliveries}]}`
    * `{:remove_consumer, group, consumer}` - its entries are due at once:
      `{:ok, due}`
    * `{:bury, group, [seq]}` - dead entries pushed to the dead-letter
      channel leave the group: `{:ok, buried}`
    * `:figures` - `{:ok, [map]}`, each group's (`Ringbus.Group.Redelivery.figures/6`)
    * `{:orphan, group, consumer, owner}` - the consumer's pending entries
      are due at once if `owner` still owns it (it exited): `{:ok, due}`
    * `{:figures, groups, consumers}` - the same for the first `groups`
      groups and the first `consumers` consumers among them, each group's
      with `consumers_omitted`: `{:ok, [map], %{groups: omitted, consumers:
      omitted}}` (the metrics' bounded scrape)

  A push subscription's (`Ringbus.Group.Push`):

    * `{:attach, group, consumer, owner, pid, ref}` - `owner` owns the
      consumer, and `pid` is told its acks: `:ok`
    * `{:push_fetch, group, consumer, owner, max}` - a `:fetch` that does
      not wait, while `owner` still owns the consumer, else `{:error,
      :owner_gone}`
    * `{:detach, group, consumer, pid}` - no more: `{:ok, detached?}`
    * `{:held, group, consumer, [{seq, deliveries}]}` - those still the
      consumer's at that delivery and not due: `{:ok, [{seq, deliveries, due_ms}]}`
    * `{:next_due, group}` - `{:ok, due_ms | nil}`

  Every request on a group that does not exist answers `{:error,
  :no_group}`, except `:ack` (`{:ok, 0}`), `:destroy` and both `:figures`.
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
          | {:create, binary(), ref() | :last | :first, nil, Table.config()}
          | {:fetch, binary(), binary(), pid(), pos_integer(), non_neg_integer()}
          | {:ack_fetch, [ref()], {:fetch, binary(), binary(), pid(), pos_integer(), integer()}}
          | {:nack, binary(), [ref()], non_neg_integer()}
          | {:in_progress, binary(), [ref()]}
          | {:reclaim, binary(), binary(), pid(), [ref()]}
          | {:reclaim_idle, binary(), binary(), pid(), non_neg_integer(), pos_integer()}
          | {:remove_consumer, binary(), binary()}
          | {:bury, binary(), [non_neg_integer()]}
          | :figures
          | {:orphan, binary(), binary(), pid()}
          | {:figures, non_neg_integer(), non_neg_integer()}
          | {:attach, binary(), binary(), pid(), pid(), reference()}
          | {:push_fetch, binary(), binary(), pid(), pos_integer()}
          | {:detach, binary(), binary(), pid()}
          | {:held, binary(), binary(), [{non_neg_integer(), pos_integer()}]}
          | {:next_due, binary()}

  @doc """
  Runs `request` on the groups of `channel`; `room` bounds the entries it
  answers. `{:reply, answer}`, or `{:wait, fun}` (a fetch that waits):
  `fun` waits in the process that runs it, and returns the answer.
  """
  @spec run(Channel.t(), request(), pos_integer() | :infinity) ::
          {:reply, term()} | {:wait, (() -> term())}
  def run(%Channel{} = channel, request, room) do
    at = at(channel, room, nil)

    # A channel with holding groups learns their floor after each request.
    case request(at, request) do
      {:wait, fun} -> {:wait, fn -> then(fun.(), &(Hold.publish(at) && &1)) end}
      answer -> Hold.publish(at) && {:reply, answer}
    end
  end

  @doc """
  Runs `request` as a replicated channel's machine applies it from the
  log, at `now` (the leader's stamp, system ms): the same on every member,
  so it never waits (a fetch's wait is its sender's, `Ringbus.Group.Logged`)
  and watches no owner from here.
  """
  @spec decided(Channel.t(), request(), pos_integer() | :infinity, integer()) :: term()
  def decided(channel, request, room, now) do
    at = at(channel, room, now)
    answer = request(at, without_wait(request))
    # The channel's holding groups publish their floor, which the machine's
    # next push reads (`Ringbus.Replica.Machine`).
    Hold.publish(at)
    answer
  end

  defp without_wait({:fetch, group, consumer, owner, max, _wait}),
    do: {:fetch, group, consumer, owner, max, 0}

  defp without_wait({:ack_fetch, refs, fetch}), do: {:ack_fetch, refs, without_wait(fetch)}
  defp without_wait(request), do: request

  defp at(%Channel{incarnation: c, anchor: anchor} = channel, room, now) do
    at = At.new(channel, room, now)
    if Table.watch(at.table, c, anchor), do: TableOwner.watch(c, anchor)
    at
  end

  @doc "The channel's group rows, for its snapshot."
  @spec rows(Channel.t()) :: [tuple()]
  def rows(%Channel{incarnation: c}), do: Table.dump(Table.table(), c)

  @doc "Whether the channel has a group."
  @spec any?(Channel.t()) :: boolean()
  def any?(%Channel{incarnation: c}), do: Table.any?(Table.table(), c)

  @doc "The channel's groups become those of `rows` (`rows/1`, from a snapshot)."
  @spec load(Channel.t(), [tuple()]) :: :ok
  def load(%Channel{incarnation: c} = channel, rows) do
    :ok = Table.restore(Table.table(), c, rows)
    Hold.loaded(at(channel, :infinity, nil))
  end

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

  defp request(at, {:fetch, group, consumer, owner, max, wait}),
    do: Fetch.fetch(at, group, consumer, owner, max, wait)

  # The acks first: what they free counts for the fetch's `max_pending`.
  defp request(at, {:ack_fetch, refs, {:fetch, group, _, _, _, _} = fetch}) do
    {:ok, acked} = Reads.ack(at, group, refs)

    case request(at, fetch) do
      {:ok, fetched} ->
        {:ok, {acked, fetched}}

      {:wait, fun} ->
        {:wait, fn -> with({:ok, fetched} <- fun.(), do: {:ok, {acked, fetched}}) end}

      error ->
        error
    end
  end

  defp request(at, {:nack, group, refs, delay}), do: Fetch.nack(at, group, refs, delay)
  defp request(at, {:in_progress, group, refs}), do: Fetch.in_progress(at, group, refs)

  defp request(at, {:reclaim, group, consumer, owner, refs}),
    do: Fetch.claim(at, group, consumer, owner, refs)

  defp request(at, {:reclaim_idle, group, consumer, owner, min_idle, count}),
    do: Fetch.autoclaim(at, group, consumer, owner, min_idle, count)

  defp request(at, {:remove_consumer, group, consumer}),
    do: Fetch.remove_consumer(at, group, consumer)

  defp request(at, {:bury, group, seqs}), do: Fetch.bury(at, group, seqs)

  defp request(at, :figures) do
    {figures, _, _} = Fetch.figures(at, At.all(), At.all())
    {:ok, Enum.map(figures, &Map.delete(&1, :consumers_omitted))}
  end

  defp request(at, {:figures, groups, consumers}) do
    {figures, groups_omitted, consumers_omitted} = Fetch.figures(at, groups, consumers)
    {:ok, figures, %{groups: groups_omitted, consumers: consumers_omitted}}
  end

  defp request(%{table: t, c: c} = at, {:orphan, group, consumer, owner}) do
    if Table.disown(t, c, group, consumer, owner),
      do: {:ok, TableOwner.orphan(t, at.channel, {c, group, consumer}, at.now)},
      else: {:ok, 0}
  end

  defp request(at, {:attach, group, consumer, owner, pid, ref}),
    do: Push.attach(at, group, consumer, owner, pid, ref)

  defp request(at, {:push_fetch, group, consumer, owner, max}),
    do: Push.fetch(at, group, consumer, owner, max)

  defp request(at, {:detach, group, consumer, pid}), do: Push.detach(at, group, consumer, pid)
  defp request(at, {:held, group, consumer, held}), do: Push.held(at, group, consumer, held)
  defp request(at, {:next_due, group}), do: Push.next_due(at, group)

  defp request(at, {:create, group, from, entries_read}),
    do: request(at, {:create, group, from, entries_read, Table.config()})

  defp request(at, {:create, group, from, entries_read, config}) do
    with :ok <- Hold.check(at, config),
         {:ok, last} <- At.position(at, from) do
      read = entries_read || max(last + 1, 0)

      case Table.create(at.table, at.c, group, last, read, config) do
        :ok -> Hold.made(at, group, config)
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

  defp request(at, {:destroy, group}) do
    with {:ok, g} <- At.fetch(at, group),
         true <- Table.destroy(at.table, at.c, group) do
      Hold.gone(at, g.config)
      {:ok, true}
    else
      _ -> {:ok, false}
    end
  end

  defp request(at, {:create_consumer, group, consumer}) do
    with {:ok, _} <- At.fetch(at, group) do
      case Table.add_consumer(at.table, at.c, group, consumer, at.now) do
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
      consumers = Table.consumers(at.table, at.c, group)
      {:ok, for({name, seen, pending} <- consumers, do: {name, pending, max(at.now - seen, 0)})}
    end
  end

  defp groups(%{table: t, c: c} = at, count) do
    {first, next} = {Ring.first_seq(at.channel), Ring.next_seq(at.channel)}

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
        first: first,
        next: next,
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
