defmodule Ringbus do
  # Kept whole: the public API in one module, whose documentation (half its
  # lines) is the user's guide; every operation is one line over on_channel/2.
  @moduledoc """
  Ringbus is a message bus whose channels are named, bounded rings of binaries.

  Every message pushed to a channel gets the next sequence number of that
  channel. A channel keeps at most `:capacity` messages; when it is full a push
  either overwrites the oldest message (`overflow: :drop_oldest`) or is
  refused (`overflow: :reject`), and either way the loss is counted.

  Channels live in ETS, outside any process heap, and every operation runs in
  the caller's process: pushes, pulls and reads touch the ring and a few
  `:atomics` directly, with no process hop. Only `create/2` and `delete/1` go
  through the process that owns the tables.

  ## Example

      :ok = Ringbus.create("events", capacity: 100_000)

      {:ok, 0} = Ringbus.push("events", "hello")
      {:ok, 1} = Ringbus.push_many("events", ["a", "b"])

      {:ok, [{0, "hello"}, {1, "a"}], 0} = Ringbus.read("events", 0, 2)
      {:ok, 0, "hello"} = Ringbus.pull("events")
      2 = Ringbus.len("events")

      {:ok, sub} = Ringbus.subscribe("events", from: :earliest)
      receive do
        {:ringbus, ^sub, messages, lost} -> Ringbus.ack(sub, length(messages))
      end

  ## Messages and loss

  Every message a push reported stored is, from then on, readable, pulled, or
  counted as overwritten, expired or deleted. A message leaves a channel in one
  of five ways, and each is counted in `info/1`: it is pulled (`pulled`),
  overwritten or dropped to make room (`overwritten`), older than the channel's
  `:max_age` (`expired`, see "Time"), deleted by seq (`deleted`,
  `delete_messages/2`), or it was never taken in (`rejected`). Reads
  and subscriptions never remove anything; when the messages they ask for are
  gone they say how many with a `lost` count.

  ## Concurrency

  Any number of processes may push, pull, read and subscribe at once. Messages
  from one producer keep their order. `pull/1` hands each message to at most
  one caller.

  ## In a cluster

  On distributed nodes (`Ringbus.Cluster`), every function here works on
  the channels of every node, with the same arguments and results. A
  channel of this node takes the local path above, unchanged; one of
  another node goes through that node's link, and a call then has one of
  three outcomes, never a false one:

    * done: `{:ok, ...}` (or `:ok`, `:empty`, a length), as locally;
    * not done: `{:error, reason}`, for any reason but `:timeout`. The
      operation was certainly not carried out: refused by the home node
      (`:full`, `:no_channel`, ...), or refused before it left this node:
      `:node_down` (not connected), `:node_busy` (its link is busy or full,
      or the request was still waiting to leave when the caller gave up,
      and was dropped unsent);
    * unknown: `{:error, :timeout}`. The request left for the home node and
      no answer came in time (the node stalled, went down, or the answer
      was slow): it may or may not have been carried out.

  So a producer may retry a push refused with `:node_busy` or `:node_down`
  without risk of a duplicate. A plain push retried after `:timeout`
  stores the message twice if the first one was stored; retry on timeout
  with the same producer tag is safe: a push under `producer: {id, n}`
  (`push/3`) is checked at the channel's home, which stores it once and
  answers every resend with the first one's seq (see "Producer tags").
  How long a call waits is bounded by the cluster options `:call_timeout`
  and `:reply_timeout` (`Ringbus.Cluster`), or by `push/3`'s `:timeout`.
  `channels/0` lists this node's channels. Consumer groups
  (`Ringbus.Groups`, and RESP's stream groups, which are the same groups)
  live at the channel's home too, and a group call from another node has
  the same three outcomes.

  ## Producer tags

  `push(name, payload_or_payloads, producer: {producer_id, n})` tags a
  push, on any channel, here or on another node:

      {:ok, 7} = Ringbus.push("events", "e-1", producer: {"billing", 1})
      # The answer was lost (say, {:error, :timeout}): send it again.
      {:ok, 7} = Ringbus.push("events", "e-1", producer: {"billing", 1})

  The channel stores a tagged push once, however often and however
  concurrently it is sent, and answers each send with the seq of the
  first. The rules:

    * A producer's `n` increases with each push (gaps are fine); any term
      is a producer id. Tags are kept per channel.
    * The channel remembers a producer's tags within 64 of its highest
      `n` stored: with `n` going up by one, its last 64 pushes. A resend
      of a tag at or below that highest `n` and still remembered answers
      the first seq; one older than that answers `{:error, :stale_tag}`
      (it may have been stored and forgotten). So retry a push before
      the producer is 64 tags further on.
    * A push refused (`:full`, `:too_large`) does not spend its tag: it
      may be sent again under the same tag.
    * At most 1024 producers per channel are remembered; past that the
      one whose last push is oldest is forgotten, and a resend of its
      tags stores them again.
    * Concurrent sends of one tag: one of them pushes, the others wait for
      its seq (a push never blocks, so the wait is short) and answer it;
      if it is refused, the next one tries.

  A memory channel keeps its tags in a table of its own, beside its ring,
  written by the pushing processes (no process hop); its home node's
  restart forgets them with the channel's messages. The one gap: a
  process killed between storing a tagged push and recording its seq
  leaves the tag unspent. A replicated channel keeps them in its Raft
  log, with the same rules (see "Replicated channels").

  ## Replicated channels

  `create(name, replicas: n, capacity: ...)` makes a durable channel, kept
  in Ra (RabbitMQ's Raft library) under the application env `:data_dir`
  (default: `ringbus_data/NODE` under the current directory). Its members
  are this node and the first `n - 1` nodes of `Node.list/0`, in that
  order; each has the channel's ring, and a Raft log on disk.

      :ok = Ringbus.create("orders", replicas: 1, capacity: 100_000)
      {:ok, 0} = Ringbus.push("orders", "o-1")
      {:ok, 1} = Ringbus.push("orders", "o-2", producer: {"billing", 2})

  `push/2`, `push_many/2`, `push/3` and `pull/1` go through the leader:
  they return once a majority of the members has the message on disk.
  Concurrent writes on one node are batched into one Raft entry.
  `read/3`, `len/1`, `subscribe/2` and `info/1` read this member's ring
  and see what it has applied. A member's node that restarts gets the
  channel back from its log, with its messages and counters. `info/1`
  adds `:replicas`, `:members`, `:role`, `:leader`, `:term`,
  `:commit_index` and `:applied_index` (Ra's, as of its last tick), and
  `:replication`: each member as this node knows it, from the reports
  every member's node sends the others each second (read from ETS: no
  process is asked, here or on a silent node):

    * `:node`, `:role` (`:leader`, `:follower`, `:candidate`, `:down`: its
      node is not connected or runs no Raft server for the channel, or
      `:unknown`: its last report is older than two report periods, 2 s,
      or there is none), `:age_ms` (since its node measured the figures,
      as this node received them; kept for an `:unknown` member); a member
      whose node is not connected or silent has no other figures (nil);
    * `:term`, `:commit_index`, `:applied_index`, `:snapshot_index` (Ra's,
      as of its last tick: with the report interval, up to about 2 s
      old), and `:applied_seq` (the newest seq its ring held at the
      report; -1 for none);
    * `:lag_entries` and `:lag_ms`, as the leader's node computed them at
      its last report, from the member's last report to it (nil when no
      report of a leader came within 2 s): `:lag_entries`, the entries
      committed that the member has not applied; `:lag_ms`, the age of
      the oldest of them, 0 when there is none: how long ago the commit
      index first reached the member's applied index + 1. Every member's
      node notes when it first sees each commit index (its member's, and
      each report's) and keeps the samples some member still needs, at
      most 64 per channel, the older thinned out: an entry committed long
      ago may read up to about a quarter of its age low. Ra publishes its
      indexes once a second and members report once a second, so
      `:lag_ms` reads up to about 1 s high for a member that keeps up and
      up to about 2 s low for one behind; a stalled member's grows with
      the time it is stalled, whatever its own Raft server still says (an
      ex-leader whose server stalled reports `:leader` in its old term);
    * `:elections`: terms it went through since its node first saw it
      (its node's start, or the channel's creation);
    * `:log_bytes`: every file of its Raft directory on disk (segments,
      snapshots, its config), `:segment_bytes`, those of its segments, and
      `:snapshot_bytes`, those of its snapshots; none counts the WAL;
    * `:mem_bytes`: its Raft log's entries in memory, Ra's ETS tables of
      the entries the WAL holds and its segments do not yet;
    * `:wal_bytes`, `:ets_bytes`: its node's, the same for every
      replicated channel there: the node's Raft WAL files, which every
      channel writes to until Ra rolls them over (the application env
      `:raft`'s `:wal_max_bytes`, README "Memory and disk") into each
      channel's segments, and Ra's ETS tables (the entries the WAL holds
      that no segment does yet, and their indexes; not the binaries over
      64 bytes they refer to, which the VM counts as `:binary` memory).
      Its node measures these bytes once per report, never on a read.

  A write answers `{:ok, seq}`, an error that means it was not done, or
  `{:error, :timeout}`: the outcome is unknown (the leader may have
  stored it before it went away). When the leader's node dies, a write in
  flight is sent again to the next leader, which applies it once: the
  caller gets its seq (or a pull its message) as soon as a new leader is
  elected, not at its timeout. A write that no leader could take before
  the caller's deadline (no majority of the members up) answers `{:error,
  :node_busy}`: it was not done. Retry a push that timed out under the
  same `producer: {id, n}` tag (`push/3`) and it is stored once.

  `add_replica/2` and `remove_replica/2` change a channel's members
  while it takes pushes: a new member catches up from the leader (by
  snapshot and log) and then serves reads from its own ring; a removed
  one drops its ring and log.

      :ok = Ringbus.add_replica("orders", :"b@host")
      :ok = Ringbus.remove_replica("orders", :"b@host")

  Every node of the cluster reaches a replicated channel, and its name is
  taken on every node: a create of the same name anywhere answers
  `{:error, :exists}`. On a node that is not a member, every function
  here goes through the cluster link to a member: a write to the leader
  as the members last named it, else (and every read) to the first in
  `:members`' order whose link is up, from where it goes to the leader;
  `delete/1` deletes every member's.
  The three outcomes of "In a cluster" hold, with `push/3`'s `:timeout`
  (default 5000 ms) bounding a write.

  ## Incarnations

  A channel's seqs count from 0 for each creation of it. A memory channel
  deleted and created again, or whose node restarted, starts again at seq
  0, so a consumer that resumes from the seq it reached would wait for
  seqs far ahead, or read another channel's messages under them. Each
  creation therefore has an incarnation, a random 64-bit integer shown by
  `info/1`, and a consumer that keeps a seq keeps the incarnation with it
  and states it when it resumes:

      {:ok, %{incarnation: inc}} = Ringbus.info("events")
      {:ok, messages, _lost} = Ringbus.read("events", 0, 100, incarnation: inc)
      # ... later, or after a restart of the consumer:
      case Ringbus.subscribe("events", from: next_seq, incarnation: inc) do
        {:ok, sub} -> sub
        {:error, :new_incarnation} -> start_over()
      end

  `read/4` and `subscribe/2` answer `{:error, :new_incarnation}` when the
  channel has another incarnation, on this node or at the channel's home
  node, where the check runs. A subscription already running when its
  channel goes away ends as before (`:channel_deleted`, `:node_down`); the
  next resume with the old incarnation is refused. A replicated channel
  draws its incarnation once at create and keeps it with its log, so its
  members' restarts keep it. Over the binary protocol, `READ` and
  `SUBSCRIBE` state it and their answers carry it (`docs/PROTOCOL.md`,
  `Ringbus.Client.read/5`); over RESP, stream IDs carry it
  (`docs/RESP.md`, "IDs").

  ## Time

  Every message carries the time it was stored, in system ms, read where
  the channel lives as the push reserves its seq, so that times never
  decrease in seq order, whatever the number of producers. A replicated
  channel's messages carry its leader's stamp, the same on every member
  (never less than the previous command's, should leaders' clocks differ).
  `info/1` gives `:oldest_time` and `:newest_time`; `read/4`,
  `subscribe/2` and `Ringbus.Groups.fetch/5` give each message's time
  with `times: true`; `read/3`,
  `subscribe/2`'s `:from` and `Ringbus.Groups.create/3`'s `:from` take
  `{:time, ms}`, the first message stored at or after that time, found by
  binary search over the messages held:

      {:ok, seq} = Ringbus.push("events", "hello")
      {:ok, [{^seq, "hello", ms}], 0} = Ringbus.read("events", seq, 1, times: true)
      {:ok, [{^seq, "hello"} | _], _lost} = Ringbus.read("events", {:time, ms}, 10)

  A channel created with `max_age: ms` lets messages older than that go,
  each counted `expired` in `info/1`, so that `pushed == pulled +
  overwritten + expired + deleted + len`; readers, subscribers and consumer groups
  count those they had not got as `lost`, as they count overwritten ones.
  A memory channel removes them as it is next used: every push, pull,
  read, `len/1`, `info/1`, subscription read and group request looks at
  the oldest message's time first (one look, no scan), so none of them
  sees an expired message; and the node's sweep lets them go from
  channels nobody uses, a bounded amount of work a sweep, as the
  application env `:expiry_sweep` sets it: every `interval:` ms (1000 by
  default) the next `channels:` such channels (100), at most `messages:`
  messages of each (1000). A replicated channel decides expiry in its
  log, at each command's stamp and at a timer its leader sets for the oldest message,
  so every member expires the same messages; a read on a member between
  the moment a message passes `max_age` and that command may still see it.

  ## State kept in the calling process

  Every function that takes a channel name finds the channel's handle (its
  tables and counters) in ETS. So as not to copy the handle out of ETS on
  every call, each process keeps the handles it has used in its process
  dictionary, under the key `{Ringbus.Store, :handles}`: at most 256 of
  them, dropped all at once when that many are cached. The cache is
  invalidated whenever any channel is deleted or Ringbus restarts, so a
  process never uses a deleted channel's handle past its next call. Nothing
  else of Ringbus lives in a caller.
  """

  alias Ringbus.{Channel, Op, Options, Store}
  alias Ringbus.Channel.{Ring, Subscription}
  alias Ringbus.Cluster.{Home, Router}
  alias Ringbus.Replica

  # A membership change through a member: its catalogue calls and Ra's
  # change, each bounded by the replica layer's management timeout.
  @membership_timeout 45_000

  # What a remote `subscriptions/2` waits beyond its survey's timeout.
  @survey_reply_ms 100

  @typedoc "A channel name. Channels reached over the network are named by binaries."
  @type name :: term()

  @typedoc "A sequence number: the position of a message in its channel."
  @type seq :: non_neg_integer()

  @typedoc """
  Where a read starts: a seq, or `{:time, ms}`, the first message stored at
  or after system time `ms` (see "Time").
  """
  @type from :: seq() | {:time, non_neg_integer()}

  @typedoc """
  A subscription, as returned by `subscribe/2`. Match batches with `^sub` and
  pass it to `ack/2` and `unsubscribe/1`; its shape is not part of the API.
  """
  @type subscription :: Subscription.t()

  @typedoc """
  A channel's figures, from `info/1`:

    * `:capacity`, `:overflow` - its configuration
    * `:len` - the messages it holds
    * `:first_seq` - the oldest seq that may still be held
    * `:next_seq` - the seq the next push gets
    * `:pushed` - messages taken in
    * `:pulled` - messages handed out by `pull/1`
    * `:overwritten` - messages dropped to make room for newer ones
    * `:rejected` - messages refused: the ring was full (by count, or by
      `:max_bytes` under reject), or a payload was larger than `:max_bytes`
    * `:skipped` - seqs given up on because their producer stalled between
      reserving and storing them (it was killed, or descheduled for longer
      than a reader waits, 5 ms). A producer that comes back pushes its
      message again under a fresh seq, and reports that seq. Under
      drop-oldest, a skip its producer has not come back to when the ring
      drops the seq counts as overwritten instead (a late producer then
      reports that seq pushed)
    * `:max_bytes` - its configuration: the bound on payload bytes, or nil
    * `:max_age` - its configuration: the most ms a message stays, or nil
    * `:expired` - messages that left because they were older than
      `:max_age` (see "Time")
    * `:deleted` - messages deleted by seq (`delete_messages/2`)
    * `:bytes` - payload bytes the channel holds now. A batch stored as one
      unit (a drop-oldest batch on a channel without `:max_bytes`) is freed
      whole, when the last of its messages leaves
    * `:bytes_pushed` - payload bytes pushed in total
    * `:incarnation` - which creation of the channel this is: a positive
      integer that changes whenever the channel is created again (see
      "Incarnations" above)
    * `:oldest_time`, `:newest_time` - the times (system ms) of the oldest
      and newest messages held, nil when it holds none (see "Time")

  At rest, `pushed == pulled + overwritten + expired + deleted + len`.
  """
  @type info :: %{
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject,
          len: non_neg_integer(),
          first_seq: seq(),
          next_seq: seq(),
          pushed: non_neg_integer(),
          pulled: non_neg_integer(),
          overwritten: non_neg_integer(),
          rejected: non_neg_integer(),
          skipped: non_neg_integer(),
          max_bytes: pos_integer() | nil,
          max_age: pos_integer() | nil,
          expired: non_neg_integer(),
          deleted: non_neg_integer(),
          bytes: non_neg_integer(),
          bytes_pushed: non_neg_integer(),
          incarnation: pos_integer(),
          oldest_time: integer() | nil,
          newest_time: integer() | nil
        }

  @typedoc """
  Why an operation on a channel of another node failed or may have:
  `:node_down` (not connected) or `:node_busy` (its link is busy or full,
  or the request could not leave in time), both certainly not carried out;
  `:timeout`, the request left and no answer came in time, so it may or may
  not have been carried out. See "In a cluster" above and `Ringbus.Cluster`.
  """
  @type node_error :: :node_down | :node_busy | :timeout

  @typedoc """
  Every reason a function of this module returns in `{:error, reason}`:

    * `:no_channel` - no channel of that name (on any node)
    * `:exists` - `create/2`: a channel of that name exists already
    * `:full` - a `:reject` channel has no room (by count or `:max_bytes`)
    * `:too_large` - a payload larger than the channel's `:max_bytes`
    * `:no_subscription` - `ack/2`, `unsubscribe/1`: the subscription has ended
    * `:node_down`, `:node_busy`, `:timeout` - see `t:node_error/0`; only
      `:timeout` leaves the outcome unknown, also on a replicated channel
      (see "Replicated channels")
    * `:stale_tag` - `push/3`: a producer tag older than the channel
      remembers (see "Producer tags")
    * `:new_incarnation` - `read/4`, `subscribe/2` with `:incarnation`:
      the channel was created again since (see "Incarnations")

  Front ends map each of them to their own errors (the RESP front end in
  one function, tested against this list).
  """
  @type reason ::
          :no_channel
          | :exists
          | :full
          | :too_large
          | :no_subscription
          | :stale_tag
          | :new_incarnation
          | node_error()

  @doc """
  Creates a channel.

  See `Ringbus.Channel` for the options: `:capacity` (required),
  `:overflow`, `:max_bytes` and `:max_age`. Bad options raise `ArgumentError`. In a
  cluster (`Ringbus.Cluster`), `node: node` creates the channel on that node
  instead of this one; `{:error, :node_down}` or `{:error, :node_busy}` when
  it cannot be reached, `{:error, :timeout}` when it did not answer in time
  (the channel may or may not have been created).

  `replicas: n` (a positive integer; not with `:node`) creates a
  replicated, durable channel on this node and the first `n - 1` of
  `Node.list/0` (see "Replicated channels" above); `{:error, :node_down}`
  when fewer nodes are connected, `{:error, :timeout}` when its members
  elect no leader in 15 s.

      iex> Ringbus.create("doc-create", capacity: 10)
      :ok
      iex> Ringbus.create("doc-create", capacity: 10)
      {:error, :exists}
  """
  @spec create(name(), Channel.options() | [{:node, node()} | {atom(), term()}]) ::
          :ok | {:error, :exists | node_error()}
  def create(name, opts) do
    case pop_replicas!(opts) do
      {nil, opts} ->
        {home, opts} = pop_node!(opts)
        Router.create(name, Channel.validate_options!(opts), home)

      {replicas, opts} ->
        create_replicated(name, Channel.validate_options!(opts), replicas)
    end
  end

  # The name is claimed cluster-wide first, as any create's, held while the
  # members are made, then announced with them, so every node reaches it.
  defp create_replicated(name, opts, replicas) do
    with {:ok, stamp} <- Router.claim(name) do
      case Replica.create(name, opts, replicas, stamp) do
        {:ok, members} ->
          Router.claimed(name, [members: members] ++ opts, stamp, :ok)

        # The members exist and elected no leader yet: reachable all the same.
        {:error, :timeout, members} ->
          _ = Router.claimed(name, [members: members] ++ opts, stamp, :ok)
          {:error, :timeout}

        error ->
          Router.claimed(name, opts, stamp, error)
      end
    end
  end

  @doc "Like `create/2`, but raises `Ringbus.Error` if the channel exists."
  @spec create!(name(), Channel.options()) :: :ok
  def create!(name, opts), do: create(name, opts) |> bang(name)

  @doc """
  Deletes a channel and its messages. Its subscribers receive
  `{:ringbus_closed, sub, :channel_deleted}`.
  """
  @spec delete(name()) :: :ok | {:error, :no_channel | node_error()}
  def delete(name) do
    case Store.fetch(name) do
      {:ok, %{replica: r} = channel} when r != nil ->
        with :ok <- Replica.delete(channel, name), do: Router.deleted(name, Map.get(r, :stamp))

      _ ->
        Router.delete(name)
    end
  end

  @doc """
  Makes `node` a member of replicated channel `name` (see "Replicated
  channels" above), through Ra's membership change. The new member gets
  the channel's ring, a Raft log and the messages it holds, by snapshot
  and log from the leader, then serves reads from its ring; every
  member's catalogue records it, so restarts keep it. The channel takes
  pushes throughout.

  Errors: `:no_channel`; `:not_replicated` (a memory channel);
  `:already_member`; `:node_down` (`node` is not connected); `:timeout`,
  the change may or may not have been made (see `info/1`'s `:members`).
  From a node that is not a member, the call runs on a member through
  the cluster's link: it waits at most 45 s, and answers `:node_down`
  or `:node_busy` at once when the member cannot be reached.

      :ok = Ringbus.add_replica("orders", :"b@host")
  """
  @spec add_replica(name(), node()) ::
          :ok
          | {:error,
             :no_channel | :not_replicated | :already_member | :node_down | :node_busy | :timeout}
  def add_replica(name, node) when is_atom(node), do: membership(name, :add_member, node)

  @doc """
  Takes `node`'s member out of replicated channel `name`, through Ra's
  membership change: `node` no longer holds the channel (its ring, Raft
  log and data go), the others record it, and the channel takes pushes
  throughout. `node` may be this one.

  Errors: `:no_channel`; `:not_replicated`; `:not_member` (`node` is not
  one); `:last_member` (delete the channel instead); `:node_down` (`node`
  is not connected); `:timeout`, unknown as for `add_replica/2`.
  """
  @spec remove_replica(name(), node()) ::
          :ok
          | {:error,
             :no_channel
             | :not_replicated
             | :not_member
             | :last_member
             | :node_down
             | :node_busy
             | :timeout}
  def remove_replica(name, node) when is_atom(node), do: membership(name, :remove_member, node)

  # Runs on a member, this node or one the cluster's link reaches (waiting
  # at most @membership_timeout, never on a node that is down): the replica
  # layer makes the change, then the cluster tells every node the new members.
  defp membership(name, change, node) do
    case Store.fetch(name) do
      {:ok, %{replica: nil}} -> {:error, :not_replicated}
      {:ok, channel} -> Home.membership(channel, name, change, node)
      {:error, :no_channel} -> Router.request(name, {change, node}, @membership_timeout)
    end
  end

  @doc """
  Pushes one message and returns its sequence number.

  When the channel is full, a `:drop_oldest` channel overwrites its oldest
  message and a `:reject` channel returns `{:error, :full}`. A payload larger
  than the channel's `:max_bytes` returns `{:error, :too_large}`.

      iex> Ringbus.create("doc-push", capacity: 2)
      iex> Ringbus.push("doc-push", "a")
      {:ok, 0}
      iex> Ringbus.push("doc-push", "b")
      {:ok, 1}
  """
  @spec push(name(), binary()) ::
          {:ok, seq()} | {:error, :no_channel | :full | :too_large | node_error()}
  def push(name, payload) when is_binary(payload), do: on_channel(name, {:push, payload})

  @doc """
  Like `push/2` and `push_many/2` (with a list), with options:

    * `:producer` - `{producer_id, n}`, a tag that makes a retry safe: a
      push whose tag the channel stored already is answered as it was
      then, and stores nothing. A producer's `n` increases with each push;
      the channel remembers the last 64 per producer, and answers an older
      one `{:error, :stale_tag}`. See "Producer tags" above. Defaults to
      `nil`.
    * `:timeout` - ms to wait for the answer from a replicated channel's
      leader or another node; then `{:error, :timeout}`, which means the
      outcome is unknown. Defaults to `5000` on a replicated channel, the
      cluster's `:call_timeout` and `:reply_timeout` on another node's
      channel; a push to a memory channel of this node does not wait.
    * `:create` - channel options (`create/2`'s): when no node has the
      channel, it is created on this node with them, then pushed to. A
      channel that another caller created meanwhile is pushed to as it is.
      Defaults to `nil`: a push to no channel is `{:error, :no_channel}`.

  Bad options raise `ArgumentError`.

      Ringbus.push("orders", "o-17", producer: {"billing", 17})

      iex> Ringbus.push("doc-push-create", "first", create: [capacity: 10])
      {:ok, 0}
      iex> Ringbus.push("doc-push-create", "second", create: [capacity: 10])
      {:ok, 1}
      iex> Ringbus.delete("doc-push-create")
      :ok
  """
  @spec push(name(), binary() | [binary()],
          producer: {term(), integer()},
          timeout: pos_integer(),
          create: keyword()
        ) ::
          {:ok, seq()}
          | {:error, :no_channel | :full | :too_large | :stale_tag | :exists | node_error()}
  def push(name, payload_or_payloads, []) when is_binary(payload_or_payloads),
    do: push(name, payload_or_payloads)

  def push(name, payloads, []) when is_list(payloads), do: push_many(name, payloads)

  def push(name, payload, opts) when is_binary(payload), do: push(name, [payload], opts)

  def push(name, payloads, opts) when is_list(payloads) do
    {count, bytes} = Ring.measure!(payloads)
    opts = Options.validate!(opts, [producer: nil, timeout: nil, create: nil], "push")
    Options.check!(:producer, opts[:producer], &tag?/1, "a tuple {producer_id, integer}")

    Options.check!(
      :timeout,
      opts[:timeout],
      &(&1 == nil or Options.positive?(&1)),
      "a positive integer"
    )

    Options.check!(:create, opts[:create], &(&1 == nil or is_list(&1)), "a keyword list")
    run(name, {:push_tagged, opts[:producer], payloads, count, bytes}, opts)
  end

  defp tag?(tag), do: tag == nil or match?({_id, n} when is_integer(n), tag)

  @doc "Like `push/2`, but returns the seq or raises `Ringbus.Error`."
  @spec push!(name(), binary()) :: seq()
  def push!(name, payload), do: push(name, payload) |> bang(name)

  @doc """
  Pushes a batch of messages with consecutive sequence numbers and returns the
  first one. On a `:reject` channel the batch goes in whole or not at all.
  An empty batch pushes nothing and returns the next seq.

  A batch whose payloads add up to more bytes than the channel's `:max_bytes`
  returns `{:error, :too_large}`, as one payload that large does, on either
  kind of channel: nothing of it is stored (a `:drop_oldest` channel would
  otherwise overwrite the batch's own first messages), and all its messages
  count as `rejected`.

      iex> Ringbus.create("doc-push-many", capacity: 10, max_bytes: 10)
      iex> Ringbus.push_many("doc-push-many", ["aaaa", "bbbb", "cccc"])
      {:error, :too_large}
      iex> Ringbus.push_many("doc-push-many", ["aaaa", "bbbb"])
      {:ok, 0}
  """
  @spec push_many(name(), [binary()]) ::
          {:ok, seq()} | {:error, :no_channel | :full | :too_large | node_error()}
  def push_many(name, payloads) when is_list(payloads) do
    {count, bytes} = Ring.measure!(payloads)
    on_channel(name, {:push_many, payloads, count, bytes})
  end

  @doc "Like `push_many/2`, but returns the first seq or raises `Ringbus.Error`."
  @spec push_many!(name(), [binary()]) :: seq()
  def push_many!(name, payloads), do: push_many(name, payloads) |> bang(name)

  @doc """
  Takes the oldest message out of the channel. Each message is pulled at most
  once, however many processes pull at the same time. A channel with a
  holding consumer group answers `:empty`: its groups hand its messages out
  (`Ringbus.Groups`, "Holding").
  """
  @spec pull(name()) ::
          {:ok, seq(), binary()} | :empty | {:error, :no_channel | :too_large | node_error()}
  def pull(name), do: on_channel(name, :pull)

  @doc """
  Reads up to `max` messages from `from` on, without removing them.

  `from` is a seq, or `{:time, ms}`: the first message stored at or after
  that system time (ms, as `System.system_time(:millisecond)`), found by
  binary search over the messages held (see "Time").

  Returns the messages in seq order and `lost`: how many messages at or after
  `from` were gone (overwritten or pulled) before the first one returned.
  The messages returned are contiguous; to go on, read again from the seq
  after the last one. It may return fewer than `max` even when more are
  there: from another node, an answer carries at most a quarter of the
  cluster's `:max_buffer_bytes` of messages (but always at least one), and
  the rest stays in the ring for the next read. A first message larger
  than `:max_buffer_bytes` cannot cross the link: a read from another node
  answers `{:error, :too_large}` (as do `pull/1` and `push/2` for such a
  message); read it on its home node, or skip it.
  """
  @spec read(name(), from(), non_neg_integer()) ::
          {:ok, [{seq(), binary()}], non_neg_integer()}
          | {:error, :no_channel | :too_large | node_error()}
  def read(name, from, max) when is_integer(max) and max >= 0,
    do: on_channel(name, {:read, from!(from), max, nil})

  @doc """
  Like `read/3`, with options:

    * `:incarnation` - the channel's incarnation the reader expects (from
      `info/1`); when the channel has another, it was created again since
      (see "Incarnations" above) and the read answers
      `{:error, :new_incarnation}` instead of messages. Defaults to `nil`:
      any.
    * `:times` - when true, each message comes with its time:
      `{seq, payload, ms}` (see "Time"). Defaults to `false`.

  Bad options raise `ArgumentError`.
  """
  @spec read(name(), from(), non_neg_integer(), incarnation: pos_integer() | nil, times: boolean()) ::
          {:ok, [{seq(), binary()} | {seq(), binary(), integer()}], non_neg_integer()}
          | {:error, :no_channel | :new_incarnation | :too_large | node_error()}
  def read(name, from, max, opts) when is_integer(max) and max >= 0 do
    opts = Options.validate!(opts, [incarnation: nil, times: false], "read")
    incarnation = opts[:incarnation]
    Options.check!(:incarnation, incarnation, &incarnation?/1, "nil or a positive integer")
    Options.check!(:times, opts[:times], &is_boolean/1, "a boolean")

    if opts[:times],
      do: on_channel(name, {:read, from!(from), max, incarnation, :times}),
      else: on_channel(name, {:read, from!(from), max, incarnation})
  end

  defp incarnation?(i), do: i == nil or Options.positive?(i)

  defp from!(seq) when is_integer(seq) and seq >= 0, do: seq
  defp from!({:time, ms} = from) when is_integer(ms) and ms >= 0, do: from

  defp from!(other) do
    raise ArgumentError,
          "expected a read's start to be a non-negative integer or {:time, ms}, got: #{inspect(other)}"
  end

  @doc """
  Deletes the messages held under `seqs`, any of them, not only the oldest
  (Redis's XDEL): reads, subscriptions, pulls and consumer groups pass over
  them without counting them `lost`, `len/1` drops, and `info/1` counts them
  `deleted`. Answers how many it deleted: a seq not held (never pushed, or
  gone already) or deleted already counts nothing. A deleted message frees
  its bytes, but keeps its seq's place in the capacity until the oldest end
  passes it: it costs at most a row. (A reader still behind the oldest end
  counts the seqs gone there as `lost`, deleted ones among them: they are
  no longer told apart.) On a replicated channel it is one command in the
  log, decided alike on every member.

      iex> Ringbus.create("doc-delete", capacity: 10)
      iex> {:ok, 0} = Ringbus.push_many("doc-delete", ["a", "b", "c"])
      iex> Ringbus.delete_messages("doc-delete", [1, 7])
      {:ok, 1}
      iex> Ringbus.read("doc-delete", 0, 10)
      {:ok, [{0, "a"}, {2, "c"}], 0}
      iex> Ringbus.delete("doc-delete")
      :ok
  """
  @spec delete_messages(name(), [seq()]) ::
          {:ok, non_neg_integer()} | {:error, :no_channel | node_error()}
  def delete_messages(name, seqs) when is_list(seqs), do: on_channel(name, {:delete, seqs})

  @doc "The number of messages the channel holds. Constant time."
  @spec len(name()) :: non_neg_integer() | {:error, :no_channel | node_error()}
  def len(name), do: on_channel(name, :len)

  @doc "The channel's figures; see `t:info/0`."
  @spec info(name()) :: {:ok, info()} | {:error, :no_channel | node_error()}
  def info(name), do: on_channel(name, :info)

  @doc """
  The channel's incarnation (see "Incarnations" above), as `info/1` has it,
  without its other figures: for a server that answers a read with the
  incarnation its messages are of.

      iex> Ringbus.create("doc-incarnation", capacity: 10)
      iex> {:ok, inc} = Ringbus.incarnation("doc-incarnation")
      iex> {:ok, %{incarnation: ^inc}} = Ringbus.info("doc-incarnation")
      iex> Ringbus.delete("doc-incarnation")
      :ok
  """
  @spec incarnation(name()) :: {:ok, pos_integer()} | {:error, :no_channel | node_error()}
  def incarnation(name), do: on_channel(name, :incarnation)

  @doc """
  Lists the names of the channels homed on this node; a channel of another
  node is not listed. `Ringbus.Cluster.channels/0` lists every node's, with
  its home.
  """
  @spec channels() :: [name()]
  def channels, do: Store.names()

  @doc """
  Subscribes the calling process to a channel.

  The subscriber receives `{:ringbus, sub, [{seq, payload}], lost}` batches in
  seq order, where `lost` is how many messages it missed (overwritten or
  pulled before it could read them) just before this batch. At most
  `:max_credit` messages are sent ahead of `ack/2`: a subscriber returns
  credit with `ack(sub, count)` once it has handled `count` messages. A
  subscriber that stops acking gets nothing more, and nothing is buffered for
  it beyond the ring; when it acks again it learns through `lost` what it missed.

  When the channel is deleted the subscriber receives
  `{:ringbus_closed, sub, :channel_deleted}`; when the Ringbus application
  stops, `{:ringbus_closed, sub, :shutdown}`; when the channel's home node
  goes down, `{:ringbus_closed, sub, :node_down}`. The subscription ends then,
  when it is unsubscribed, and when the subscriber exits.

  ## Options

    * `:from` - where to start: a seq, `:earliest` (the oldest message held),
      `:latest` (the next message pushed) or `{:time, ms}` (the first
      message stored at or after that system time, see "Time"). Defaults
      to `:latest`.
    * `:times` - when true, batches carry each message's time:
      `{:ringbus, sub, [{seq, payload, ms}], lost}`. Defaults to `false`.
    * `:max_credit` - messages sent and not yet acked, at most.
      Defaults to `1000`.
    * `:credit` - the credit to start with, at most `:max_credit`.
      Defaults to `:max_credit`.
    * `:max_batch` - messages in one batch, at most. Defaults to `256`.
    * `:name` - what metrics and the status page call the subscriber (a
      UTF-8 string of 1 to 128 bytes), e.g. `"billing-worker"`. Without
      one, a subscriber that is a server connection is called by its
      client's address, a registered process by its name, any other
      `"embedded"`. Defaults to `nil`.
    * `:incarnation` - the channel's incarnation the subscriber expects
      (from `info/1`), to resume `from:` a seq of it: when the channel has
      another (it was created again since, see "Incarnations" above),
      `{:error, :new_incarnation}` and no subscription. Defaults to `nil`:
      any.
    * `:via` - how the subscriber gets its messages, the `protocol` label
      under which the metric `ringbus_subscription_delivery_seconds` times
      them from push to delivery: `:embedded` (the default), or `:binary` or
      `:resp` for a server connection subscribing for its client (the
      servers set it).
  """
  @spec subscribe(name(), Subscription.options()) ::
          {:ok, subscription()} | {:error, :no_channel | :new_incarnation | node_error()}
  def subscribe(name, opts \\ []) do
    opts = Subscription.validate_options!(opts)
    on_channel(name, {:subscribe, opts, self()})
  end

  @doc """
  The subscriptions of a channel and how far behind each is, for monitoring.

  Each subscription is asked for its figures, all at once; this takes at
  most `:timeout` ms. Returns one map per subscription:

    * `:subscription` - its process
    * `:subscriber` - the process it delivers to
    * `:name` - the `:name` it was given, or nil
    * `:cursor` - the next seq it will send
    * `:lag` - messages pushed that it has not sent yet
    * `:credit` - messages it may still send before the subscriber acks
    * `:lost` - messages it missed since it started (see `subscribe/2`)

  A subscription that does not answer in time (busy, or ending) is listed
  with nil figures.

  A channel of another node is surveyed there, and the call waits at most
  `:timeout` plus 100 ms; its answer is an error as for any remote call
  (`node_down`, `node_busy`: not surveyed; `timeout`: no answer in time).
  The `:subscriber` of a subscription taken from another node is the link
  that forwards its batches to that node.

  ## Options

    * `:timeout` - ms to wait for all answers. Defaults to `100`.
    * `:limit` - subscriptions asked at most. Defaults to `1000`.
  """
  @spec subscriptions(name(), timeout: timeout(), limit: pos_integer()) ::
          {:ok, [Subscription.figures()]} | {:error, :no_channel | node_error()}
  def subscriptions(name, opts \\ []) do
    opts = Ringbus.Options.validate!(opts, [timeout: 100, limit: 1000], "subscriptions")

    Ringbus.Options.check!(
      :timeout,
      opts[:timeout],
      &(is_integer(&1) and &1 >= 0),
      "a non-negative integer"
    )

    Ringbus.Options.check!(
      :limit,
      opts[:limit],
      &Ringbus.Options.positive?/1,
      "a positive integer"
    )

    # Remotely, the survey runs at the channel's home; the call waits for it plus a reply's time.
    op = {:subscriptions, opts[:timeout], opts[:limit]}
    on_channel(name, op, opts[:timeout] + @survey_reply_ms)
  end

  @doc """
  Returns `count` messages of credit to a subscription.

  `{:error, :no_subscription}` when the subscription has ended here, or is
  homed on a node that is down or has restarted since (it ended with it).
  For a live home node the credit goes out without waiting, and `:ok` means
  it is on its way.
  """
  @spec ack(subscription(), pos_integer()) :: :ok | {:error, :no_subscription}
  def ack({pid, ref} = sub, count)
      when is_pid(pid) and is_reference(ref) and is_integer(count) and count > 0 do
    if node(pid) == node(), do: Subscription.ack(sub, count), else: Router.ack(sub, count)
  end

  @doc """
  Ends a subscription. Batches already in the subscriber's mailbox stay there;
  once it returns, no more are sent.

  For a subscription homed on another node, `{:error, :node_busy}` means the
  link to that node did not take the request within `:call_timeout`: it was
  not carried out, and the subscription goes on (call again).
  """
  @spec unsubscribe(subscription()) :: :ok | {:error, :no_subscription | :node_busy}
  def unsubscribe({pid, ref} = sub) when is_pid(pid) and is_reference(ref) do
    if node(pid) == node(), do: Subscription.stop(sub), else: Router.unsubscribe(sub)
  end

  @doc """
  The cluster as this node sees it: its members and, per remote node, the
  link's state, queued bytes, batches sent, drops and suspensions. See
  `Ringbus.Cluster.info/0`. `:replicas` lists this node's replicated
  channels, each with its members as `info/1`'s `:replication` shows them.
  """
  @spec cluster_info() :: map()
  def cluster_info,
    do: Map.put(Ringbus.Cluster.info(), :replicas, Replica.Reporter.channels())

  @doc false
  # For the front ends: runs operation `op` (`Ringbus.Op.t()`) on channel
  # `name`, on this node or at its home, with the three outcomes of "In a
  # cluster". Options: `:timeout` (ms) bounds the wait instead of the
  # cluster's timeouts; `:create`, channel options: when no node has the
  # channel, it is created with them here first (`:exists` from a create
  # that raced another is fine: the operation runs on that one).
  @spec run(name(), Ringbus.Op.t(), keyword()) :: term()
  def run(name, op, opts \\ []) do
    case {on_channel(name, op, opts[:timeout]), opts[:create]} do
      {{:error, :no_channel}, create} when is_list(create) ->
        case create(name, create) do
          reply when reply in [:ok, {:error, :exists}] -> on_channel(name, op, opts[:timeout])
          error -> error
        end

      {answer, _create} ->
        answer
    end
  end

  # The one path of every operation on a named channel: `Ringbus.Op` runs it
  # here on a channel of this node, else at its home through the cluster
  # (which answers `:no_channel` for a name no node has). A channel deleted
  # while the operation ran raises `ArgumentError` from its tables.
  defp on_channel(name, op, timeout \\ nil) do
    case Store.fetch(name) do
      {:ok, channel} -> Op.run!(channel, op, timeout)
      {:error, :no_channel} -> Router.request(name, op, timeout)
    end
  rescue
    ArgumentError -> {:error, :no_channel}
  end

  # `create/2`'s `:replicas` option, which is not a channel option.
  defp pop_replicas!(opts) when is_list(opts) do
    case Keyword.pop(opts, :replicas) do
      {nil, opts} ->
        {nil, opts}

      {n, opts} when is_integer(n) and n > 0 ->
        if Keyword.has_key?(opts, :node),
          do: raise(ArgumentError, "expected :node or :replicas, not both")

        {n, opts}

      {n, _} ->
        raise ArgumentError, "expected :replicas to be a positive integer, got: #{inspect(n)}"
    end
  end

  defp pop_replicas!(opts), do: {nil, opts}

  # `create/2`'s `:node` option, which is not a channel option.
  defp pop_node!(opts) when is_list(opts) do
    case Keyword.pop(opts, :node) do
      {home, opts} when is_atom(home) -> {home, opts}
      {home, _} -> raise ArgumentError, "expected :node to be a node name, got: #{inspect(home)}"
    end
  end

  defp pop_node!(opts), do: {nil, opts}

  defp bang(:ok, _name), do: :ok
  defp bang({:ok, value}, _name), do: value
  defp bang({:error, reason}, name), do: raise(Ringbus.Error, reason: reason, channel: name)
end
