defmodule Ringbus.Replica.Machine do
  @moduledoc false
  # The Ra machine (`:ra_machine`) of a replicated channel: every replica
  # applies the same log, decides the same seqs, overflows and pulls, and
  # carries them out on its own node's ring (`Ringbus.Channel.Ring`'s
  # `*_decided` functions). See lib/ringbus/replica/README.md.
  #
  # Decisions are pure (`decide/3`): the state holds cursors, counts and
  # dedup tags, never a payload but what a writer's unanswered pulls took, so
  # the Ra server's heap stays small and its collections short. Payloads
  # live in the ring, and in the Raft log until their entries are released.
  #
  # Commands:
  #
  #   {:push, tag, payloads}     one batch; replies {:ok, first_seq} | {:error, reason}
  #   {:push_id, given, payload} one message under a Redis stream ID (`:auto`,
  #                              a client's `{ms, n}` or `{ms, :auto}`: machine
  #                              version 6); replies {:ok, seq, id} | {:error, reason}
  #   {:set_id, id}              the channel's last ID (XSETID, version 6);
  #                              replies :ok | {:error, :below_top}
  #   {:push_batches, [{tag, payloads}]}
  #                              many batches, each decided alone; replies a list
  #   {:pull, max}               takes up to max of the oldest; replies
  #                              {:ok, [{seq, payload}]} (on the node that applies it)
  #   {:trim, trim}              takes the oldest that `Ringbus.Channel.Trim`
  #                              names, as pulls; replies {:ok, count}
  #   {:delete, seqs}            deletes what seqs hold (`Replica.Deleted`,
  #                              machine version 7); replies {:ok, count}
  #   {:timeout, :expire}       the leader's timer under max_age: nothing but
  #                              the expiry every command starts with
  #   {:groups, [{room, request}]}
  #                              consumer group requests (`Ringbus.Group`),
  #                              each applied to this node's ring and group
  #                              table at the leader's stamp (machine version
  #                              2); replies {:groups, [answer]}
  #   {:tagged, {writer, n, floor}, command}
  #                              one of the above under a writer's tag (machine
  #                              version 1): applied once however often it is
  #                              sent; replies as the command did the first time
  #
  # A tag is nil or {producer_id, n}. A producer's tags increase; a batch
  # whose tag was stored already gets the reply it got then (within the last
  # `window` tags of that producer), and stores nothing. A tag is spent only
  # when its batch is stored, so a batch refused as full may be sent again
  # under the same tag. At most `max_producers` producers are remembered; the
  # one seen least recently goes first.
  #
  # A writer tag (`Ringbus.Replica.Writer`) makes a resend after a failover
  # safe: the writer does not know whether the dead leader's entry was
  # committed. `writer` is drawn at the writer's start, `n` numbers its
  # commands, and `floor` is its oldest command still unanswered: it never
  # sends below it again, so the replies below it are forgotten. The replies
  # from `floor` on are kept (at most `writer_window`, `max_writers`
  # writers), each as it was carried out, a pull's messages with it, so a
  # resend of a pull answers what the first took. Commands are not in order
  # (a copy lost with the old leader is sent again after newer ones), so a
  # tag is seen when its reply is kept, not when it is under the last;
  # `stale_tag` answers a tag below the floor that is not kept, and nothing
  # is applied. A refusal is a reply like any other: a resend gets it too.
  #
  # The log. Ra may drop the entries before a `release_cursor`, and on
  # recovery rebuilds the ring from the snapshot's state and the entries after
  # it: `Ringbus.Replica.Checkpoints` says when, and what a snapshot holds.
  #
  # Groups. A channel's consumer groups are rows of this node's group table
  # that only the log changes, so a snapshot carries them (`groups`), and
  # a state that has them (a snapshot recovered or installed, or a fresh
  # one: none) puts them in the table before its next command; so too the
  # messages a snapshot of a channel with groups holds (`messages`).

  @behaviour :ra_machine

  alias Ringbus.Channel.{Hold, Ids, Ring, Trim}
  require Ids
  alias Ringbus.Replica.{Carry, Checkpoints, Deleted, Retention, StreamIds, Versions}
  alias Ringbus.{Group, Store}

  # A replicated channel remembers as many tags as a memory channel does.
  @window Ringbus.Channel.Producers.window()
  @max_producers 1024
  # One writer per member node and start: few, and each with little in flight.
  @writer_window 256
  @max_writers 64
  # The versions, and what each makes of a command: `Ringbus.Replica.Versions`.
  @version Versions.current()

  defstruct [
    :channel,
    :capacity,
    :overflow,
    :max_bytes,
    max_age: nil,
    window: @window,
    max_producers: @max_producers,
    # The next seq to store, and the oldest live one.
    head: 0,
    tail: 0,
    # Only under max_bytes: the bytes live, and {first_seq, <<size::32, ...>>}
    # per stored batch still (partly) live, oldest first.
    bytes: 0,
    sizes: :queue.new(),
    rejected: 0,
    # producer_id => {last_n, last_index, :queue.queue({n, reply})}
    producers: %{},
    writer_window: @writer_window,
    max_writers: @max_writers,
    # writer_id => {floor, last_index, %{n => reply}}
    writers: %{},
    checkpoints: :queue.new(),
    # The stamp (system ms) of the last command: a command's messages are
    # stamped the later of it and the leader's time in the entry, so that
    # times never decrease even when leaders' clocks differ.
    stamp: 0,
    # The last Redis stream ID given, and the newest stored message's
    # (`Ringbus.Replica.StreamIds`).
    last_id: {0, 0},
    top_id: {0, 0},
    # Only under max_age: {first_seq, stamp} per stamp that stored
    # messages still live, oldest first.
    times: :queue.new(),
    # Group rows to put in this node's table before the next command, or
    # nil once there.
    groups: [],
    # Messages to put in this node's ring before the next command, or nil
    # once there (`Ringbus.Replica.Checkpoints`).
    messages: nil,
    # The index of the last snapshot of the state as it stood.
    released: 0,
    # The seqs deleted that the tail has not passed (`Ringbus.Replica.Deleted`).
    deleted: Deleted.new()
  ]

  @type tag :: nil | {term(), integer()}
  @type reply :: {:ok, non_neg_integer()} | {:error, :full | :too_large | :stale_tag | :badarg}
  @type op ::
          {:put, non_neg_integer(), [binary()], non_neg_integer(), non_neg_integer(),
           Ids.id() | nil}
          | {:last_id, Ids.id()}
          | {:drop, non_neg_integer()}
          | {:pull, non_neg_integer(), non_neg_integer()}
          | {:rejected, non_neg_integer()}
          | {:expire, non_neg_integer()}

  @impl :ra_machine
  def init(config) do
    %__MODULE__{
      channel: Map.fetch!(config, :channel),
      capacity: Map.fetch!(config, :capacity),
      overflow: Map.get(config, :overflow, :drop_oldest),
      max_bytes: Map.get(config, :max_bytes),
      max_age: Map.get(config, :max_age),
      window: Map.get(config, :window, @window),
      max_producers: Map.get(config, :max_producers, @max_producers),
      writer_window: Map.get(config, :writer_window, @writer_window),
      max_writers: Map.get(config, :max_writers, @max_writers)
    }
  end

  @impl :ra_machine
  def version, do: @version

  @impl :ra_machine
  def which_module(_version), do: __MODULE__

  @impl :ra_machine
  def apply(%{index: index} = meta, command, state) do
    state = state |> upgrade() |> load()
    version = Map.get(meta, :machine_version, @version)

    now =
      max(
        Map.get_lazy(meta, :system_time, fn -> System.system_time(:millisecond) end),
        state.stamp
      )

    {state, expired} = expire_in(version, %{state | stamp: now})
    {state, reply, ops} = decide_in(version, command, index, state)
    state = %{state | deleted: Deleted.prune(state.deleted, state.tail)}
    ops = expired ++ ops
    reply = Carry.out(state.channel, ops, reply, now)
    state = settle(state, command, reply)
    {state, effects} = Checkpoints.checkpoint(state, index, version)
    {state, reply, effects ++ Retention.expiry_timer(state)}
  end

  # Ra's change of version is decided as the version it changes to.
  defp decide_in(_version, {:machine_version, _, _} = change, index, state),
    do: decide(change, index, state)

  defp decide_in(version, command, index, state) do
    decided = decide(Versions.command(version, command), index, state)
    StreamIds.in_version(version, state, decided)
  end

  # Under a version before 3 in effect, no member expires anything, alike.
  defp expire_in(version, state) when version < 3, do: {state, []}
  defp expire_in(_version, state), do: Retention.expire(state)

  # A state from a snapshot of version 0 has no writers; of version 1, no
  defp upgrade(%__MODULE__{writers: _, groups: _, stamp: _, times: _, messages: _} = st)
       when is_map_key(st, :released) and is_map_key(st, :top_id) and is_map_key(st, :deleted),
       do: st

  defp upgrade(state) do
    state
    |> Map.put_new(:writers, %{})
    |> Map.put_new(:writer_window, @writer_window)
    |> Map.put_new(:max_writers, @max_writers)
    |> Map.put_new(:groups, [])
    |> Map.put_new(:stamp, 0)
    |> Map.put_new(:max_age, nil)
    |> Map.put_new(:times, :queue.new())
    |> Map.put_new(:messages, nil)
    |> Map.put_new(:released, 0)
    |> Map.put_new(:last_id, {0, 0})
    |> Map.put_new(:top_id, {0, 0})
    |> Map.put_new(:deleted, Deleted.new())
  end

  # A snapshot's messages go in the ring before its groups read it.
  defp load(state),
    do: load_groups(%{state | messages: Checkpoints.load(state.channel, state.messages)})

  defp load_groups(%__MODULE__{groups: nil} = state), do: state

  defp load_groups(%__MODULE__{groups: rows} = state) do
    case Store.fetch(state.channel) do
      {:ok, ch} ->
        Group.load(ch, rows)
        # A ring rebuilt from a snapshot (even of an empty ring) gives its
        # last ID as the state has it.
        Ids.raise_to(ch.ids, state.last_id)
        %{state | groups: nil}

      {:error, :no_channel} ->
        state
    end
  end

  # A member that starts from a snapshot holds its messages and groups at
  # once, not only from its next command. (Loading twice puts nothing twice.)
  @impl :ra_machine
  def state_enter(_ra_state, state) do
    _ = state |> upgrade() |> load()
    []
  end

  @impl :ra_machine
  def overview(state) do
    %{
      channel: state.channel,
      head: state.head,
      tail: state.tail,
      bytes: state.bytes,
      producers: map_size(state.producers),
      writers: map_size(state.writers),
      checkpoints: :queue.len(state.checkpoints)
    }
  end

  ## Decisions

  @doc """
  Decides `command`, applied at log `index`: the new state, the reply, and
  what to do to the ring, in order. Pure.
  """
  @spec decide(term(), non_neg_integer(), %__MODULE__{}) :: {%__MODULE__{}, term(), [op]}
  def decide({:push, tag, payloads}, index, state) do
    {state, reply, ops} = tagged(state, tag, payloads, index)
    {state, reply, ops |> finish(state)}
  end

  def decide({:push_id, given, payload}, _index, state)
      when Ids.is_given(given) and is_binary(payload) do
    case store(state, [payload], given) do
      {state, {:ok, seq}, ops} -> {state, {:ok, seq, state.top_id}, finish(ops, state)}
      # As a memory channel's answers it (`Ringbus.Channel.GivenIds`): Redis's word.
      {state, {:error, :ids_exhausted}, ops} -> {state, {:error, :exhausted}, ops}
      refused -> refused
    end
  end

  def decide({:set_id, id}, _index, state) when Ids.is_id(id), do: StreamIds.set(state, id)

  def decide({:push_batches, batches}, index, state) when is_list(batches) do
    {state, replies, ops} =
      Enum.reduce(batches, {state, [], []}, fn
        {tag, payloads}, {st, replies, ops} ->
          {st, reply, new} = tagged(st, tag, payloads, index)
          {st, [reply | replies], [new | ops]}

        _bad, {st, replies, ops} ->
          {st, [{:error, :badarg} | replies], ops}
      end)

    ops = ops |> Enum.reverse() |> Enum.concat() |> merge_puts()
    {state, Enum.reverse(replies), finish(ops, state)}
  end

  # A channel with holding groups has them for consumers: a pull takes nothing.
  def decide({:pull, max}, _index, state) when is_integer(max) and max >= 0 do
    if hold_floor(state), do: take(state, 0), else: take(state, max)
  end

  # With holding groups, a trim takes only what they all acked.
  def decide({:trim, %{strategy: _} = trim}, _index, state) do
    standing = Deleted.size(state.deleted, state.tail)
    {count, bound} = Trim.bounds(trim, state.tail, state.head, standing)
    bound = if floor = hold_floor(state), do: min(bound, floor), else: bound
    {state, {:pulled, first, count}, ops} = take(state, count, bound)
    {state, {:trimmed, first, count}, ops}
  end

  def decide({:delete, seqs}, _index, state) when is_list(seqs) do
    # Those at the oldest end are passed at once, as each ring's delete does.
    {deleted, fresh, n, passed} = Deleted.delete(state.deleted, seqs, state.tail, state.head)
    state = %{state | deleted: deleted, tail: state.tail + passed}
    {Retention.forget_sizes(state, passed), {:ok, n}, [{:delete, fresh}]}
  end

  def decide({:tagged, {writer, n, floor}, command}, index, state)
      when is_integer(n) and is_integer(floor) and elem(command, 0) != :tagged do
    {floor, replies} =
      case Map.fetch(state.writers, writer) do
        {:ok, {known, _seen, replies}} when known >= floor -> {known, replies}
        {:ok, {_known, _seen, replies}} -> {floor, forget_below(replies, floor)}
        :error -> {floor, %{}}
      end

    case replies do
      %{^n => reply} ->
        {put_writer(state, writer, {floor, index, replies}), reply, []}

      _ when n < floor ->
        {put_writer(state, writer, {floor, index, replies}), {:error, :stale_tag}, []}

      _ ->
        {state, reply, ops} = decide(command, index, state)
        {floor, replies} = cap(floor, Map.put(replies, n, reply), state.writer_window)
        {put_writer(state, writer, {floor, index, replies}), reply, ops}
    end
  end

  def decide({:groups, requests}, _index, state) when is_list(requests),
    do: {state, {:groups, requests}, [{:groups, requests}]}

  # The leader's timer for the oldest message's expiry (`Retention.expiry_timer/1`):
  # a command whose stamp `apply/3` expires at, with nothing else to do.
  def decide({:timeout, :expire}, _index, state), do: {state, :ok, []}

  # Ra's own command when a leader of a newer version takes over.
  def decide({:machine_version, from, to}, _index, state) do
    {state, ops} = StreamIds.upgrade(upgrade(state), from, to)
    {state, :ok, ops}
  end

  def decide(_unknown, _index, state), do: {state, {:error, :badarg}, []}

  # Pushes a batch under its producer's tag, or answers a tag seen already.
  defp tagged(state, nil, payloads, _index), do: store(state, payloads)

  # As a memory channel's tags (`Ringbus.Channel.Producers`): a tag at or
  # below last - window is stale; one within the window that was stored
  # answers its reply; one within it never stored (refused, or sent out of
  # order) is stored now, once.
  defp tagged(state, {producer, n} = tag, payloads, index) when is_integer(n) do
    known = Map.fetch(state.producers, producer)

    case known do
      {:ok, {last, _seen, _recent}} when n <= last - state.window ->
        {state, {:error, :stale_tag}, []}

      {:ok, {_last, _seen, recent}} ->
        case List.keyfind(:queue.to_list(recent), n, 0) do
          {^n, reply} -> {state, reply, []}
          nil -> store_tagged(state, tag, payloads, index, known)
        end

      :error ->
        store_tagged(state, tag, payloads, index, known)
    end
  end

  defp tagged(state, _bad_tag, _payloads, _index), do: {state, {:error, :badarg}, []}

  defp store_tagged(state, tag, payloads, index, known) do
    case store(state, payloads) do
      {state, {:ok, _} = reply, ops} -> {remember(state, tag, reply, index, known), reply, ops}
      refused -> refused
    end
  end

  # The producer's last is its highest n stored; it remembers the replies
  # of its tags above last - window (at most window of them).
  defp remember(state, {producer, n}, reply, index, known) do
    {last, recent} =
      case known do
        {:ok, {last, _seen, recent}} -> {max(last, n), recent}
        :error -> {n, :queue.new()}
      end

    recent =
      :queue.filter(fn {k, _} -> k > last - state.window end, :queue.in({n, reply}, recent))

    producers = Map.put(state.producers, producer, {last, index, recent})
    %{state | producers: evict(producers, state.max_producers)}
  end

  # Forgets the producer (or writer) seen least recently, past the bound.
  # Linear in them, and only when a new one comes past the bound.
  defp evict(producers, max) when map_size(producers) <= max, do: producers

  defp evict(producers, _max) do
    {oldest, _} = Enum.min_by(producers, fn {_id, {_n, seen, _recent}} -> seen end)
    Map.delete(producers, oldest)
  end

  defp put_writer(state, writer, record),
    do: %{state | writers: evict(Map.put(state.writers, writer, record), state.max_writers)}

  defp forget_below(replies, floor), do: :maps.filter(fn n, _ -> n >= floor end, replies)

  # Past the window, the oldest reply goes and the floor rises past it.
  defp cap(floor, replies, window) when map_size(replies) <= window, do: {floor, replies}

  defp cap(_floor, replies, window) do
    oldest = replies |> Map.keys() |> Enum.min()
    cap(oldest + 1, Map.delete(replies, oldest), window)
  end

  # A tagged command newly applied keeps its reply as carried out: a pull's
  # messages, read from this node's ring, which a resend cannot read again.
  defp settle(state, {:tagged, {writer, n, _floor}, _command}, reply) do
    case state.writers do
      %{^writer => {floor, seen, %{^n => _} = replies}} ->
        %{state | writers: %{state.writers | writer => {floor, seen, %{replies | n => reply}}}}

      _ ->
        state
    end
  end

  defp settle(state, _command, _reply), do: state

  # Stores a batch under the IDs `given` names, or refuses it, as the IDs'
  # rules and the channel's overflow policy say.
  defp store(state, payloads, given \\ :auto) do
    with {count, bytes} when count > 0 <- measure(payloads),
         {:ok, ids} <- StreamIds.next(state, given, count) do
      {state, freed} = free_held(state, count, bytes)
      {state, reply, ops} = store(state, payloads, count, bytes, ids)
      {state, reply, freed ++ ops}
    else
      :error -> {state, {:error, :badarg}, []}
      {0, _bytes} -> {state, {:ok, state.head}, []}
      {:error, _} = refused -> {state, refused, []}
    end
  end

  defp store(state, payloads, count, bytes, {first_id, _last} = ids) do
    cond do
      state.max_bytes != nil and bytes > state.max_bytes ->
        refuse(state, count, :too_large)

      state.overflow == :reject and not fits?(state, count, bytes) ->
        refuse(state, count, :full)

      true ->
        first = state.head

        state =
          %{state | head: first + count}
          |> Retention.keep_time(first)
          |> Retention.keep_sizes(first, payloads, bytes)
          |> StreamIds.taken(ids)

        {state, {:ok, first}, [{:put, first, payloads, count, bytes, first_id}]}
    end
  end

  # Takes the `count` oldest messages below `bound` (fewer if the ring holds
  # fewer), passing deleted seqs: the reply counts messages, the op seqs.
  defp take(state, count, bound \\ :infinity) do
    first = state.tail
    {seqs, count} = Deleted.span(state.deleted, first, count, min(state.head, bound))
    state = %{state | tail: first + seqs} |> Retention.forget_sizes(seqs)
    {state, {:pulled, first, count}, [{:pull, first, seqs}]}
  end

  # A full reject channel with holding groups frees what they all acked
  # first, as a memory channel's push does (`Ringbus.Channel.Hold`). The
  # floor is the one this member's groups published as it applied the
  # group requests before this command, the same on every member.
  defp free_held(%__MODULE__{overflow: :reject} = state, count, bytes) do
    with false <- fits?(state, count, bytes),
         floor when is_integer(floor) and floor > state.tail <- hold_floor(state) do
      {state, _pulled, ops} = take(state, floor - state.tail, floor)
      {state, ops}
    else
      _ -> {state, []}
    end
  end

  defp free_held(state, _count, _bytes), do: {state, []}

  # The floor of the channel's holding groups, or nil when it has none.
  defp hold_floor(state) do
    with {:ok, channel} <- Store.fetch(state.channel),
         true <- Hold.held?(channel) do
      Hold.floor(channel)
    else
      _ -> nil
    end
  end

  defp fits?(state, count, bytes) do
    state.head + count - state.tail <= state.capacity and
      (state.max_bytes == nil or state.bytes + bytes <= state.max_bytes)
  end

  defp refuse(state, count, reason) do
    state = %{state | rejected: state.rejected + count}
    {state, {:error, reason}, [{:rejected, state.rejected}]}
  end

  defp measure(payloads) when is_list(payloads) do
    Ring.measure!(payloads)
  rescue
    ArgumentError -> :error
  end

  defp measure(_payloads), do: :error

  # Batches stored one after another are one put: the ring inserts them at
  # once and wakes its readers once, on every member.
  # Their IDs follow each other: a merged put carries its first batch's.
  defp merge_puts([{:put, first, payloads, count, bytes, id} | rest]),
    do: merge_puts(rest, first, [payloads], count, bytes, id)

  defp merge_puts([op | rest]), do: [op | merge_puts(rest)]
  defp merge_puts([]), do: []

  defp merge_puts([{:put, next, payloads, n, b, _id} | rest], first, runs, count, bytes, id)
       when next == first + count,
       do: merge_puts(rest, first, [payloads | runs], count + n, bytes + b, id)

  defp merge_puts(rest, first, runs, count, bytes, id) do
    payloads = runs |> :lists.reverse() |> :lists.append()
    [{:put, first, payloads, count, bytes, id} | merge_puts(rest)]
  end

  # After a command's pushes: a drop-oldest channel drops what the capacity
  # and max_bytes no longer hold, once, after all of its batches.
  defp finish(ops, %__MODULE__{overflow: :drop_oldest} = state) do
    if Enum.any?(ops, &match?({:put, _, _, _, _, _}, &1)),
      do: ops ++ [{:drop, state.tail}],
      else: ops
  end

  defp finish(ops, _state), do: ops
end
