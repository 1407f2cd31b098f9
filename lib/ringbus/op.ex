defmodule Ringbus.Op do
  @moduledoc false
  # Every operation on a channel, as data, and the one place that runs it.
  #
  # `Ringbus` (a caller on the channel's node), `Ringbus.Cluster.Home` (a
  # request another node's link brought) and the router (which picks where
  # a request goes and how long it may wait) all take an operation of
  # `t()` and hand it to `run/3` on the channel's handle, memory or
  # replicated. So an operation is one clause here, plus its mapping in each
  # front end that offers it; docs/ARCHITECTURE.md ("One path") draws it.
  #
  # `run/3` decides and does what needs no waiting; what waits on other
  # processes (a replicated channel's writes, through Ra; a survey of
  # subscriptions) comes back as `{:wait, fun}`, an effect for the caller
  # to carry out: a local caller runs `fun` itself, a link in a process of
  # its own, so that a link never waits. Nothing here names a node, a link
  # or a front end.
  #
  # `room` bounds the bytes an answer may carry: `:infinity` for a caller on
  # the channel's node, the link's room for an answer that crosses it. A
  # read answers at most `room` div 4 bytes of messages, so that several
  # fit in the link at once, but always its first message if that fits in
  # `room`; a first message (or a pulled one) larger than `room` is answered
  # `{:error, :too_large}` and stays in the ring.

  alias Ringbus.{Channel, Group, Replica}
  alias Ringbus.Group.{ByIds, GoneIds, Push}
  alias Ringbus.Op.Answers

  alias Ringbus.Channel.{
    Deletes,
    GivenIds,
    Hold,
    IdReads,
    Ids,
    Producers,
    Ring,
    Subscription,
    Times,
    Trim
  }

  require Ids

  # What a message costs in an answer beyond its payload, as a link counts it.
  @message_bytes 16
  # Messages a cut read takes from the ring at a time.
  @read_step 64

  @typedoc "A producer tag (`Ringbus.push/3`), or nil."
  @type tag :: {term(), integer()} | nil

  @typedoc """
  An operation on one channel:

    * `{:push, payload}` - one message
    * `{:push_many, payloads, count, bytes}` - a batch, whole or not at all
    * `{:push_run, payloads, count, bytes}` - a batch whose refusal counts
      nothing (the caller then pushes it as `:push_batches`)
    * `{:push_tagged, tag, payloads, count, bytes}` - a batch under a
      producer tag, stored once however often it is sent; its payloads a
      list, or an enumerable of binaries that knows its count and bytes (a
      server's large `PUSH_BATCH`, as the bytes it came in)
    * `{:push_batches, [{payloads, count, bytes}]}` - batches, each alone
    * `{:push_id, payload, given}` - one message under a Redis stream ID
      (`t:Ringbus.Channel.Ids.given/0`: `:auto`, a client's `{ms, n}` or
      `{ms, :auto}`), refused under Redis's rules: `{:ok, seq, id}`
    * `{:set_id, id}` - sets the channel's last Redis stream ID (XSETID):
      `:ok`, or `{:error, :below_top}` below the newest message's
    * `{:push_trim, push, trim}` - a push of the above, then `trim`: what
      RESP's XADD with MAXLEN is, as one operation
    * `:pull`, `{:read, from, max, incarnation | nil}`, `:len`, `:info`,
      `:incarnation`; `from` is a seq or `{:time, ms}`, the first message
      at or after that system time, found where the channel lives
    * `{:read, from, max, incarnation | nil, :times}` - a read whose
      messages carry their times: `{seq, payload, ms}`; with `:ids`, their
      Redis stream IDs (`Ringbus.Channel.IdReads`): `{seq, payload, id}`.
      `from` may also be `{:id, id}`: the first message whose ID is it or above
    * `{:ids, push}` - a push of the above (`:push_trim` takes it as its
      push), answered `{:ok, seq, first_id}` (`:push_batches`: each result)
    * `{:ids_of, seqs}` - `{:ok, ids}`, the ID of each seq (`IdReads.ids_of/2`),
      read where the channel lives (a replicated channel's on this member's ring)
    * `{:id_bounds, [{side, id}]}` - `{:ok, seqs}`, the seq each ID bounds
      (`IdReads.bounds/2`), read so too
    * `{:ids, {:group, request}}` - a group request whose positions are
      IDs and whose answer gives IDs for seqs (`Ringbus.Group.ByIds`)
    * `{:trim, trim}` - removes the oldest messages `Ringbus.Channel.Trim`
      names: one operation (one Raft entry) however many it removes
    * `{:delete, seqs}` - deletes the messages held under `seqs`, any of
      them (`Ringbus.Channel.Deletes`): one operation (one Raft entry);
      answers `{:ok, count}` deleted
    * `{:subscribe, opts, subscriber}`, `{:subscriptions, timeout, limit}`;
      with `opts[:group]`, a push subscription to a consumer group
      (`Ringbus.Group.Push`), whose group requests run here
    * `{:stamped, op}` - `op`, answered with the channel's incarnation:
      `{:ok, incarnation, answer}`, so that a front end learns both in one
      request
    * `{:times, {:group, fetch}}` - a group fetch (`:fetch`, `:ack_fetch`) whose
      messages carry their times: `{seq, payload, deliveries, ms}`, ms
      nil for one the ring no longer held when its time was read
    * `{:group, request}` - a request on the channel's consumer groups
      (`Ringbus.Group.request()`), run where the channel lives; a replicated
      channel's run on the member's ring and that node's groups, for now
      (`Ringbus.Group`'s known limit). A fetch that waits for entries
      answers `{:wait, fun}`
  """
  @type t ::
          {:push, binary()}
          | {:push_many, [binary()], non_neg_integer(), non_neg_integer()}
          | {:push_run, [binary()], pos_integer(), non_neg_integer()}
          | {:push_tagged, tag(), [binary()] | Enumerable.t(), non_neg_integer(),
             non_neg_integer()}
          | {:push_batches, [{[binary()], non_neg_integer(), non_neg_integer()}]}
          | {:push_id, binary(), Ids.given()}
          | {:set_id, Ids.id()}
          | {:push_trim, t(), Trim.t()}
          | :pull
          | {:read, from(), non_neg_integer(), pos_integer() | nil}
          | {:read, from(), non_neg_integer(), pos_integer() | nil, :times | :ids}
          | {:ids, t()}
          | {:ids_of, [non_neg_integer()]}
          | {:id_bounds, [{IdReads.side(), Ids.id()}]}
          | :len
          | :info
          | :incarnation
          | {:trim, Trim.t()}
          | {:delete, [non_neg_integer()]}
          | {:subscribe, keyword(), pid()}
          | {:subscriptions, timeout(), pos_integer()}
          | {:stamped, t()}
          | {:times, {:group, Group.request()}}
          | {:group, Group.request()}

  @typedoc "Where a read starts: a seq, or the first message at or after a system time (ms)."
  @type from :: non_neg_integer() | {:time, non_neg_integer()} | {:id, Ids.id()}

  @typedoc "What `run/3` decides: the answer now, or a function whose result is the answer."
  @type outcome :: {:reply, term()} | {:wait, (() -> term())}

  @doc """
  Runs `op` on `channel`; see the module's header for `room`. `timeout`
  (ms) bounds a replicated write's wait for its commit, when given.
  """
  @spec run(Channel.t(), t(), pos_integer() | :infinity, pos_integer() | nil) :: outcome()
  def run(channel, op, room, timeout \\ nil)

  # A survey waits up to `timeout` for the subscriptions' answers.
  def run(channel, {:subscriptions, timeout, limit}, _room, _timeout),
    do: {:wait, fn -> {:ok, Subscription.survey(channel, timeout, limit)} end}

  # A group request answers now, or (a fetch that waits for entries) waits;
  # on a replicated channel it goes through the log, and the caller waits.
  def run(%Channel{replica: nil} = channel, {:group, request}, room, _timeout) do
    Ring.expire(channel)
    Group.run(channel, request, room)
  end

  def run(channel, {:group, request}, room, timeout) do
    log = &Replica.group(channel, &1, room, timeout)
    {:wait, fn -> Group.Logged.run(channel, request, log) end}
  end

  def run(channel, {:stamped, {:group, _} = op}, room, timeout),
    do: stamp(channel, run(channel, op, room, timeout))

  # The times are read from this member's ring once the fetch has answered:
  # one probe a message, no payload copied.
  def run(channel, {:times, {:group, {:fetch, _, _, _, _, _}} = op}, room, timeout),
    do: timed(channel, run(channel, op, room, timeout))

  def run(
        channel,
        {:times, {:group, {:ack_fetch, _, {:fetch, _, _, _, _, _}}} = op},
        room,
        timeout
      ),
      do: timed(channel, run(channel, op, room, timeout))

  # A group request in Redis stream IDs (`Ringbus.Group.ByIds`): its IDs
  # found here, its answer's seqs made IDs on this member's ring once it
  # holds what the answer names.
  def run(channel, {:ids, {:group, request}}, room, timeout) do
    request = ByIds.resolve(channel, request)
    Answers.ided(channel, request, run(channel, {:group, request}, room, timeout))
  end

  def run(channel, {:stamped, {:ids, {:group, _}} = op}, room, timeout),
    do: stamp(channel, run(channel, op, room, timeout))

  def run(channel, {:stamped, {:times, _} = op}, room, timeout),
    do: stamp(channel, run(channel, op, room, timeout))

  # Under max_age, what expired leaves first, so no operation sees it.
  def run(%Channel{replica: nil} = channel, op, room, _timeout) do
    Ring.expire(channel)
    {:reply, memory(channel, op, room)}
  end

  def run(channel, op, room, timeout), do: replicated(channel, op, room, timeout)

  @doc "Runs `op` on `channel` to its answer, waiting in the caller if it must."
  @spec run!(Channel.t(), t(), pos_integer() | nil) :: term()
  def run!(channel, op, timeout \\ nil) do
    case run(channel, op, :infinity, timeout) do
      {:reply, answer} -> answer
      {:wait, fun} -> fun.()
    end
  end

  @doc """
  Whether `op` writes: a replicated channel's writes go to its leader and
  commit on a majority of disks, so a caller waits for them longer.
  """
  @spec write?(t()) :: boolean()
  def write?(:pull), do: true
  def write?({:stamped, op}), do: write?(op)
  def write?({:times, op}), do: write?(op)
  def write?({:ids, op}), do: write?(op)

  def write?(op) when is_tuple(op),
    do: elem(op, 0) in [:trim, :delete, :group, :set_id | pushes()]

  def write?(_op), do: false

  defp pushes,
    do: [:push, :push_many, :push_run, :push_tagged, :push_batches, :push_trim, :push_id]

  ## A replicated channel: writes through its Raft log, reads on this member's ring

  defp replicated(channel, {:stamped, op}, room, timeout),
    do: stamp(channel, replicated(channel, op, room, timeout))

  defp replicated(channel, {:ids, push}, room, timeout) do
    {:wait, pushed} = replicated(channel, push, room, timeout)
    {:wait, fn -> Answers.replicated_ids(channel, pushed.()) end}
  end

  defp replicated(channel, {:push, payload}, _room, timeout),
    do: {:wait, fn -> Replica.push(channel, [payload], byte_size(payload), within(timeout)) end}

  defp replicated(channel, {push, payloads, _count, bytes}, _room, timeout)
       when push in [:push_many, :push_run],
       do: {:wait, fn -> Replica.push(channel, payloads, bytes, within(timeout)) end}

  defp replicated(channel, {:push_tagged, tag, payloads, _count, bytes}, _room, timeout) do
    opts = [producer: tag] ++ within(timeout)
    {:wait, fn -> Replica.push(channel, payloads, bytes, opts) end}
  end

  defp replicated(channel, {:push_id, payload, given}, _room, timeout),
    do: {:wait, fn -> Replica.push_id(channel, payload, given, timeout) end}

  defp replicated(channel, {:set_id, id}, _room, timeout),
    do: {:wait, fn -> Replica.set_id(channel, id, timeout) end}

  defp replicated(channel, {:push_batches, batches}, _room, _timeout),
    do: {:wait, fn -> Replica.push_batches(channel, batches) end}

  # A replicated channel's trims cut nodes of Redis's default size on
  # every member, whatever version: the node size is a memory stream's.
  defp replicated(channel, {:push_trim, push, %{node: _} = trim}, room, timeout),
    do: replicated(channel, {:push_trim, push, Map.delete(trim, :node)}, room, timeout)

  defp replicated(channel, {:trim, %{node: _} = trim}, room, timeout),
    do: replicated(channel, {:trim, Map.delete(trim, :node)}, room, timeout)

  defp replicated(channel, {:push_trim, push, trim}, room, timeout) do
    {:wait, push} = replicated(channel, push, room, timeout)
    {:wait, fn -> then_trim(push.(), fn -> Replica.trim(channel, trim) end) end}
  end

  defp replicated(channel, {:trim, trim}, _room, _timeout),
    do: {:wait, fn -> Replica.trim(channel, trim) end}

  defp replicated(channel, {:delete, seqs}, _room, _timeout),
    do: {:wait, fn -> Replica.delete_messages(channel, seqs) end}

  defp replicated(channel, :pull, room, _timeout) do
    if too_large_head?(channel, room),
      do: {:reply, {:error, :too_large}},
      else: {:wait, fn -> Replica.pull(channel) end}
  end

  defp replicated(channel, :info, _room, _timeout),
    do:
      {:reply,
       {:ok, channel |> Replica.info() |> Times.put_info(channel) |> IdReads.put_info(channel)}}

  defp replicated(channel, op, room, _timeout), do: {:reply, memory(channel, op, room)}

  defp within(nil), do: []
  defp within(timeout), do: [timeout: timeout]

  ## A memory channel, or a replicated one's reads

  defp memory(channel, {:stamped, op}, room),
    do: stamped(channel, memory(channel, op, room))

  defp memory(channel, {:push, payload}, _room), do: Ring.push(channel, payload)

  # Each batch's ID is read as it is stored: a later one may overwrite it.
  defp memory(channel, {:ids, {:push_batches, batches}}, _room),
    do:
      {:ok,
       Enum.map(batches, fn {payloads, n, bytes} ->
         Answers.with_ids(channel, Ring.push_measured(channel, payloads, n, bytes))
       end)}

  defp memory(channel, {:ids, push}, room),
    do: Answers.with_ids(channel, memory(channel, push, room))

  defp memory(channel, {id_op, _} = op, _room) when id_op in [:ids_of, :id_bounds, :set_id],
    do: Answers.id_op(channel, op)

  defp memory(channel, {:push_many, payloads, count, bytes}, _room),
    do: Ring.push_measured(channel, payloads, count, bytes)

  defp memory(channel, {:push_run, payloads, count, bytes}, _room),
    do: Ring.push_run(channel, payloads, count, bytes)

  # A producer tag is checked here, where the channel lives, so a resend
  # after :timeout finds the tag its first send stored.
  defp memory(channel, {:push_tagged, tag, payloads, count, bytes}, _room),
    do: Producers.push_tagged(channel, tag, payloads, count, bytes)

  defp memory(channel, {:push_id, payload, given}, _room)
       when is_binary(payload) and Ids.is_given(given),
       do: GivenIds.push(channel, payload, given)

  defp memory(_channel, {:push_id, _, _}, _room), do: {:error, :badarg}

  defp memory(channel, {:push_batches, batches}, _room),
    do: {:ok, Ring.push_batches(channel, batches)}

  # A push then its trim, as pushes and trims one by one would leave the
  # channel. Under drop-oldest, the messages held before the push that the
  # trim will take go first, so that the push overwrites none of them, and
  # the rest of the trim's count (pushed messages it takes) after; a batch
  # that would lap the ring all the same is refused `:laps`, with nothing
  # done, for the caller to push one by one. The count is worked out once:
  # a `~` trim run again after the push could take further nodes.
  defp memory(%Channel{overflow: :drop_oldest} = channel, {:push_trim, push, trim}, room) do
    {first, next, n} = {Ring.first_seq(channel), Ring.next_seq(channel), count(push)}
    # In messages held, deleted ones left out (`Trim.bounds/4`).
    {total, bound} = Trim.bounds(trim, first, next + n, Deletes.standing(channel))
    pre = min(total, next - first)

    if n > 1 and laps?(channel, next - first - pre + n, push) do
      {:error, :laps}
    else
      _ = GoneIds.take_oldest(channel, pre, bound)

      then_trim(memory(channel, push, room), fn ->
        GoneIds.take_oldest(channel, total - pre, bound)
      end)
    end
  end

  defp memory(channel, {:push_trim, push, trim}, room),
    do: then_trim(memory(channel, push, room), fn -> GoneIds.trim(channel, trim) end)

  defp memory(channel, {:trim, trim}, _room), do: GoneIds.trim(channel, trim)
  defp memory(channel, {:delete, seqs}, _room), do: GoneIds.delete(channel, seqs)

  # The oldest message is looked at first, so one too large for the room
  # stays in the ring. (One that another puller's take puts at the head
  # between the look and the pull still goes, whole.)
  defp memory(channel, :pull, room) do
    cond do
      # Its holding groups are its consumers: a pull takes nothing (`Ringbus.Groups`, "Holding").
      Hold.held?(channel) -> :empty
      too_large_head?(channel, room) -> {:error, :too_large}
      true -> Ring.pull(channel)
    end
  end

  defp memory(channel, {:read, from, max, incarnation}, room) do
    with :ok <- Ring.check_incarnation(channel, incarnation),
         do: read(channel, &Ring.read/3, seq(channel, from), max, room)
  end

  defp memory(channel, {:read, from, max, incarnation, :times}, room) do
    with :ok <- Ring.check_incarnation(channel, incarnation),
         do: read(channel, &Times.read/3, seq(channel, from), max, room)
  end

  defp memory(channel, {:read, from, max, incarnation, :ids}, room) do
    with :ok <- Ring.check_incarnation(channel, incarnation),
         do: read(channel, &IdReads.read/3, seq(channel, from), max, room)
  end

  defp memory(channel, :len, _room), do: Ring.len(channel)

  defp memory(channel, :info, _room),
    do: {:ok, channel |> Ring.info() |> Times.put_info(channel) |> IdReads.put_info(channel)}

  defp memory(channel, :incarnation, _room), do: {:ok, channel.incarnation}

  defp memory(channel, {:subscribe, opts, subscriber}, _room) do
    if opts[:group],
      do: Push.start(channel, subscriber, opts, &run!(channel, {:group, &1})),
      else: Subscription.start(channel, subscriber, opts)
  end

  defp laps?(%Channel{capacity: capacity}, len, _push) when len > capacity, do: true
  defp laps?(%Channel{max_bytes: nil}, _len, _push), do: false

  defp laps?(%Channel{max_bytes: max} = channel, _len, push),
    do: Ring.bytes(channel) + bytes(push) > max

  defp bytes({:ids, push}), do: bytes(push)
  defp bytes({:push, payload}), do: byte_size(payload)
  defp bytes({:push_id, payload, _given}), do: byte_size(payload)
  defp bytes({:push_tagged, _tag, _payloads, _count, bytes}), do: bytes
  defp bytes({:push_batches, batches}), do: Enum.reduce(batches, 0, &(elem(&1, 2) + &2))
  defp bytes({_push, _payloads, _count, bytes}), do: bytes

  defp count({:ids, push}), do: count(push)
  defp count({:push, _payload}), do: 1
  defp count({:push_id, _payload, _given}), do: 1
  defp count({:push_tagged, _tag, _payloads, count, _bytes}), do: count
  defp count({:push_batches, batches}), do: Enum.reduce(batches, 0, &(elem(&1, 1) + &2))
  defp count({_push, _payloads, count, _bytes}), do: count

  # A trim after a push that was refused does not run: nothing was added.
  defp then_trim(pushed, trim) when elem(pushed, 0) == :ok do
    _ = trim.()
    pushed
  end

  defp then_trim(refused, _trim), do: refused

  defp stamp(channel, {:reply, answer}), do: {:reply, stamped(channel, answer)}
  defp stamp(channel, {:wait, fun}), do: {:wait, fn -> stamped(channel, fun.()) end}

  defp stamped(channel, answer), do: {:ok, channel.incarnation, answer}

  defp timed(channel, {:reply, answer}), do: {:reply, fetched_times(channel, answer)}
  defp timed(channel, {:wait, fun}), do: {:wait, fn -> fetched_times(channel, fun.()) end}

  defp fetched_times(channel, {:ok, {messages, dead_letter, dead}}) do
    timed = for {seq, payload, n} <- messages, do: {seq, payload, n, Times.at_seq(channel, seq)}
    {:ok, {timed, dead_letter, dead}}
  end

  defp fetched_times(channel, {:ok, {acked, fetched}}) do
    {:ok, timed} = fetched_times(channel, {:ok, fetched})
    {:ok, {acked, timed}}
  end

  defp fetched_times(_channel, error), do: error

  ## Reads within a room

  defp too_large_head?(_channel, :infinity), do: false
  defp too_large_head?(channel, room), do: too_large_at?(channel, 0, room)

  # A read from a time starts at the first message at or after it.
  defp seq(channel, {:time, t}), do: Times.seek(channel, t)
  defp seq(channel, {:id, id}), do: Times.seek_id(channel, id)
  defp seq(_channel, seq), do: seq

  # `reader` is `Ring.read/3`, or `Times.read/3` for messages with their times.
  defp read(channel, reader, from, max, :infinity) do
    {messages, _count, lost, _next} = reader.(channel, from, max)
    {:ok, messages, lost}
  end

  defp read(channel, reader, from, max, room) do
    case cut_read(channel, reader, from, max, div(room, 4), room) do
      {[], 0, lost} when max > 0 -> too_large_or_empty(channel, from, lost, room)
      {messages, _bytes, lost} -> {:ok, messages, lost}
    end
  end

  # Reads up to `max` messages from `from` while they fit in `budget` bytes,
  # the first one in `room`: a few at a time, so a large `max` of large
  # messages is not all taken from the ring to be cut. Stops at a gap (what
  # a step finds lost), which the next read from the seq after reports.
  defp cut_read(channel, reader, from, max, budget, room) do
    {messages, _n, lost, next} = reader.(channel, from, min(max, @read_step))
    {acc, taken, bytes, cut?} = fit(messages, [], 0, 0, budget, room)
    stop? = cut? or taken == 0 or taken < @read_step
    {acc, bytes} = cut_more({channel, reader}, next, max - taken, acc, bytes, budget, stop?)
    {:lists.reverse(acc), bytes, lost}
  end

  defp cut_more(_source, _from, left, acc, bytes, _budget, stop?) when stop? or left <= 0,
    do: {acc, bytes}

  defp cut_more({channel, reader} = source, from, left, acc, bytes, budget, false) do
    case reader.(channel, from, min(left, @read_step)) do
      {[_ | _] = messages, n, 0, next} ->
        {acc, taken, bytes, cut?} = fit(messages, acc, 0, bytes, budget, budget)
        cut_more(source, next, left - taken, acc, bytes, budget, cut? or n < @read_step)

      _ ->
        {acc, bytes}
    end
  end

  # Takes messages while they fit in `budget`, the very first in `room`;
  # returns them newest first, how many, their bytes, and whether one did
  # not fit.
  defp fit([message | rest], acc, taken, bytes, budget, room) do
    cost = byte_size(elem(message, 1)) + @message_bytes

    if (acc == [] and cost <= room) or (acc != [] and bytes + cost <= budget),
      do: fit(rest, [message | acc], taken + 1, bytes + cost, budget, room),
      else: {acc, taken, bytes, true}
  end

  defp fit([], acc, taken, bytes, _budget, _room), do: {acc, taken, bytes, false}

  # Nothing fitted: either nothing is there, or the first message is too large.
  defp too_large_or_empty(channel, from, lost, room) do
    if too_large_at?(channel, from, room), do: {:error, :too_large}, else: {:ok, [], lost}
  end

  defp too_large_at?(channel, from, room) do
    case Ring.read(channel, from, 1) do
      {[{_, payload}], _, _, _} -> byte_size(payload) + @message_bytes > room
      _ -> false
    end
  end

  ## What answers cost

  @doc """
  The bytes a request for `op` carries, to bound what a link holds:
  payloads and what each message costs beyond its payload; for a group
  request, its seqs and names. Not counted: a fixed cost per item, which
  the link adds.

      iex> Ringbus.Op.request_bytes({:push_tagged, {"p", 1}, ["ab", "c"], 2, 3})
      35
      iex> Ringbus.Op.request_bytes({:stamped, {:push_trim, {:push, "abc"}, %{}}})
      19
  """
  @spec request_bytes(t()) :: non_neg_integer()
  def request_bytes({:push, payload}), do: byte_size(payload) + @message_bytes
  def request_bytes({:push_id, payload, _given}), do: byte_size(payload) + @message_bytes

  def request_bytes({push, _payloads, count, bytes}) when push in [:push_many, :push_run],
    do: bytes + @message_bytes * count

  def request_bytes({:push_tagged, _tag, _payloads, count, bytes}),
    do: bytes + @message_bytes * count

  def request_bytes({:push_batches, batches}),
    do:
      Enum.reduce(batches, 0, fn {_, count, bytes}, sum ->
        sum + bytes + @message_bytes * count
      end)

  def request_bytes({:push_trim, push, _trim}), do: request_bytes(push)
  def request_bytes({:stamped, op}), do: request_bytes(op)
  def request_bytes({:times, op}), do: request_bytes(op)
  def request_bytes({:ids, op}), do: request_bytes(op)
  def request_bytes({:group, request}), do: :erlang.external_size(request)
  def request_bytes({:delete, seqs}), do: :erlang.external_size(seqs)
  def request_bytes(_op), do: 0

  @doc """
  The bytes an answer carries, to bound what a link holds: payloads and
  what each message costs beyond its payload.
  """
  @spec answer_bytes(term()) :: non_neg_integer()
  def answer_bytes({:ok, messages, _lost}) when is_list(messages), do: messages_bytes(messages)

  def answer_bytes({:ok, _seq, payload}) when is_binary(payload),
    do: byte_size(payload) + @message_bytes

  def answer_bytes({:ok, _incarnation, answer}), do: answer_bytes(answer)
  def answer_bytes({:led, _leader, answer}), do: answer_bytes(answer)

  # Figures, a survey's, results per batch, a group's answer: measured
  # whole (a group's read of entries is cut to the room before).
  def answer_bytes({:ok, answer}) when not is_integer(answer), do: :erlang.external_size(answer)

  def answer_bytes(_answer), do: 0

  @doc """
  The bytes messages `[{seq, payload}]` (or `{seq, payload, ms}`) cost in
  a link: payloads and overhead.
  """
  @spec messages_bytes([tuple()]) :: non_neg_integer()
  def messages_bytes(messages) do
    {n, bytes} = measure(messages)
    bytes + @message_bytes * n
  end

  # How many messages `[{seq, payload}]` holds, and their payload bytes, in one pass.
  defp measure(messages), do: measure(messages, 0, 0)

  defp measure([message | rest], n, bytes),
    do: measure(rest, n + 1, bytes + byte_size(elem(message, 1)))

  defp measure([], n, bytes), do: {n, bytes}
end
