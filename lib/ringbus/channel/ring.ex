defmodule Ringbus.Channel.Ring do
  @moduledoc false
  # Kept whole: the ring is one lock-free algorithm over one channel's
  # atomics slots and ETS keys; push, pull, read and the replicated writes
  # each rely on the others' cursor and chunk invariants, which a split
  # would have to publish.
  #
  # (Chunks below: a batch's payloads as one binary and the offsets where
  # each ends, so that storing a batch copies its bytes once, with one
  # memcpy, whatever its count.)
  # The ring: operations on a channel handle that run in the caller's process.
  #
  # Storage. One public ETS `:ordered_set` per channel. Keys are sequence
  # numbers, so two messages never share a key and the ring "wraps" by
  # deleting `seq - capacity` when `seq` goes in. An ordered set keeps the
  # keys being written and removed at the two ends of one tree, which stays in
  # cache; a hash table scatters them. The table holds:
  #
  #   {seq, payload, at, id}          a message stored on its own
  #   {seq, mark}                     a seq given up on (see "Stalls")
  #   {last + 0.5, first, bytes, left, data, ends, at, id}
  #                                   a chunk: a drop-oldest batch as one object,
  #                                   `left` of its messages not yet claimed
  #   {last + 0.25, first, pid}       a reservation: a chunk `pid` is storing
  #
  # `at` is the message's time (monotonic µs), read once per push or batch
  # inside its seq reservation, between reading `head` and the
  # compare-and-swap that moves it, so that times never decrease in seq
  # order: if reservation r1 swapped before r2, r2 read `head` after r1's
  # swap and its clock after that, while r1 read its clock before its swap.
  # A batch's rows share one `at`. `read_timed/3` gives them to
  # subscriptions (delivery times, `Ringbus.Channel.Delivery`) and
  # `Ringbus.Channel.Times` turns them into system ms, probes them
  # (`stored_at/2`) and searches them. A replicated channel's `at` is its
  # leader's stamp, given to `put_decided/6`.
  #
  # `id` is the message's Redis stream ID (`Ringbus.Channel.Ids`; a chunk's
  # is its first message's, the others follow it), reserved with `at`,
  # inside the seq reservation, so IDs increase in seq order.
  #
  # Cursors and counters, in `:atomics`:
  #
  #   head    the next seq to hand out; a push reserves seqs by bumping it
  #   tail    the oldest seq not yet claimed; every seq below it has been
  #           claimed exactly once: by a pull, or by a push that overwrote it
  #   dropped every object keyed below it has been deleted (drop-oldest)
  #   pulled, skipped, rejected, held (payload bytes in the table),
  #   bytes_pushed, and the wake and chunked flags
  #
  # A pull claims one seq with a CAS on tail, then takes it. A push of `seq`
  # into a full drop-oldest ring claims every seq up to `seq - capacity` by
  # moving tail, then deletes what those seqs hold (`drop_through/2`). Because
  # every seq is claimed once, the counts follow from the cursors:
  #
  #   len         = head - tail - tombstones standing
  #   pushed      = head - skipped
  #   overwritten = tail - pulled - skipped - expired - tombstones passed
  #                 (tombstones: messages deleted, `Ringbus.Channel.Deletes`)
  #
  # Under `max_age`, a message older than it is claimed as a pull claims
  # it, and counted `expired` (`expire/1`): the oldest one's time is
  # looked at before each push reserves and before reads, so the ring is
  # never scanned for it.
  #
  # A pull that claimed a seq a push has since dropped finds it gone: that
  # message was overwritten, and the formula already says so.
  #
  # Bytes. `held` is the payload bytes the table holds: it grows when a
  # message is stored and shrinks when an object is deleted, by whoever
  # deletes it (each object is deleted exactly once: `take`, or `select_delete`
  # of the exact object). A chunk is deleted whole: by the drop that reaches
  # its last seq, or by the pull that takes its last message (each pull counts
  # `left` down once it has its payload). Under `max_bytes`, a push (or
  # batch) of more bytes than `max_bytes` is refused before it reserves; a
  # drop-oldest push claims the oldest seqs until `held` fits again, and a
  # reject push reserves its bytes with a CAS before it reserves seqs (so
  # under reject `held` includes the bytes of pushes in flight). Drop-oldest
  # channels with `max_bytes` store batches message by message, so that bytes
  # are freed one message at a time.
  #
  # Stalls. Between reserving a seq and storing it a producer can be
  # descheduled, or killed. Readers wait a bounded time (5 ms) for such a seq,
  # then give up on it with a mark, inserted with `insert_new` so that it and
  # the late message exclude each other, and count it as skipped:
  #
  #   :skipped          a subscription gave up on a seq no pull had claimed;
  #                     the pull that claims it later takes the skip over
  #   :skipped_claimed  the pull that claimed the seq gave up on it
  #   :abandoned        the producer came back, found a mark, and gave up
  #                     the seq itself; the pull that claims it removes it
  #
  # A late producer whose `insert_new` meets a mark abandons its seq (deleting
  # a `:skipped_claimed`, turning a `:skipped` into `:abandoned`) and pushes
  # again under a fresh seq, so its message is not lost and the seq stays
  # counted as skipped once. Whoever removes a mark before the producer saw
  # it (a push dropping the seq, a reader withdrawing a mark on a seq claimed
  # meanwhile) also takes back the count: the late producer then stores, finds
  # the seq dropped (or claimed by a pull that waits for it), and the seq
  # counts as pushed. So a seq is skipped only when its producer abandoned it
  # or its mark still stands. A producer killed mid-push leaves its mark until
  # a push drops the seq (it then counts as pushed and overwritten, as an
  # unclaimed seq would) or, under reject, until the channel is deleted.
  #
  # Chunks are never shadowed. A chunk cannot go in with `insert_new` over its
  # seqs, so its producer first inserts a reservation, then looks for marks in
  # its range: if there is one, nothing of the batch has been seen yet, and it
  # abandons the range and pushes the batch again under fresh seqs; if there
  # is none, it inserts the chunk and removes the reservation. A reader never
  # marks a seq a live producer's reservation covers, and after inserting a
  # mark it looks for a reservation or chunk covering the seq, and withdraws
  # the mark if it finds one. The producer looks after its reservation is in,
  # the reader after its mark is in, so at least one sees the other. A mark
  # that still stands inside a stored chunk (its reader died before it could
  # withdraw it) is stale, and whoever meets it withdraws it. So every message
  # a push reported stored is readable, pulled, or counted overwritten.

  alias Ringbus.Channel
  alias Ringbus.Channel.{Anchor, Deletes, Hold, Ids, Payloads, Trim, Wake}

  @head 1
  @tail 2
  @pulled 3
  @skipped 4
  @rejected 5
  @held 6
  @bytes_pushed 7
  # Slot 8, the wake flag, is `Ringbus.Channel.Wake`'s.
  @chunked 9
  @dropped 10
  # Slots 11 and 12 are `Ringbus.Channel.Hold`'s, 14 and 15 `Ringbus.Channel.Deletes`'s.
  @expired 13
  @slots 15

  # How long a reader waits for a reserved seq whose producer has not stored it.
  @stall_ms 5

  @typep seq :: non_neg_integer()
  @typep stamp :: {integer(), Ids.id()}
  @typep at :: integer() | stamp()

  defguardp is_mark(value) when value in [:skipped, :skipped_claimed, :abandoned]

  @doc """
  Creates the storage of a channel and starts its `Ringbus.Channel.Anchor`,
  linked to the caller. Called by the table owner.
  """
  @spec new(Channel.options()) :: Channel.t()
  def new(opts) do
    %Channel{
      table: :ets.new(:ringbus_ring, [:ordered_set, :public, write_concurrency: true]),
      waiters: :ets.new(:ringbus_waiters, [:set, :public]),
      atomics: :atomics.new(@slots, signed: true),
      anchor: Anchor.start_link(),
      capacity: Keyword.fetch!(opts, :capacity),
      overflow: Keyword.fetch!(opts, :overflow),
      max_bytes: Keyword.get(opts, :max_bytes),
      max_age: Keyword.get(opts, :max_age),
      replica: Keyword.get(opts, :replica),
      incarnation: Keyword.get_lazy(opts, :incarnation, &new_incarnation/0),
      ids: Ids.new()
    }
  end

  @doc "A fresh incarnation: a random positive 64-bit integer."
  @spec new_incarnation() :: pos_integer()
  def new_incarnation, do: :rand.uniform(0xFFFF_FFFF_FFFF_FFFF)

  @doc """
  `:ok` when `expected` is nil or the channel's incarnation, else
  `{:error, :new_incarnation}`: the channel was created again since.
  """
  @spec check_incarnation(Channel.t(), pos_integer() | nil) :: :ok | {:error, :new_incarnation}
  def check_incarnation(_ch, nil), do: :ok
  def check_incarnation(%Channel{incarnation: i}, i), do: :ok
  def check_incarnation(%Channel{}, _expected), do: {:error, :new_incarnation}

  ## Push

  @spec push(Channel.t(), binary()) :: {:ok, seq} | {:error, :full | :too_large}
  def push(%Channel{} = ch, payload) do
    size = byte_size(payload)

    case reserve_for(ch, 1, size) do
      {:ok, seq, at} -> commit(ch, seq, payload, at)
      {:error, reason} -> refuse(ch, 1, reason)
    end
  end

  @doc false
  # The second half of a push: stores `payload` under `seq`, reserved by the
  # caller at `at` (now by default). Tests call it late to play a stalled
  # producer.
  @spec commit(Channel.t(), seq, binary(), stamp() | nil, fun() | nil) ::
          {:ok, seq} | {:error, :full | :too_large | :stalled}
  def commit(ch, seq, payload, stamp \\ nil, retry \\ &push/2) do
    size = byte_size(payload)
    {at, id} = stamp || late_stamp(ch, 1)

    if :ets.insert_new(ch.table, {seq, Payloads.detach(payload), at, id}) do
      stored_bytes(ch, size)
      stored(ch, seq, seq)
      {:ok, seq}
    else
      unreserve_bytes(ch, size)
      abandon(ch, seq)
      # A client's ID cannot be given to a fresh seq: later IDs may be out.
      if retry, do: retry.(ch, payload), else: {:error, :stalled}
    end
  end

  @doc "Counts a batch and its bytes; raises `ArgumentError` on a payload that is not a binary."
  @spec measure!([binary()]) :: {non_neg_integer(), non_neg_integer()}
  defdelegate measure!(payloads), to: Payloads

  @doc """
  Pushes a batch of `count` binaries, `bytes` bytes in all, as counted by
  `measure!/1` (or by a caller that walked the batch already). Under reject
  it goes in whole or not at all. The batch is a list, or any enumerable of
  binaries that knows its count and bytes (a server's large `PUSH_BATCH`),
  walked without listing it.
  """
  @spec push_measured(Channel.t(), Enumerable.t(), non_neg_integer(), non_neg_integer()) ::
          {:ok, seq} | {:error, :full | :too_large}
  def push_measured(ch, _payloads, 0, _bytes), do: {:ok, :atomics.get(ch.atomics, @head)}

  def push_measured(ch, payloads, count, bytes) do
    case reserve_for(ch, count, bytes) do
      {:ok, first, at} -> commit_batch(ch, first, payloads, count, bytes, at)
      {:error, reason} -> refuse(ch, count, reason)
    end
  end

  @doc "Pushes batches `{payloads, count, bytes}` one by one, each whole or not at all."
  @spec push_batches(Channel.t(), [{[binary()], non_neg_integer(), non_neg_integer()}]) ::
          [{:ok, seq} | {:error, :full | :too_large}]
  def push_batches(ch, batches),
    do: Enum.map(batches, fn {payloads, n, bytes} -> push_measured(ch, payloads, n, bytes) end)

  @doc """
  Pushes a batch whole or not at all, and counts nothing when it is refused:
  for a caller that tries many pushes as one and, if that fails, pushes them
  one by one with `push_measured/4`.
  """
  @spec push_run(Channel.t(), [binary()], pos_integer(), non_neg_integer()) ::
          {:ok, seq} | {:error, :full | :too_large}
  def push_run(ch, payloads, count, bytes) do
    with {:ok, first, at} <- reserve_for(ch, count, bytes) do
      case store_batch(ch, first, payloads, count, bytes, at) do
        {:ok, first} -> {:ok, first}
        :retry -> push_run(ch, payloads, count, bytes)
      end
    end
  end

  @doc false
  # The second half of `push_measured/4`: stores a batch under the `count`
  # seqs from `first`, reserved by the caller; pushes it again under fresh
  # seqs if a reader gave up on part of the range meanwhile.
  @spec commit_batch(Channel.t(), seq, [binary()], pos_integer(), non_neg_integer(), stamp | nil) ::
          {:ok, seq} | {:error, :full | :too_large}
  def commit_batch(ch, first, payloads, count, bytes, stamp \\ nil) do
    case store_batch(ch, first, payloads, count, bytes, stamp || late_stamp(ch, count)) do
      {:ok, first} -> {:ok, first}
      :retry -> push_measured(ch, payloads, count, bytes)
    end
  end

  # Stores a batch: {:ok, first}, or :retry when a reader had given up on
  # part of the range, which is then abandoned whole.
  defp store_batch(%Channel{overflow: :drop_oldest, max_bytes: nil} = ch, first, ps, n, bytes, at)
       when n > 1 and bytes < 0x1_0000_0000,
       do: store_chunk(ch, first, ps, n, bytes, at)

  defp store_batch(ch, first, payloads, count, bytes, at) do
    last = first + count - 1

    if :ets.insert_new(ch.table, objects(payloads, first, at, [])) do
      stored_bytes(ch, bytes)
      stored(ch, first, last)
      {:ok, first}
    else
      unreserve_bytes(ch, bytes)
      Enum.each(first..last, &abandon(ch, &1))
      :retry
    end
  end

  # A drop-oldest batch as one chunk object, behind a reservation (see
  # "Chunks are never shadowed" above).
  defp store_chunk(%Channel{table: t, atomics: a} = ch, first, payloads, count, bytes, at) do
    last = first + count - 1
    if :atomics.get(a, @chunked) == 0, do: :atomics.put(a, @chunked, 1)
    :ets.insert(t, {reservation_key(last), first, self()})

    if mark_in?(ch, first, last) do
      Enum.each(first..last, &abandon(ch, &1))
      :ets.delete(t, reservation_key(last))
      :retry
    else
      {data, ends} = Payloads.chunk(payloads)
      {at, id} = at
      :ets.insert(t, {chunk_key(last), first, bytes, count, data, ends, at, id})
      :ets.delete(t, reservation_key(last))
      stored_bytes(ch, bytes)
      stored(ch, first, last)
      {:ok, first}
    end
  end

  # Whether a mark stands on a seq in first..last: the only integer keys a
  # reserved range can hold.
  defp mark_in?(ch, first, last) do
    key = :ets.next(ch.table, first - 0.125)
    is_integer(key) and key <= last
  end

  # Rows of a batch stored at `{at, id}`: its IDs follow the first.
  defp objects(payloads, seq, {at, id}, acc), do: objects(payloads, seq, at, id, 0, acc)

  defp objects([p | rest], seq, at, id, i, acc),
    do:
      objects(rest, seq + 1, at, id, i + 1, [{seq, Payloads.detach(p), at, Ids.nth(id, i)} | acc])

  defp objects([], _seq, _at, _id, _i, acc), do: acc

  defp objects(payloads, seq, at, id, _i, acc) do
    {acc, _seq, _i} =
      Enum.reduce(payloads, {acc, seq, 0}, fn p, {acc, seq, i} ->
        {[{seq, Payloads.detach(p), at, Ids.nth(id, i)} | acc], seq + 1, i + 1}
      end)

    acc
  end

  defp now_us, do: :erlang.monotonic_time(:microsecond)

  # A stamp taken outside a reservation: for tests that play a stalled
  # producer, whose IDs then need not follow seq order.
  defp late_stamp(ch, count), do: Ids.stamp!(ch.ids, count, now_us())

  @doc false
  # Counts a refused push (or batch) of `count` messages.
  def refuse(ch, count, reason) do
    :atomics.add(ch.atomics, @rejected, count)
    {:error, reason}
  end

  # Reserves seqs (and bytes) for a batch, unless its bytes are more than
  # the channel's whole `max_bytes`: stored, a drop-oldest batch would
  # overwrite its own first messages. Counts nothing. Answers the first seq
  # and the batch's stamp (time and first ID), read within the reservation.
  @doc false
  def reserve_for(ch, count, bytes) do
    expire(ch)
    if too_large?(ch, bytes), do: {:error, :too_large}, else: reserve_at(ch, count, bytes)
  end

  @doc """
  Under `max_age`, claims the oldest messages stored longer ago than it (at
  most `max`, `:more` when it stopped there), one at a time while the oldest
  is that old, each counted `expired`: one look at the oldest's time when none is.
  """
  @spec expire(Channel.t(), pos_integer() | :infinity) :: :ok | :more
  def expire(ch, max \\ :infinity)
  # A replicated channel's expiry is its machine's decision (`expire_decided/2`).
  def expire(%Channel{max_age: age, replica: r}, _max) when age == nil or r != nil, do: :ok
  def expire(%Channel{max_age: age} = ch, max), do: expire_before(ch, now_us() - age * 1000, max)

  defp expire_before(_ch, _cutoff, 0), do: :more

  defp expire_before(%Channel{atomics: a} = ch, cutoff, max) do
    tail = :atomics.get(a, @tail)

    with true <- tail < :atomics.get(a, @head),
         at when is_integer(at) and at < cutoff <- tail_at(ch, tail) do
      take_expired(ch, tail)
      expire_before(ch, cutoff, if(max == :infinity, do: max, else: max - 1))
    else
      _none_old_enough -> :ok
    end
  end

  # A mark at the tail has no time, nor has a seq not stored (a range its
  # producer gave up, or is storing); the next stored seq's time is later
  # than their reservations were, so they go (as a pull takes them) when
  # that does.
  defp tail_at(ch, seq) do
    with nil <- stored_at(ch, seq),
         true <- seq + 1 < :atomics.get(ch.atomics, @head),
         empty when empty == nil or is_mark(empty) <- element(ch.table, seq, 2) do
      tail_at(ch, seq + 1)
    end
  end

  # Claims `seq` if it is still the tail, as a pull would, and takes it as
  # expired. A stored seq needs no wait: it is taken, or gone if a lapping
  # push dropped it (then counted overwritten).
  defp take_expired(%Channel{atomics: a} = ch, seq) do
    if :atomics.compare_exchange(a, @tail, seq, seq + 1) == :ok do
      with {:ok, _} <- take_claimed(ch, seq, 0, nil), do: :atomics.add(a, @expired, 1)
    end

    :ok
  end

  defp too_large?(%Channel{max_bytes: nil}, _bytes), do: false
  defp too_large?(%Channel{max_bytes: max}, bytes), do: bytes > max

  @doc """
  Removes the oldest messages that `trim` names (`Ringbus.Channel.Trim`),
  each as a pull, so they count as `pulled`; answers how many went.
  Pulls by others meanwhile can make it fewer.
  """
  @spec trim(Channel.t(), Trim.t()) :: {:ok, non_neg_integer()}
  def trim(ch, trim) do
    # With holding groups, only what they all acked.
    {count, bound} = Trim.bounds(trim, first_seq(ch), next_seq(ch), Deletes.standing(ch))
    limit = if Hold.held?(ch), do: min(Hold.floor(ch), bound), else: bound
    {:ok, take(ch, count, limit, 0)}
  end

  @doc """
  Deletes the messages held under `seqs` (`Ringbus.Channel.Deletes`); answers
  how many it deleted (a seq not held, or deleted already, counts nothing).
  """
  @spec delete(Channel.t(), [seq]) :: {:ok, non_neg_integer()}
  def delete(ch, seqs) do
    deleted = Enum.count(Enum.uniq(seqs), &delete_one(ch, &1))
    pass_deleted(ch)
    {:ok, deleted}
  end

  # Deleted messages at the oldest end are passed at once, as a pull passes
  # them: the first seq held moves, as Redis's first ID does on an XDEL.
  defp pass_deleted(%Channel{atomics: a} = ch) do
    tail = :atomics.get(a, @tail)

    if Deletes.deleted?(ch, tail) and :atomics.compare_exchange(a, @tail, tail, tail + 1) == :ok do
      _gone = take_claimed(ch, tail, 0, nil)
      pass_deleted(ch)
    end
  end

  defp delete_one(%Channel{atomics: a} = ch, seq) when is_integer(seq) do
    with true <- seq >= :atomics.get(a, @tail) and seq < :atomics.get(a, @head),
         :none <- Deletes.delete_row(ch, seq),
         {:chunk, _key, _first} <- cover(ch, seq) do
      Deletes.delete_in_chunk(ch, seq, fn -> seq < :atomics.get(a, @tail) end)
    else
      {:ok, bytes} -> release(ch, bytes) == :ok
      _ -> false
    end
  end

  defp delete_one(_ch, _seq), do: false

  @doc "Pulls up to `count` of the oldest messages, below seq `limit`; answers how many it got."
  @spec take_oldest(Channel.t(), non_neg_integer(), seq | :infinity) :: non_neg_integer()
  def take_oldest(ch, count, limit \\ :infinity), do: take(ch, count, limit, 0)

  # With holding groups, a full ring frees what they all acked: how many.
  defp free_held(ch),
    do: if(Hold.held?(ch), do: take(ch, Hold.floor(ch), Hold.floor(ch), 0), else: 0)

  # Pulls up to `left` of the oldest messages, those below `limit`: claims
  # the seqs with one swap of tail, as that many pulls in a row would, then
  # takes them; a seq that held nothing (gone, abandoned) leaves one more.
  defp take(%Channel{atomics: a} = ch, left, limit, taken) do
    tail = :atomics.get(a, @tail)
    count = min(left, min(:atomics.get(a, @head), limit) - tail)

    cond do
      count <= 0 ->
        taken

      :atomics.compare_exchange(a, @tail, tail, tail + count) == :ok ->
        got = take_range(ch, tail, tail + count, 0)
        :atomics.add(a, @pulled, got)
        take(ch, left - got, limit, taken + got)

      true ->
        take(ch, left, limit, taken)
    end
  end

  @doc false
  # The first half of a push: reserves `count` seqs (and, under reject,
  # `bytes`) and returns the first seq. Counts nothing as rejected.
  @spec reserve(Channel.t(), pos_integer(), non_neg_integer()) :: {:ok, seq} | {:error, :full}
  def reserve(ch, count, bytes \\ 0) do
    with {:ok, first, _at} <- reserve_at(ch, count, bytes), do: {:ok, first}
  end

  defp reserve_at(%Channel{overflow: :drop_oldest} = ch, count, _bytes),
    do: reserve_seqs(ch, count)

  # Full, a channel with holding groups frees what they all acked, and tries again.
  defp reserve_at(%Channel{overflow: :reject} = ch, count, bytes) do
    case reserve_room(ch, count, bytes) do
      {:error, :full} = full -> if free_held(ch) > 0, do: reserve_at(ch, count, bytes), else: full
      reserved -> reserved
    end
  end

  defp reserve_room(ch, count, bytes) do
    with :ok <- reserve_bytes(ch, bytes) do
      case reserve_seqs(ch, count) do
        {:ok, first, stamp} ->
          {:ok, first, stamp}

        :full ->
          unreserve_bytes(ch, bytes)
          {:error, :full}

        {:error, _} = error ->
          unreserve_bytes(ch, bytes)
          error
      end
    end
  end

  # The clock is read, and IDs reserved, between the read of head and the
  # swap that moves it (see `at` in the header): so times never decrease,
  # and IDs increase, in seq order. A failed swap leaves a gap in the IDs.
  defp reserve_seqs(%Channel{atomics: a, capacity: cap, overflow: overflow} = ch, count) do
    head = :atomics.get(a, @head)
    at = now_us()

    with false <- overflow == :reject and head + count - :atomics.get(a, @tail) > cap,
         {:ok, id} <- reserve_ids(ch.ids, count, at) do
      if :atomics.compare_exchange(a, @head, head, head + count) == :ok,
        do: {:ok, head, {at, id}},
        else: reserve_seqs(ch, count)
    else
      true -> :full
      {:error, :exhausted} -> {:error, :ids_exhausted}
    end
  end

  # A push of a client's ID (`Ringbus.Channel.GivenIds`) reserves with `ids` `{:given, id}`.
  defp reserve_ids({:given, id}, 1, _at), do: {:ok, id}
  defp reserve_ids(ids, count, at), do: Ids.reserve_at(ids, count, at)

  defp reserve_bytes(%Channel{max_bytes: nil, atomics: a}, bytes) do
    :atomics.add(a, @held, bytes)
  end

  defp reserve_bytes(%Channel{max_bytes: max, atomics: a} = ch, bytes) do
    held = :atomics.get(a, @held)

    cond do
      held + bytes > max -> {:error, :full}
      :atomics.compare_exchange(a, @held, held, held + bytes) == :ok -> :ok
      true -> reserve_bytes(ch, bytes)
    end
  end

  # Bytes a push took in: under drop-oldest they count as held once stored;
  # under reject they were held from the reservation on.
  defp stored_bytes(%Channel{atomics: a, overflow: overflow}, bytes) do
    if overflow == :drop_oldest, do: :atomics.add(a, @held, bytes)
    :atomics.add(a, @bytes_pushed, bytes)
  end

  defp unreserve_bytes(%Channel{overflow: :reject, atomics: a}, bytes),
    do: :atomics.sub(a, @held, bytes)

  defp unreserve_bytes(_ch, _bytes), do: :ok

  # After first..last went in: make room, catch a drop, wake subscribers.
  #
  # Under drop-oldest the push of `seq` claims every seq up to `seq - capacity`
  # (moving tail, which makes them overwritten) and deletes what they hold;
  # under `max_bytes` it then claims the oldest seqs until the bytes fit. If
  # the drop of our own seqs ran before our insert landed, it found nothing
  # to delete, so we remove what we stored (it counts as overwritten already).
  # Under reject nothing is deleted: a seq is claimed by a pull, which takes
  # it, however late. (A pull killed between its claim and its take leaves
  # that message in the table, counted as overwritten, until the channel is
  # deleted.)
  defp stored(%Channel{overflow: :drop_oldest, capacity: cap, atomics: a} = ch, first, last) do
    if last >= cap do
      claim_through(ch, last - cap)
      drop_through(ch, last - cap)
    end

    if ch.max_bytes, do: drop_bytes(ch)
    if :atomics.get(a, @dropped) > first, do: drop_own(ch, first, last)
    wake(ch)
  end

  defp stored(ch, _first, _last), do: wake(ch)

  # What of first..last the drop passed before it was stored: single
  # messages one by one; a chunk only whole, once the drop passed its last
  # seq (until then the drop that reaches it deletes it).
  defp drop_own(ch, first, last) do
    dropped = :atomics.get(ch.atomics, @dropped)
    Enum.each(first..min(last, dropped - 1)//1, &drop_seq(ch, &1))
    if first < last and dropped > last, do: drop_chunk(ch, chunk_key(last))
    :ok
  end

  # Moves tail past `seq`, claiming (overwriting) everything still unclaimed.
  defp claim_through(ch, seq), do: advance(ch.atomics, @tail, seq, &claimed(ch, &1, &2))

  # Moves the cursor at `index` past `seq` with a compare-and-swap, unless it
  # is there already; the caller whose swap moved it runs `moved.(from, seq)`
  # for the seqs it moved over.
  defp advance(atomics, index, seq, moved) do
    from = :atomics.get(atomics, index)

    cond do
      from > seq -> :ok
      :atomics.compare_exchange(atomics, index, from, seq + 1) == :ok -> moved.(from, seq)
      true -> advance(atomics, index, seq, moved)
    end
  end

  # from..to were claimed by moving tail: a chunk they end inside counts them
  # as gone, as a pull counts its one message, so that it is deleted as soon
  # as nothing in it is left to take. (Chunks ending inside the range are
  # deleted by the drop that follows.) The claimer takes their tombstones.
  defp claimed(ch, from, to) do
    Deletes.take_range(ch, from, to)

    with {:chunk, key, first} when trunc(key) > to <- cover(ch, to) do
      count_down(ch, key, to - max(from, first) + 1)
    end

    :ok
  end

  # Claims the oldest seqs, one at a time, until the table's bytes fit.
  defp drop_bytes(%Channel{atomics: a, max_bytes: max} = ch) do
    if :atomics.get(a, @held) > max do
      tail = :atomics.get(a, @tail)

      cond do
        tail >= :atomics.get(a, @head) ->
          :ok

        :atomics.compare_exchange(a, @tail, tail, tail + 1) == :ok ->
          claimed(ch, tail, tail)
          drop_through(ch, tail)
          drop_bytes(ch)

        true ->
          drop_bytes(ch)
      end
    end
  end

  # Deletes everything up to `seq` not deleted yet. A cursor (every object
  # keyed below `dropped` is gone) makes this cumulative: a seq whose producer
  # abandoned it or died never stores, so no push of its own deletes the seq
  # a capacity below it; the next push that gets this far does.
  defp drop_through(ch, seq), do: advance(ch.atomics, @dropped, seq, &drop(ch, &1, &2))

  # Deletes every object whose last seq is in from..to: a single message, a
  # mark, a chunk or a reservation ending there.
  defp drop(ch, from, to) do
    cond do
      :atomics.get(ch.atomics, @chunked) == 0 ->
        Enum.each(from..to//1, &drop_seq(ch, &1))

      to - from < 4 ->
        Enum.each(from..to//1, fn seq ->
          drop_seq(ch, seq)
          drop_chunk(ch, chunk_key(seq))
          :ets.delete(ch.table, reservation_key(seq))
        end)

      true ->
        drop_walk(ch, :ets.next(ch.table, from - 0.125), to + 0.5)
    end
  end

  defp drop_walk(ch, key, bound) when is_number(key) and key <= bound do
    cond do
      is_integer(key) -> drop_seq(ch, key)
      chunk_key?(key) -> drop_chunk(ch, key)
      true -> :ets.delete(ch.table, key)
    end

    drop_walk(ch, :ets.next(ch.table, key), bound)
  end

  defp drop_walk(_ch, _key, _bound), do: :ok

  # A skip still standing when the ring drops its seq becomes an overwrite: its
  # producer, if it comes back, finds the seq dropped and reports it pushed.
  defp drop_seq(ch, seq) do
    case :ets.take(ch.table, seq) do
      [{_, payload, _at, _id}] when is_binary(payload) ->
        release(ch, byte_size(payload))

      [{_, mark}] when mark in [:skipped, :skipped_claimed] ->
        :atomics.sub(ch.atomics, @skipped, 1)

      [{_, :deleted, _at, _id}] ->
        Deletes.passed(ch, 1)

      _ ->
        :ok
    end
  end

  # Deletes a chunk and releases its bytes, if it is still there: of two
  # callers racing for it, only the one whose delete matched releases them.
  defp drop_chunk(ch, key) do
    with bytes when is_integer(bytes) <- element(ch.table, key, 3) do
      pattern = {key, :_, :_, :_, :_, :_, :_, :_}
      if :ets.select_delete(ch.table, [{pattern, [], [true]}]) == 1, do: release(ch, bytes)
    end

    :ok
  end

  defp release(ch, bytes), do: :atomics.sub(ch.atomics, @held, bytes)

  ## Chunks and reservations
  #
  # A chunk `{last + 0.5, first, bytes, left, data, ends, at, id}` sorts right after `last`
  # and a reservation `{last + 0.25, first, pid}` right before it; neither
  # key ever equals a message's integer key, so `:ets.take/2` on a seq only
  # ever finds a single message or a mark. A seq inside a chunk is found with
  # `:ets.next/2` (the chunk or reservation is the first non-integer key after
  # it; integer keys in between are marks) and cut out of its data. A payload
  # of up to 64 bytes is copied out, as ETS would copy it; a larger one is a
  # sub-binary of the data, which it keeps alive. Chunks are deleted whole; a
  # pull leaves its message in the chunk, and `first_seq/1` puts it out of
  # every reader's reach.

  defp chunk_key(last), do: last + 0.5
  defp reservation_key(last), do: last + 0.25
  defp chunk_key?(key), do: key - trunc(key) == 0.5

  # What covers `seq` in place of an integer key: `{:chunk, key, first}`, a
  # live producer's `:reservation`, or nil.
  defp cover(ch, seq) do
    if :atomics.get(ch.atomics, @chunked) == 0, do: nil, else: cover_after(ch, seq, seq)
  end

  defp cover_after(ch, seq, from) do
    case :ets.next(ch.table, from) do
      key when is_float(key) ->
        case elements(ch.table, key, [2, 3]) do
          [first, pid] when first <= seq and is_pid(pid) ->
            if Process.alive?(pid), do: :reservation, else: cover_after(ch, seq, key)

          [first, _bytes] when first <= seq ->
            {:chunk, key, first}

          _ ->
            nil
        end

      # Marks on seqs of the range; a message means no batch covers `seq`.
      key when is_integer(key) ->
        if is_mark(element(ch.table, key, 2)), do: cover_after(ch, seq, key), else: nil

      _end_of_table ->
        nil
    end
  end

  defp chunk_payload(ch, key, seq) do
    case :ets.lookup(ch.table, key) do
      [chunk] -> Payloads.slice(chunk, seq)
      [] -> nil
    end
  end

  # nil when the object is gone (a drop deleted it meanwhile).
  defp element(table, key, pos) do
    :ets.lookup_element(table, key, pos)
  rescue
    ArgumentError -> nil
  end

  # Two elements of an object, each copied alone (a chunk's payloads are
  # not); nil when it is gone.
  defp elements(table, key, [a, b]) do
    with x when x != nil <- element(table, key, a),
         y when y != nil <- element(table, key, b),
         do: [x, y]
  end

  ## Pull

  @spec pull(Channel.t()) :: {:ok, seq, binary()} | :empty
  def pull(ch), do: pull(ch, @stall_ms)

  @doc false
  # `pull/1` with the wait for a stalled producer given, in milliseconds.
  @spec pull(Channel.t(), non_neg_integer()) :: {:ok, seq, binary()} | :empty
  def pull(ch, stall_ms), do: pull_to(ch, :infinity, stall_ms)

  # Pulls the oldest message if its seq is below `limit`.
  defp pull_to(%Channel{atomics: a} = ch, limit, stall_ms) do
    tail = :atomics.get(a, @tail)

    cond do
      tail >= min(:atomics.get(a, @head), limit) ->
        :empty

      :atomics.compare_exchange(a, @tail, tail, tail + 1) != :ok ->
        pull_to(ch, limit, stall_ms)

      true ->
        case take_claimed(ch, tail, stall_ms, nil) do
          {:ok, payload} ->
            :atomics.add(a, @pulled, 1)
            {:ok, tail, payload}

          :gone ->
            pull_to(ch, limit, stall_ms)
        end
    end
  end

  # Takes the claimed seqs seq..stop - 1 and answers how many held a
  # message: the seqs of a chunk among them with one count down, their
  # payloads not cut out (nobody reads them); the others one by one.
  defp take_range(_ch, seq, stop, got) when seq >= stop, do: got

  defp take_range(ch, seq, stop, got) do
    {n, took} =
      with [] <- :ets.take(ch.table, seq), {:chunk, key, _first} <- cover(ch, seq) do
        n = min(trunc(key), stop - 1) - seq + 1
        deleted = Deletes.take_range(ch, seq, seq + n - 1)
        {n, if(count_down(ch, key, n) == :gone, do: 0, else: n - deleted)}
      else
        # A message or a mark, taken: as a pull takes it.
        [_] = row -> {1, one(taken(ch, seq, row, @stall_ms, nil))}
        # A producer still storing it, or nothing yet: as a pull waits for it.
        _ -> {1, one(take_claimed(ch, seq, @stall_ms, nil))}
      end

    take_range(ch, seq + n, stop, got + took)
  end

  defp one(:gone), do: 0
  defp one({:ok, _payload}), do: 1

  defp take_claimed(ch, seq, stall_ms, deadline),
    do: taken(ch, seq, :ets.take(ch.table, seq), stall_ms, deadline)

  # What `:ets.take/2` of a claimed seq found.
  defp taken(ch, _seq, [{_, payload, _at, _id}], _stall_ms, _deadline) when is_binary(payload) do
    release(ch, byte_size(payload))
    {:ok, payload}
  end

  defp taken(_ch, _seq, [{_, :abandoned}], _stall_ms, _deadline), do: :gone

  defp taken(ch, _seq, [{_, :deleted, _at, _id}], _stall_ms, _deadline) do
    Deletes.passed(ch, 1)
    :gone
  end

  # A subscription gave up on it before we claimed it: the skip is ours,
  # and the wait was done.
  defp taken(ch, seq, [{_, :skipped}], stall_ms, _deadline) do
    :atomics.sub(ch.atomics, @skipped, 1)
    take_claimed(ch, seq, stall_ms, :expired)
  end

  defp taken(ch, seq, [], stall_ms, deadline) do
    case cover(ch, seq) do
      {:chunk, key, _first} ->
        from_chunk(ch, key, seq, stall_ms, deadline)

      # Its producer is storing the chunk right now.
      :reservation ->
        :erlang.yield()
        take_claimed(ch, seq, stall_ms, deadline)

      # A chunk dropped since the claim: its tombstone is still the claimer's.
      nil ->
        if Deletes.take(ch, seq), do: :gone, else: wait_claimed(ch, seq, stall_ms, deadline)
    end
  end

  defp from_chunk(ch, key, seq, stall_ms, deadline) do
    case chunk_payload(ch, key, seq) do
      nil ->
        take_claimed(ch, seq, stall_ms, deadline)

      # A deleted message is not the claimer's; its tombstone goes before
      # the count down that may drop the chunk (and its tombstones).
      payload ->
        deleted? = Deletes.take(ch, seq)
        count_down(ch, key, 1)
        if deleted?, do: :gone, else: {:ok, payload}
    end
  end

  # `count` messages of a chunk were claimed; whoever claims the last one
  # left deletes it. `:gone` when a drop deleted it first.
  defp count_down(ch, key, count) do
    if :ets.update_counter(ch.table, key, {4, -count}) == 0, do: drop_chunk(ch, key)
  rescue
    # Dropped meanwhile, whole: its bytes went with it.
    ArgumentError -> :gone
  end

  defp wait_claimed(ch, seq, stall_ms, deadline) do
    cond do
      gone?(ch, seq) ->
        :gone

      deadline == :expired ->
        skip_claimed(ch, seq, stall_ms, deadline)

      deadline == nil ->
        deadline = :erlang.monotonic_time(:millisecond) + stall_ms
        take_claimed(ch, seq, stall_ms, deadline)

      :erlang.monotonic_time(:millisecond) < deadline ->
        :erlang.yield()
        take_claimed(ch, seq, stall_ms, deadline)

      true ->
        skip_claimed(ch, seq, stall_ms, deadline)
    end
  end

  # The claimer of `seq` gives up on it: a mark its producer, if it comes
  # back, deletes before it pushes again. If a chunk or a reservation covers
  # the seq once the mark is in, the mark goes and the claimer takes the
  # message after all.
  defp skip_claimed(ch, seq, stall_ms, deadline) do
    if :ets.insert_new(ch.table, {seq, :skipped_claimed}) do
      :atomics.add(ch.atomics, @skipped, 1)

      cond do
        # Dropped meanwhile: the drop may have passed it already.
        gone?(ch, seq) ->
          withdraw(ch, seq, :skipped_claimed)
          :gone

        cover(ch, seq) != nil ->
          withdraw(ch, seq, :skipped_claimed)
          take_claimed(ch, seq, stall_ms, deadline)

        true ->
          :gone
      end
    else
      take_claimed(ch, seq, stall_ms, deadline)
    end
  end

  @doc """
  Gives up on a seq whose producer reserved it and has not stored it, for a
  subscription stuck on it: marks it so that the producer, if it comes back,
  pushes again under a fresh seq. Does nothing to a seq a pull (or a drop)
  has claimed, nor to one a live producer's batch covers. Returns true if the
  mark stands.
  """
  @spec skip(Channel.t(), seq) :: boolean()
  def skip(%Channel{atomics: a} = ch, seq) do
    if seq >= :atomics.get(a, @tail) and cover(ch, seq) == nil and
         :ets.insert_new(ch.table, {seq, :skipped}) do
      :atomics.add(a, @skipped, 1)

      cond do
        # A batch covers it after all: leave the seq to it.
        cover(ch, seq) != nil -> not withdraw(ch, seq, :skipped)
        # Claimed meanwhile: the claimer may have taken the message before
        # our mark went in, so leave the seq to it.
        seq < :atomics.get(a, @tail) -> not withdraw(ch, seq, :skipped)
        true -> true
      end
    else
      false
    end
  end

  # Takes a skip back, if its mark is still there. True if it was.
  defp withdraw(ch, seq, mark) do
    :ets.select_delete(ch.table, [{{seq, mark}, [], [true]}]) == 1 and
      :atomics.sub(ch.atomics, @skipped, 1) == :ok
  end

  # The producer of `seq` gives it up, because a reader marked it while the
  # producer stalled. Leaves `seq` counted as skipped exactly once.
  defp abandon(%Channel{table: t} = ch, seq) do
    case :ets.lookup(t, seq) do
      # Its claimer gave up on it and went on: nothing looks at it again.
      [{_, :skipped_claimed}] ->
        if :ets.select_delete(t, [{{seq, :skipped_claimed}, [], [true]}]) == 0,
          do: abandon(ch, seq)

      # Not claimed yet: leave a mark for the claimer to take.
      [{_, :skipped}] ->
        if :ets.select_replace(t, [{{seq, :skipped}, [], [{{seq, :abandoned}}]}]) == 0,
          do: abandon(ch, seq)

      # Unmarked: never marked (another seq of the batch was), or the mark was
      # taken back (the ring dropped the seq, or a pull claimed it).
      [] ->
        if :ets.insert_new(t, {seq, :abandoned}) do
          :atomics.add(ch.atomics, @skipped, 1)
          if gone?(ch, seq), do: :ets.delete_object(t, {seq, :abandoned})
        else
          abandon(ch, seq)
        end
    end

    :ok
  end

  @doc "How long to wait for a reserved seq before `skip/2`, in milliseconds."
  @spec stall_timeout() :: pos_integer()
  def stall_timeout, do: @stall_ms

  # Whether a drop-oldest push has dropped `seq`, or is about to: lapped by
  # count, or behind the drop cursor.
  defp gone?(%Channel{overflow: :drop_oldest, atomics: a} = ch, seq),
    do: :atomics.get(a, @head) > seq + ch.capacity or :atomics.get(a, @dropped) > seq

  defp gone?(_ch, _seq), do: false

  ## Read

  @doc """
  Reads up to `max` messages from `from`. Returns the messages, their count,
  how many seqs at or after `from` were gone before the first one, and the seq
  to read from next. The messages returned are contiguous.
  """
  @spec read(Channel.t(), seq, non_neg_integer()) ::
          {[{seq, binary()}], non_neg_integer(), non_neg_integer(), seq}
  def read(%Channel{} = ch, from, max) do
    {items, n, lost, next, nil} = read(ch, from, max, nil)
    {items, n, lost, next}
  end

  @doc """
  `read/3`, and when the messages read were stored: runs `{at, count}` of
  consecutive messages stored at the same monotonic µs (one per push or
  batch), newest first.
  """
  @spec read_timed(Channel.t(), seq, non_neg_integer()) ::
          {[{seq, binary()}], non_neg_integer(), non_neg_integer(), seq,
           [{integer(), pos_integer()}]}
  def read_timed(%Channel{} = ch, from, max), do: read(ch, from, max, [])

  defp read(ch, from, max, runs) do
    start = max(from, first_seq(ch))
    limit = min(start + max, :atomics.get(ch.atomics, @head))
    collect(ch, start, limit, [], 0, start - from, runs)
  end

  defp collect(_ch, seq, limit, acc, n, lost, runs) when seq >= limit,
    do: {:lists.reverse(acc), n, lost, seq, runs}

  defp collect(ch, seq, limit, acc, n, lost, runs) do
    case :ets.lookup(ch.table, seq) do
      [{_, payload, at, _id}] when is_binary(payload) ->
        collect(ch, seq + 1, limit, [{seq, payload} | acc], n + 1, lost, run(runs, at, 1))

      # Deleted: passed over, not lost, and the read goes one further.
      [{_, :deleted, _at, _id}] ->
        collect(ch, seq + 1, min(limit + 1, next_seq(ch)), acc, n, lost, runs)

      [{_, mark}] when is_mark(mark) ->
        case cover(ch, seq) do
          # A stale mark inside a stored chunk: it goes, the message stays.
          {:chunk, key, _first} ->
            withdraw(ch, seq, mark)
            collect_chunk(ch, key, seq, limit, acc, n, lost, runs)

          nil when n == 0 ->
            collect(ch, seq + 1, limit, acc, n, lost, runs)

          _ ->
            {:lists.reverse(acc), n, lost, seq, runs}
        end

      [] ->
        case cover(ch, seq) do
          {:chunk, key, _first} ->
            collect_chunk(ch, key, seq, limit, acc, n, lost, runs)

          nil when n == 0 ->
            # Gone if claimed (pulled or overwritten); else its producer is mid-push.
            if seq < first_seq(ch),
              do: collect(ch, seq + 1, limit, acc, n, lost + 1, runs),
              else: {[], 0, lost, seq, runs}

          _ ->
            {:lists.reverse(acc), n, lost, seq, runs}
        end
    end
  end

  # Takes seq.. out of a chunk, up to its last seq or the limit.
  defp collect_chunk(ch, key, seq, limit, acc, n, lost, runs) do
    case :ets.lookup(ch.table, key) do
      [chunk] ->
        stop = min(trunc(key), limit - 1)
        {acc, got} = Deletes.slices(ch, chunk, seq..stop, acc)
        runs = if got > 0, do: run(runs, elem(chunk, 6), got), else: runs
        limit = min(limit + stop - seq + 1 - got, next_seq(ch))
        collect(ch, stop + 1, limit, acc, n + got, lost, runs)

      [] ->
        collect(ch, seq, limit, acc, n, lost, runs)
    end
  end

  # Adds `count` messages stored at `at` to the runs, unless untimed (nil).
  defp run(nil, _at, _count), do: nil
  defp run([{at, n} | rest], at, count), do: [{at, n + count} | rest]
  defp run(runs, at, count), do: [{at, count} | runs]

  @doc """
  The time (`at`) of `seq`, read without copying its payload: the `at` of
  its row or of the chunk that holds it; nil when the ring holds no message
  under it (a mark, a seq gone, or one its producer has not stored yet).
  """
  @spec stored_at(Channel.t(), seq) :: integer() | nil
  def stored_at(%Channel{table: t} = ch, seq) do
    with nil <- element(t, seq, 3),
         {:chunk, key, _first} <- cover(ch, seq) do
      element(t, key, 7)
    else
      at when is_integer(at) -> at
      _none -> nil
    end
  end

  @doc "The ID of `seq`, probed as `stored_at/2` probes its time; nil when none."
  @spec stored_id(Channel.t(), seq) :: Ids.id() | nil
  def stored_id(%Channel{table: t} = ch, seq) do
    with nil <- element(t, seq, 4),
         {:chunk, key, first} <- cover(ch, seq),
         id when id != nil <- element(t, key, 8) do
      Ids.nth(id, seq - first)
    else
      {_ms, _n} = id -> id
      _none -> nil
    end
  end

  ## Decided elsewhere: replicated channels
  #
  # A replicated channel has one writer, its Ra machine
  # (`Ringbus.Replica.Machine`), which decides every seq, overflow and pull in
  # log order on each replica; these functions carry its decisions out on
  # this node's ring. They store before they publish a seq, so no reader ever
  # waits on (or skips) one. A replay (the Ra server recovering while this
  # ring lives on) finds its seqs stored or claimed already and does nothing.

  @doc false
  # A snapshot's messages from `from` on, `{seq, payload, at, id}`: a
  # replicated ring has single rows; a tombstone's payload is `:deleted`.
  @spec dump_decided(Channel.t(), seq) :: [{seq, binary(), integer(), Ids.id()}]
  def dump_decided(ch, from) do
    held = {:orelse, {:is_binary, :"$2"}, {:==, :"$2", :deleted}}
    spec = {{:"$1", :"$2", :_, :_}, [{:>=, :"$1", from}, held], [:"$_"]}
    :ets.select(ch.table, [spec])
  end

  @doc false
  # Stores `count` payloads (`bytes` in all) under the seqs from `first`,
  # at `at` (monotonic µs: the leader's stamp on this node's clock), unless
  # the ring is past them. If the ring is behind `first` (it was created
  # after the log was truncated), the seqs between count as overwritten.
  # Their IDs are reserved from the leader's stamp, in log order, so every
  # member gives the same; a snapshot's messages come with theirs
  # (`{at, id}`), which the stamp then follows.
  @spec put_decided(Channel.t(), seq, [binary()], non_neg_integer(), non_neg_integer(), at) ::
          :ok
  def put_decided(%Channel{atomics: a} = ch, first, payloads, count, bytes, at) do
    head = :atomics.get(a, @head)

    cond do
      first < head or count == 0 ->
        :ok

      true ->
        if first > head, do: skip_to(ch, first)
        :ets.insert(ch.table, objects(payloads, first, decided_stamp(ch, count, at), []))
        :atomics.add(a, @held, bytes)
        :atomics.add(a, @bytes_pushed, bytes)
        :atomics.put(a, @head, first + count)
        wake(ch)
    end
  end

  defp decided_stamp(ch, count, at) when is_integer(at), do: Ids.stamp!(ch.ids, count, at)
  defp decided_stamp(ch, count, stamp), do: Ids.follow(ch.ids, stamp, count)

  defp skip_to(%Channel{atomics: a} = ch, seq) do
    :atomics.put(a, @head, seq)
    drop_decided(ch, seq)
  end

  @doc false
  # Claims every seq below `tail` not claimed yet, as overwritten, and
  # deletes what they hold.
  @spec drop_decided(Channel.t(), seq) :: :ok
  def drop_decided(_ch, 0), do: :ok

  def drop_decided(ch, tail) do
    claim_through(ch, tail - 1)
    drop_through(ch, tail - 1)
    :ok
  end

  @doc false
  # A trim of the `count` seqs from `from`, which its log decided: claimed
  # with one swap of tail and taken as `trim/2` takes them, when `from` is
  # the tail; else each only if it is the tail then (`pull_decided/3`).
  @spec take_decided(Channel.t(), seq, non_neg_integer()) :: :ok
  def take_decided(%Channel{atomics: a} = ch, from, count) do
    if count > 0 and :atomics.compare_exchange(a, @tail, from, from + count) == :ok,
      do: :atomics.add(a, @pulled, take_range(ch, from, from + count, 0)),
      else: pull_decided(ch, from, count)

    :ok
  end

  @doc false
  # Pulls the `count` seqs from `from`, each only if it is the ring's tail
  # (not pulled yet), and returns what it took.
  @spec pull_decided(Channel.t(), seq, non_neg_integer()) :: [{seq, binary()}]
  def pull_decided(ch, from, count), do: pull_decided(ch, from, from + count, [])

  defp pull_decided(_ch, seq, stop, acc) when seq >= stop, do: :lists.reverse(acc)

  defp pull_decided(%Channel{atomics: a} = ch, seq, stop, acc) do
    with true <- :atomics.get(a, @tail) == seq,
         {:ok, ^seq, payload} <- pull_to(ch, seq + 1, 0) do
      pull_decided(ch, seq + 1, stop, [{seq, payload} | acc])
    else
      _ -> pull_decided(ch, seq + 1, stop, acc)
    end
  end

  @doc false
  # Claims every seq below `bound` not claimed yet, each counted expired.
  @spec expire_decided(Channel.t(), seq) :: :ok
  def expire_decided(%Channel{atomics: a} = ch, bound) do
    tail = :atomics.get(a, @tail)

    if tail < bound and tail < :atomics.get(a, @head) do
      take_expired(ch, tail)
      expire_decided(ch, bound)
    else
      :ok
    end
  end

  @doc false
  # Raises the rejected count to `total`, the machine's own count: a replay
  # that sets it again changes nothing.
  @spec rejected_decided(Channel.t(), non_neg_integer()) :: :ok
  def rejected_decided(%Channel{atomics: a} = ch, total) do
    now = :atomics.get(a, @rejected)

    cond do
      now >= total -> :ok
      :atomics.compare_exchange(a, @rejected, now, total) == :ok -> :ok
      true -> rejected_decided(ch, total)
    end
  end

  ## Figures

  @spec first_seq(Channel.t()) :: seq
  def first_seq(%Channel{atomics: a, capacity: cap}) do
    max(:atomics.get(a, @tail), :atomics.get(a, @head) - cap)
  end

  @spec next_seq(Channel.t()) :: seq
  def next_seq(%Channel{atomics: a}), do: :atomics.get(a, @head)

  @doc "The payload bytes the channel holds now (`info/1`'s `:bytes`)."
  @spec bytes(Channel.t()) :: non_neg_integer()
  def bytes(%Channel{atomics: a}), do: max(:atomics.get(a, @held), 0)

  @spec len(Channel.t()) :: non_neg_integer()
  def len(%Channel{atomics: a} = ch),
    do: held(ch, :atomics.get(a, @head), :atomics.get(a, @tail), Deletes.standing(ch))

  defp held(%Channel{capacity: cap}, head, tail, standing),
    do: max(min(max(head - tail, 0), cap) - standing, 0)

  @spec info(Channel.t()) :: map()
  def info(%Channel{atomics: a, capacity: cap} = ch) do
    head = :atomics.get(a, @head)
    tail = :atomics.get(a, @tail)
    pulled = :atomics.get(a, @pulled)
    skipped = :atomics.get(a, @skipped)
    expired = :atomics.get(a, @expired)
    {deleted, passed} = Deletes.counts(ch)

    %{
      capacity: cap,
      overflow: ch.overflow,
      incarnation: ch.incarnation,
      max_bytes: ch.max_bytes,
      len: held(ch, head, tail, deleted - passed),
      first_seq: max(tail, head - cap),
      next_seq: head,
      pushed: head - skipped,
      pulled: pulled,
      overwritten: max(tail - pulled - skipped - expired - passed, 0),
      expired: expired,
      deleted: deleted,
      max_age: ch.max_age,
      rejected: :atomics.get(a, @rejected),
      skipped: skipped,
      bytes: bytes(ch),
      bytes_pushed: :atomics.get(a, @bytes_pushed)
    }
  end

  ## Wake-ups for subscriptions: `Ringbus.Channel.Wake`

  @doc "See `Ringbus.Channel.Wake.arm/1`."
  defdelegate arm_wake(ch), to: Wake, as: :arm
  @doc "See `Ringbus.Channel.Wake.disarm/1`."
  defdelegate disarm(ch), to: Wake
  @doc "See `Ringbus.Channel.Wake.wake_waiters/1`."
  defdelegate wake_waiters(ch), to: Wake
  defp wake(ch), do: Wake.stored(ch)
end
