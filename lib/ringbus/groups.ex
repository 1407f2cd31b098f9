defmodule Ringbus.Groups do
  @moduledoc """
  Consumer groups: a channel's messages shared out among named consumers,
  each message acked once, and delivered again until it is.

  `Ringbus.pull/1` hands a message out at most once and a subscription
  never delivers one again; a group keeps every message it delivered
  pending until a consumer acks it, and delivers it again when its
  consumer takes too long (`ack_wait`), gives it back (`nack/4`) or goes
  away (its process exits). Like NATS JetStream's durable consumers,
  RabbitMQ's quorum queues and Redis's stream groups.

  ## Example

      :ok = Ringbus.create("jobs", capacity: 100_000)
      :ok = Ringbus.Groups.create("jobs", "workers", from: :earliest, ack_wait: 5_000)
      {:ok, _} = Ringbus.push_many("jobs", ["resize 1.png", "resize 2.png"])

      # In each worker:
      {:ok, [{seq, "resize 1.png", 1}]} = Ringbus.Groups.fetch("jobs", "workers", "w1", 1)
      # ... the work ...
      {:ok, 1} = Ringbus.Groups.ack("jobs", "workers", [seq])

      # Waits up to 1 s for a message rather than answering [] at once:
      {:ok, messages} = Ringbus.Groups.fetch("jobs", "workers", "w1", 10, timeout: 1_000)

  A fetch answers `{seq, payload, deliveries}` for each message:
  `deliveries` is 1 the first time, and counts up each time it is
  delivered again.

  ## Delivery

  `fetch/5` first delivers again the group's messages that are due, in the
  order they came due, then new ones in seq order. A delivered message is
  pending, for the consumer that fetched it, and comes due again:

    * `ack_wait` ms after its delivery, unless acked first (`ack/3`);
      `in_progress/3` starts that wait again for a consumer still at work;
    * after `nack/4`'s delay, when its consumer gives it back;
    * at once when its consumer goes away: the process that fetches for a
      consumer is that consumer's owner, and when it exits (or its node
      goes down) the consumer's pending messages are due;
      `remove_consumer/3` does the same on purpose.

  So nothing acked is delivered again, and every message that is not is
  delivered again, until `max_deliver` deliveries: then it is dead,
  pushed to the `dead_letter` channel when there is one, and counted.
  A message leaves a group only acked, dead, or lost to the ring (the
  channel overwrote or trimmed it first), each counted by `info/1`:

      acked + dead + lost + pending + lag == messages pushed since the group's start

  (RESP's commands can break it on purpose: `XGROUP SETID` moves a
  group, `XGROUP DELCONSUMER` drops pending messages, and `XREADGROUP`
  drops the oldest pending ones past `max_pending`, counted `dropped`.)

  A group holds at most `max_pending` pending messages: at the bound a
  fetch delivers no new ones (it still delivers due ones) and counts
  `held`; the new messages wait in the channel, where a ring that is full
  may overwrite them (counted `lost`). So size the channel's `:capacity`
  for how far behind the group may fall.

  Any number of processes may fetch for one group at once, under one
  consumer name or many: no message is delivered to two of them at once.
  No process is asked: a fetch reads the ring and changes the group's
  table in the caller, and a fetch that waits (`timeout:`) waits in the
  caller, woken by the next push.

  ## Push

  `subscribe/4` delivers a consumer's messages to the calling process, as
  `Ringbus.subscribe/2` delivers a channel's: `{:ringbus, sub, [{seq,
  payload}], 0}` batches (`lost` is 0: the group counts what it lost,
  `info/1`), at most `:max_credit` messages delivered and not acked. Each
  message is acked by seq with `ack/3`, from any process and any node,
  and that gives its credit back; `Ringbus.ack/2` gives none. A message
  that comes due again unacked (after `ack_wait`, a nack, a claim) no
  longer counts against the credit either, and goes to whichever consumer
  fetches first, this one included.

      {:ok, sub} = Ringbus.Groups.subscribe("jobs", "workers", "w1", max_credit: 10)

      receive do
        {:ringbus, ^sub, messages, _lost} ->
          # ... the work ...
          {:ok, _} = Ringbus.Groups.ack("jobs", "workers", Enum.map(messages, &elem(&1, 0)))
      end

  The subscriber is the consumer's owner, as a fetching process is: when
  it exits, its pending messages are due at once. `Ringbus.unsubscribe/1`
  ends the deliveries; the messages it had stay pending, for it to ack
  (or for `ack_wait`, or its exit). The subscription lives where the
  channel lives and waits there for pushes, as a fetch that waits does;
  it ends with `{:ringbus_closed, sub, reason}` as a channel's
  subscription does, with `:no_group` when its group is deleted, and with
  `:owner_gone` when another process fetched for its consumer (and so
  took it over).

  ## Holding

  By default a group only reads its channel: a ring that is full
  overwrites (`:drop_oldest`) or refuses pushes (`:reject`) whatever the
  group has done, and a group that falls behind loses messages (`lost`).
  A work queue wants the opposite: on a channel with `overflow: :reject`,
  a group made with `hold: true` keeps every message in the ring until it
  has acked it (or it is dead), as RabbitMQ's queues and JetStream's
  work-queue streams do:

      :ok = Ringbus.create("tasks", capacity: 2, overflow: :reject)
      :ok = Ringbus.Groups.create("tasks", "workers", from: :earliest, hold: true)
      {:ok, _} = Ringbus.push_many("tasks", ["t0", "t1"])
      {:error, :full} = Ringbus.push("tasks", "t2")       # nothing acked yet
      {:ok, [{0, "t0", 1}]} = Ringbus.Groups.fetch("tasks", "workers", "w", 1)
      {:ok, 1} = Ringbus.Groups.ack("tasks", "workers", [0])
      {:ok, 2} = Ringbus.push("tasks", "t2")              # t0 made room

  The rules, with one holding group or several:

    * a push that needs room frees the oldest messages every holding group
      has acked (or given up dead), and is refused `:full` only when the
      ring is still full: nothing a holding group has not acked leaves it.
      So `info/1` of the channel reads `pushed == pulled + len` with
      `overwritten` 0, `pulled` counting the messages freed; they go
      when room is needed, so `len` counts acked ones until then;
    * `Ringbus.pull/1` answers `:empty`: the holding groups are the
      channel's consumers, and hand each message out themselves. A trim
      (RESP's `XTRIM`, `XADD MAXLEN`) takes only messages every holding
      group acked;
    * a group without `hold` on the same channel reads as before, and
      loses (`lost`) what the holding groups' acks freed before it read it;
    * a holding group made after others starts no earlier than the oldest
      message one of them has not acked: what all acked is consumed;
    * only a channel with `overflow: :reject` takes one
      (`:hold_needs_reject_channel`), memory or replicated (its log decides
      what a push frees, from the floor its groups reached, alike on every
      member). RESP's commands that drop pending entries on purpose
      (`XGROUP DELCONSUMER`, an `XREADGROUP` past `max_pending`, counted
      `dropped`) release them as acks do; `XGROUP SETID` moving a holding
      group back, and `XCLAIM ... FORCE`, can name messages already freed.

  ## Dead letters

  A message delivered `max_deliver` times and due again is dead. Without
  a `dead_letter` channel it leaves the group, counted `dead`. With one,
  the fetch that finds it pushes it there (the caller does, before
  `fetch/5` returns) and then it leaves the group, counted `dead`; should
  that push fail (the dead-letter channel is full, or gone), the message
  stays pending and the next fetch after `ack_wait` tries again, so a
  dead message may reach the channel twice, never zero times. A dead
  letter is the binary

      <<"rbdl", 1, seq::64, deliveries::32, group_size::16, group::binary,
        channel_size::16, channel::binary, payload::binary>>

  (big-endian; `channel` the channel's name, a binary name as it is, any
  other `inspect/1`ed); `decode_dead_letter/1` reads it.

  ## In a cluster

  Every function works on the channels of every node, as one request
  through the link to the channel's home, where the group lives, with the
  three outcomes of `Ringbus`'s "In a cluster". A fetch that waits waits
  at the home, in the process the link starts for it, and the call waits
  up to its `timeout:` plus 100 ms. A consumer whose owner is on another
  node has its messages due when that node disconnects from the home.
  A fetch answered `{:error, :timeout}` may have delivered messages: they
  come due after `ack_wait`.

  ## Over the binary protocol

  `Ringbus.Client.Groups` (protocol version 5, docs/PROTOCOL.md section
  11) offers these groups over a connection, which the server runs as
  calls of this module: the connection is the owner of the consumers it
  fetches for.

  ## Over RESP

  These are the groups RESP's `XGROUP`, `XREADGROUP`, `XACK`, `XCLAIM`...
  use (`docs/RESP.md`): a group made over RESP can be fetched here and the
  other way round. A group made over RESP has the defaults below. RESP's
  commands keep Redis's semantics: a message read with `XREADGROUP` stays
  pending until acked or claimed, whatever becomes of the client; a fetch
  here delivers it again once it has been pending `ack_wait`, as an
  `XAUTOCLAIM` with that idle time would.

  ## Time

  Each request reads the home node's system clock once, and every
  decision that depends on time (what is due, what is dead) is taken
  with that reading; on a replicated channel, the time the leader stamped
  in the request's log entry.

  ## Replicated channels

  A replicated channel's groups are kept in its Raft log: every request
  here is a command of the log (many requests go as one; `ack_fetch/6`'s
  acks and fetch are one), applied alike by every member, so every member
  holds the same groups, a new leader carries on where the old one stood,
  and the groups come back with the channel after a restart. A fetch that waits, waits on the member that runs it;
  the exit of the process that fetched is sent through the log from there
  (if that member's node goes down too, the consumer's messages are due
  after `ack_wait`).
  """

  import Ringbus.Groups.Args

  alias Ringbus.Groups.DeadLetter
  alias Ringbus.{Options, Replica}

  # What a remote fetch that waits waits for its answer beyond its timeout
  # (one that carries acks, also what `ack/3` waits for their commit).
  @reply_ms 100

  @typedoc "A group or consumer name: a non-empty binary."
  @type name :: binary()

  @typedoc "A delivered message: its seq, payload and how many times it was delivered."
  @type message :: {Ringbus.seq(), binary(), pos_integer()}

  @typedoc """
  A delivered message with the time it was stored (system ms), nil if it
  left the ring before that was read: `fetch/5`'s `times: true`.
  """
  @type timed_message :: {Ringbus.seq(), binary(), pos_integer(), integer() | nil}

  @typedoc "Why a request failed: the group does not exist, or `t:Ringbus.reason/0`."
  @type reason :: :no_group | :no_channel | Ringbus.node_error()

  @typedoc """
  `create/3`'s options:

    * `:from` - where the group starts: `:earliest` (the oldest message the
      channel holds), `:latest` (the next message pushed), a seq (the
      first message it delivers) or `{:time, ms}` (the first message
      stored at or after that system time, found where the channel lives;
      see "Time" in `Ringbus`). Defaults to `:latest`.
    * `:ack_wait` - ms a delivered message waits for its ack before it is
      due again. Defaults to `30_000`.
    * `:max_deliver` - deliveries of a message at most, or `:infinity`.
      Defaults to `:infinity`.
    * `:dead_letter` - a channel name to push dead messages to (see "Dead
      letters"), or nil. Defaults to `nil`.
    * `:max_pending` - pending messages at most (1 to 1,000,000). Defaults
      to `10_000`.
    * `:hold` - whether the channel keeps each message until this group
      has acked it (see "Holding"). Defaults to `false`.
  """
  @type options :: [
          from: :earliest | :latest | Ringbus.seq() | {:time, non_neg_integer()},
          ack_wait: pos_integer(),
          max_deliver: pos_integer() | :infinity,
          dead_letter: Ringbus.name() | nil,
          max_pending: pos_integer(),
          hold: boolean()
        ]

  @doc """
  Creates group `group` of `channel`. Bad options raise `ArgumentError`.

  Errors: `:exists`, `{:too_many_groups, 64}`, `:no_channel`, or a
  cluster error; with `hold: true`, `:hold_needs_reject_channel` (see
  "Holding").

      iex> Ringbus.create("doc-groups-create", capacity: 10)
      iex> Ringbus.Groups.create("doc-groups-create", "g", ack_wait: 1_000)
      :ok
      iex> Ringbus.Groups.create("doc-groups-create", "g")
      {:error, :exists}
      iex> Ringbus.delete("doc-groups-create")
      :ok
  """
  @spec create(Ringbus.name(), name(), options()) ::
          :ok
          | {:error,
             :exists
             | {:too_many_groups, pos_integer()}
             | :hold_needs_reject_channel
             | reason()}
  def create(channel, group, opts \\ []) do
    name!(:group, group)
    opts = create_options!(opts)
    config = Map.new(Keyword.delete(opts, :from))
    request(channel, {:create, group, position(opts[:from]), nil, config})
  end

  @doc """
  Up to `max` messages for `consumer` of `group`: first those due again
  (`{seq, payload, deliveries}` with `deliveries` above 1), then new ones.
  The calling process becomes the consumer's owner: when it exits, the
  consumer's pending messages are due at once.

  With `timeout: ms` (default `0`), a fetch that finds nothing waits up to
  `ms` for a message, and answers as soon as one is pushed or comes due.
  `owner: pid` (default the calling process) names another owner: a
  server's connection that waits in a process of its own stays the owner
  of the consumers it fetches for. With `times: true` (default `false`),
  each message comes with the time it was stored (system ms, see "Time" in
  `Ringbus`): `{seq, payload, deliveries, ms}`, read where the channel
  lives once the fetch has answered, so `ms` is nil for a message that
  left the ring in between (overwritten, expired).
  A fetch from another node answers at most a quarter of the cluster's
  `:max_buffer_bytes` of payloads (always one message), as `Ringbus.read/3`.

      iex> Ringbus.create("doc-groups-fetch", capacity: 10)
      iex> :ok = Ringbus.Groups.create("doc-groups-fetch", "g")
      iex> {:ok, _} = Ringbus.push_many("doc-groups-fetch", ["a", "b"])
      iex> Ringbus.Groups.fetch("doc-groups-fetch", "g", "c1", 10)
      {:ok, [{0, "a", 1}, {1, "b", 1}]}
      iex> Ringbus.Groups.nack("doc-groups-fetch", "g", [1])
      {:ok, 1}
      iex> Ringbus.Groups.fetch("doc-groups-fetch", "g", "c2", 10)
      {:ok, [{1, "b", 2}]}
      iex> Ringbus.delete("doc-groups-fetch")
      :ok
  """
  @spec fetch(Ringbus.name(), name(), name(), pos_integer(),
          timeout: non_neg_integer(),
          owner: pid(),
          times: boolean()
        ) ::
          {:ok, [message() | timed_message()]} | {:error, reason()}
  def fetch(channel, group, consumer, max, opts \\ []) do
    with {:ok, {_acked, messages}} <- fetching(channel, group, consumer, nil, max, opts),
         do: {:ok, messages}
  end

  @doc """
  Acks `seqs`, then fetches as `fetch/5` does (same options), in one
  request: on a replicated channel, one command of its log where `ack/3`
  and `fetch/5` are two, so a consumer that acks each batch as it fetches
  the next waits for one commit a batch. Returns how many of `seqs` were
  pending, as `ack/3`, and the messages fetched. An error says the fetch
  failed; the acks may have been done (as a timed-out `ack/3`'s may).

      iex> Ringbus.create("doc-groups-ack-fetch", capacity: 10)
      iex> :ok = Ringbus.Groups.create("doc-groups-ack-fetch", "g", from: :earliest)
      iex> {:ok, _} = Ringbus.push_many("doc-groups-ack-fetch", ["a", "b"])
      iex> Ringbus.Groups.fetch("doc-groups-ack-fetch", "g", "c1", 1)
      {:ok, [{0, "a", 1}]}
      iex> Ringbus.Groups.ack_fetch("doc-groups-ack-fetch", "g", "c1", [0], 10)
      {:ok, 1, [{1, "b", 1}]}
      iex> Ringbus.delete("doc-groups-ack-fetch")
      :ok
  """
  @spec ack_fetch(Ringbus.name(), name(), name(), [Ringbus.seq()], pos_integer(),
          timeout: non_neg_integer(),
          owner: pid(),
          times: boolean()
        ) ::
          {:ok, non_neg_integer(), [message() | timed_message()]} | {:error, reason()}
  def ack_fetch(channel, group, consumer, seqs, max, opts \\ []) do
    with {:ok, {acked, messages}} <- fetching(channel, group, consumer, seqs!(seqs), max, opts),
         do: {:ok, acked, messages}
  end

  defp fetching(channel, group, consumer, acks, max, opts) do
    names!(group, consumer)
    positive!(:max, max)
    opts = Options.validate!(opts, [timeout: 0, owner: nil, times: false], "fetch")
    Options.check!(:times, opts[:times], &is_boolean/1, "a boolean")
    wait = opts[:timeout]
    Options.check!(:timeout, wait, &(is_integer(&1) and &1 >= 0), "a non-negative integer")
    owner = opts[:owner] || self()
    Options.check!(:owner, owner, &is_pid/1, "a pid")

    extra = if acks, do: @reply_ms + Replica.default_timeout(), else: @reply_ms
    run_opts = if wait > 0, do: [timeout: wait + extra], else: []
    request = {:fetch, group, consumer, owner, max, wait}
    op = {:group, if(acks, do: {:ack_fetch, acks, request}, else: request)}
    op = if opts[:times], do: {:times, op}, else: op

    case Ringbus.run(channel, op, run_opts) do
      {:ok, {acked, fetched}} -> {:ok, {acked, delivered(channel, group, fetched)}}
      {:ok, fetched} -> {:ok, {0, delivered(channel, group, fetched)}}
      error -> error
    end
  end

  defp delivered(_channel, _group, {messages, _dead_letter, []}), do: messages

  defp delivered(channel, group, {messages, dead_letter, dead}) do
    bury(channel, group, dead_letter, dead)
    messages
  end

  @typedoc "`subscribe/4`'s options."
  @type subscribe_options :: [
          max_credit: pos_integer(),
          max_batch: pos_integer(),
          deliveries: boolean(),
          times: boolean()
        ]

  @doc """
  Subscribes the calling process to `consumer`'s messages of `group` (see
  "Push"): due ones first, then new ones, as `fetch/5` takes them.

    * `:max_credit` - messages delivered and not acked (`ack/3`), at most.
      Defaults to `1000`.
    * `:max_batch` - messages in one batch, at most. Defaults to `256`.
    * `:deliveries` - when true, each message comes with its delivery
      count, `{seq, payload, deliveries}`, as `fetch/5` has it. Defaults
      to `false`.
    * `:times` - when true, each message comes with its delivery count and
      the time it was stored, `{seq, payload, deliveries, ms}` (ms `nil`
      when it left the ring before its time was read). Defaults to `false`.

  Errors: `:no_group`, `:no_channel`, or a cluster error. Bad options
  raise `ArgumentError`.

      iex> Ringbus.create("doc-groups-push", capacity: 10)
      iex> :ok = Ringbus.Groups.create("doc-groups-push", "g")
      iex> {:ok, sub} = Ringbus.Groups.subscribe("doc-groups-push", "g", "w1", max_credit: 2)
      iex> {:ok, _} = Ringbus.push_many("doc-groups-push", ["a", "b", "c"])
      iex> receive do {:ringbus, ^sub, messages, 0} -> messages after 5_000 -> :none end
      [{0, "a"}, {1, "b"}]
      iex> Ringbus.Groups.ack("doc-groups-push", "g", [0, 1])
      {:ok, 2}
      iex> receive do {:ringbus, ^sub, messages, 0} -> messages after 5_000 -> :none end
      [{2, "c"}]
      iex> Ringbus.unsubscribe(sub)
      :ok
      iex> Ringbus.delete("doc-groups-push")
      :ok
  """
  @spec subscribe(Ringbus.name(), name(), name(), subscribe_options()) ::
          {:ok, Ringbus.subscription()} | {:error, reason()}
  def subscribe(channel, group, consumer, opts \\ []) do
    names!(group, consumer)
    defaults = [max_credit: 1000, max_batch: 256, deliveries: false, times: false]
    opts = Options.validate!(opts, defaults, "group subscription")
    positive!(:max_credit, opts[:max_credit])
    positive!(:max_batch, opts[:max_batch])
    Options.check!(:deliveries, opts[:deliveries], &is_boolean/1, "a boolean")
    Options.check!(:times, opts[:times], &is_boolean/1, "a boolean")

    opts = [group: {group, consumer}, owner: self(), channel: channel, bury: &bury/4] ++ opts

    Ringbus.run(channel, {:subscribe, opts, self()})
  end

  @doc false
  # Dead messages go to the dead-letter channel, then leave the group; if
  # the push fails they stay pending, and a later fetch tries again. A push
  # subscription (`Ringbus.Group.Push`) is handed this, to do as a fetch's
  # caller does.
  def bury(channel, group, dead_letter, dead) do
    letters =
      for {seq, payload, n} <- dead, do: DeadLetter.encode(channel, group, seq, n, payload)

    with {:ok, _} <- Ringbus.push_many(dead_letter, letters) do
      request(channel, {:bury, group, for({seq, _, _} <- dead, do: seq)})
    end
  end

  @doc """
  Reads a dead letter (see "Dead letters").

      iex> {:ok, %{seq: 7, deliveries: 3, group: "g", payload: "p"}} =
      ...>   Ringbus.Groups.decode_dead_letter(
      ...>     <<"rbdl", 1, 7::64, 3::32, 1::16, "g", 2::16, "ch", "p">>
      ...>   )
      iex> Ringbus.Groups.decode_dead_letter("other")
      :error
  """
  @spec decode_dead_letter(binary()) ::
          {:ok,
           %{
             seq: Ringbus.seq(),
             deliveries: pos_integer(),
             group: binary(),
             channel: binary(),
             payload: binary()
           }}
          | :error
  defdelegate decode_dead_letter(letter), to: DeadLetter, as: :decode

  @doc "Acks messages: they leave the group. Returns how many were pending."
  @spec ack(Ringbus.name(), name(), [Ringbus.seq()]) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def ack(channel, group, seqs) do
    name!(:group, group)
    request(channel, {:ack, group, seqs!(seqs)})
  end

  @doc """
  Gives pending messages back: each is due again after `delay:` ms
  (default `0`, at once), for any consumer. Returns how many were pending.
  """
  @spec nack(Ringbus.name(), name(), [Ringbus.seq()], delay: non_neg_integer()) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def nack(channel, group, seqs, opts \\ []) do
    name!(:group, group)
    opts = Options.validate!(opts, [delay: 0], "nack")
    delay = opts[:delay]
    Options.check!(:delay, delay, &(is_integer(&1) and &1 >= 0), "a non-negative integer")
    request(channel, {:nack, group, seqs!(seqs), delay})
  end

  @doc """
  Says pending messages are still being worked on: each waits `ack_wait`
  from now before it is due. Returns how many were pending.
  """
  @spec in_progress(Ringbus.name(), name(), [Ringbus.seq()]) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def in_progress(channel, group, seqs) do
    name!(:group, group)
    request(channel, {:in_progress, group, seqs!(seqs)})
  end

  @doc """
  Takes pending messages over for `consumer`, whoever has them, due or
  not: each is delivered once more (`{seq, payload, deliveries}`), and the
  calling process becomes `consumer`'s owner, as with `fetch/5`. Messages
  not pending are left out.
  """
  @spec claim(Ringbus.name(), name(), name(), [Ringbus.seq()]) ::
          {:ok, [message()]} | {:error, reason()}
  def claim(channel, group, consumer, seqs) do
    names!(group, consumer)
    request(channel, {:reclaim, group, consumer, self(), seqs!(seqs)})
  end

  @doc """
  Takes over for `consumer` up to `count` pending messages delivered
  `min_idle` ms ago or more, lowest seq first, as `claim/4` does.
  """
  @spec autoclaim(Ringbus.name(), name(), name(), non_neg_integer(), pos_integer()) ::
          {:ok, [message()]} | {:error, reason()}
  def autoclaim(channel, group, consumer, min_idle, count) do
    names!(group, consumer)
    Options.check!(:min_idle, min_idle, &(is_integer(&1) and &1 >= 0), "a non-negative integer")
    positive!(:count, count)
    request(channel, {:reclaim_idle, group, consumer, self(), min_idle, count})
  end

  @doc """
  Removes a consumer: its pending messages are due at once, for the
  group's other consumers (each still names it until then). Returns how
  many.
  """
  @spec remove_consumer(Ringbus.name(), name(), name()) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def remove_consumer(channel, group, consumer) do
    names!(group, consumer)
    request(channel, {:remove_consumer, group, consumer})
  end

  @doc "Deletes a group, with its pending messages; `{:error, :no_group}` if none."
  @spec delete(Ringbus.name(), name()) :: :ok | {:error, reason()}
  def delete(channel, group) do
    name!(:group, group)

    case request(channel, {:destroy, group}) do
      {:ok, true} -> :ok
      {:ok, false} -> {:error, :no_group}
      error -> error
    end
  end

  @doc """
  The channel's groups, each a map:

    * `:name`
    * `:delivered` - the seq of the last new message delivered (-1: none)
    * `:pending` - messages delivered and not acked
    * `:lag` - messages in the channel after `:delivered`
    * `:redelivered` - deliveries after the first, in all
    * `:acked`, `:dead`, `:lost` - messages that left the group, by how
      (see "Delivery"); `:lost` counts those the ring overwrote or trimmed
      before the group delivered them (or delivered them again), exactly
    * `:held` - fetches that took fewer new messages than asked because
      `max_pending` messages were pending
    * `:dropped` - pending messages RESP's reads dropped at `max_pending`
      (Redis's semantics; a fetch holds instead)
    * `:config` - `ack_wait`, `max_deliver`, `dead_letter`, `max_pending`, `hold`
    * `:consumers` - each `%{name, pending, idle_ms}`: `idle_ms` since it
      last fetched or claimed
  """
  @spec info(Ringbus.name()) :: {:ok, [map()]} | {:error, :no_channel | Ringbus.node_error()}
  def info(channel), do: request(channel, :figures)

  defp request(channel, request), do: Ringbus.run(channel, {:group, request})
end
