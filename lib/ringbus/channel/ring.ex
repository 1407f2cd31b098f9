defmodule Ringbus.Channel.Ring do
  @moduledoc false
  # The ring: operations on a channel handle that run in the caller's process.
  #
  # Storage. One public ETS `:ordered_set` per channel holds `{seq, payload}`.
  # Keys are sequence numbers, so two messages never share a key and the ring
  # "wraps" by deleting `seq - capacity` when `seq` goes in. An ordered set
  # keeps the keys being written and removed at the two ends of one tree, which
  # stays in cache; a hash table scatters them.
  #
  # Cursors, in `:atomics`:
  #
  #   head - the next seq to hand out; a push reserves seqs by bumping it.
  #   tail - the oldest seq not yet claimed; every seq below it has been
  #          claimed exactly once, by a pull or by a push that overwrote it.
  #
  # A pull claims one seq with a CAS on tail, then takes it. A push of `seq`
  # into a full drop-oldest ring claims every seq up to `seq - capacity` by
  # moving tail forward, then deletes `seq - capacity`. Because every seq is
  # claimed once, the counters follow from the cursors:
  #
  #   len         = head - tail
  #   pushed      = head - skipped
  #   overwritten = tail - pulled - skipped
  #
  # and only `pulled`, `skipped`, `rejected` and `bytes` are counted. A pull
  # that claimed a seq the ring has since lapped finds it deleted: that message
  # was overwritten, and the formula already says so.
  #
  # Stalled producers. Between reserving a seq and inserting it a producer can
  # be descheduled, or killed. Readers wait a bounded time (5 ms) for such a
  # seq, then give up on it with a mark, inserted with `insert_new` so that it
  # and the late message exclude each other, and count it as skipped:
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
  # counted as skipped once. The mark is how a producer learns of the skip, so
  # whoever removes a skip mark before the producer saw it (a push lapping the
  # seq, a reader withdrawing a mark on a seq claimed meanwhile) also takes
  # back the count: the late producer then inserts, finds the seq lapped (or
  # claimed by a pull that waits for it), and the seq counts as pushed. So a
  # seq is skipped only when its producer abandoned it or its mark still
  # stands. A producer killed mid-push leaves its mark until a push laps it
  # (its seq then counts as pushed and overwritten, as an unclaimed one would)
  # or, under reject, until the channel is deleted.
  #
  # A drop-oldest batch stored as a chunk (see "Chunks") is not pushed again:
  # a seq marked inside it shadows its message, which is not delivered, and
  # counts as skipped until the ring laps it.

  alias Ringbus.Channel
  alias Ringbus.Channel.Anchor

  @head 1
  @tail 2
  @pulled 3
  @skipped 4
  @rejected 5
  @bytes 6
  @waiting 7
  @chunked 8
  @dropped 9
  @slots 9

  # How long a reader waits for a reserved seq whose producer has not stored it.
  @stall_ms 5

  @typep seq :: non_neg_integer()

  # What a seq holds when a reader or its producer gave up on it (see
  # "Stalled producers" above).
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
      overflow: Keyword.fetch!(opts, :overflow)
    }
  end

  ## Push

  @spec push(Channel.t(), binary()) :: {:ok, seq} | {:error, :full}
  def push(%Channel{} = ch, payload) do
    with {:ok, seq} <- reserve(ch, 1), do: commit(ch, seq, payload)
  end

  @doc false
  # The second half of a push: stores `payload` under `seq`, reserved by the
  # caller. Tests call it late to play a stalled producer.
  @spec commit(Channel.t(), seq, binary()) :: {:ok, seq} | {:error, :full}
  def commit(ch, seq, payload) do
    if :ets.insert_new(ch.table, {seq, payload}) do
      :atomics.add(ch.atomics, @bytes, byte_size(payload))
      stored(ch, seq, seq)
      {:ok, seq}
    else
      abandon(ch, seq)
      push(ch, payload)
    end
  end

  @doc "Counts a batch and its bytes; raises `ArgumentError` on a payload that is not a binary."
  @spec measure!([binary()]) :: {non_neg_integer(), non_neg_integer()}
  def measure!(payloads), do: measure(payloads, 0, 0)

  @doc """
  Pushes a batch of `count` binaries, `bytes` bytes in all, as counted by
  `measure!/1` (or by a caller that walked the batch already).
  """
  @spec push_measured(Channel.t(), [binary()], non_neg_integer(), non_neg_integer()) ::
          {:ok, seq} | {:error, :full}
  def push_measured(ch, _payloads, 0, _bytes), do: {:ok, :atomics.get(ch.atomics, @head)}

  def push_measured(ch, payloads, count, bytes) do
    with {:ok, first} <- reserve(ch, count), do: commit_batch(ch, first, payloads, count, bytes)
  end

  defp measure([p | rest], n, bytes) when is_binary(p),
    do: measure(rest, n + 1, bytes + byte_size(p))

  defp measure([], n, bytes), do: {n, bytes}

  defp measure([p | _], _n, _bytes) do
    raise ArgumentError, "expected every payload to be a binary, got: #{inspect(p)}"
  end

  @doc false
  # The second half of `push_measured/4`: stores a batch under the `count`
  # seqs from `first`, reserved by the caller.
  @spec commit_batch(Channel.t(), seq, [binary()], pos_integer(), non_neg_integer()) ::
          {:ok, seq} | {:error, :full}
  def commit_batch(ch, first, payloads, count, bytes)

  # Drop-oldest batches go in as one chunk object (see "Chunks" below).
  def commit_batch(
        %Channel{overflow: :drop_oldest, atomics: a} = ch,
        first,
        payloads,
        count,
        bytes
      )
      when count > 1 do
    last = first + count - 1
    if :atomics.get(a, @chunked) == 0, do: :atomics.put(a, @chunked, 1)
    :ets.insert(ch.table, List.to_tuple([chunk_key(last), first | payloads]))
    :atomics.add(a, @bytes, bytes)
    stored(ch, first, last)
    {:ok, first}
  end

  def commit_batch(ch, first, payloads, count, bytes) do
    last = first + count - 1

    if :ets.insert_new(ch.table, number(payloads, first, [])) do
      :atomics.add(ch.atomics, @bytes, bytes)
      stored(ch, first, last)
      {:ok, first}
    else
      # A reader gave up on part of the range: abandon all of it, then retry.
      Enum.each(first..last, &abandon(ch, &1))
      push_measured(ch, payloads, count, bytes)
    end
  end

  defp number([p | rest], seq, acc), do: number(rest, seq + 1, [{seq, detach(p)} | acc])
  defp number([], _seq, acc), do: acc

  # A message stored on its own never keeps more than twice its size alive: a
  # payload that is a small part of a larger binary (a batch read off a
  # socket) is copied. ETS copies payloads of up to 64 bytes itself.
  defp detach(payload) when byte_size(payload) <= 64, do: payload

  defp detach(payload) do
    if :binary.referenced_byte_size(payload) > 2 * byte_size(payload),
      do: :binary.copy(payload),
      else: payload
  end

  @doc false
  # The first half of a push: reserves `count` seqs and returns the first.
  @spec reserve(Channel.t(), pos_integer()) :: {:ok, seq} | {:error, :full}
  def reserve(ch, count)

  def reserve(%Channel{overflow: :drop_oldest, atomics: a}, count) do
    {:ok, :atomics.add_get(a, @head, count) - count}
  end

  def reserve(%Channel{overflow: :reject, atomics: a, capacity: cap} = ch, count) do
    head = :atomics.get(a, @head)

    cond do
      head + count - :atomics.get(a, @tail) > cap ->
        :atomics.add(a, @rejected, count)
        {:error, :full}

      :atomics.compare_exchange(a, @head, head, head + count) == :ok ->
        {:ok, head}

      true ->
        reserve(ch, count)
    end
  end

  # After first..last went in: make room, catch a lap, wake subscribers.
  #
  # Under drop-oldest the push of `seq` claims every seq up to `seq - capacity`
  # (moving tail, which makes them overwritten) and deletes what they hold
  # (see `drop_through/2`). Under reject nothing is
  # deleted: `seq - capacity` was claimed by a pull, which takes it, however
  # late. (A pull killed between its claim and its take leaves that message in
  # the table, counted as overwritten, until the channel is deleted.)
  defp stored(%Channel{overflow: :drop_oldest, capacity: cap} = ch, first, last) do
    if last >= cap do
      claim_through(ch.atomics, last - cap)
      drop_through(ch, last - cap)
    end

    # Lapped before our insert landed: the lapping push found nothing to
    # delete, so remove what we stored (it counts as overwritten already).
    head = :atomics.get(ch.atomics, @head)

    cond do
      head <= first + cap ->
        :ok

      first == last ->
        :ets.select_delete(ch.table, [{{first, :"$1"}, [is_binary: :"$1"], [true]}])

      head > last + cap ->
        :ets.delete(ch.table, chunk_key(last))

      # Partly lapped: the push that laps `last` deletes the chunk.
      true ->
        :ok
    end

    wake(ch)
  end

  defp stored(ch, _first, _last), do: wake(ch)

  # Moves tail past `seq`, claiming (overwriting) everything still unclaimed.
  defp claim_through(a, seq) do
    tail = :atomics.get(a, @tail)

    if tail <= seq and :atomics.compare_exchange(a, @tail, tail, seq + 1) != :ok do
      claim_through(a, seq)
    end
  end

  # Deletes everything up to `seq` not deleted yet. A cursor (every seq below
  # `dropped` is gone) makes this cumulative: a seq whose producer abandoned
  # it or died never stores, so no push of its own deletes the seq a capacity
  # below it; the next push that gets this far does.
  defp drop_through(%Channel{atomics: a} = ch, seq) do
    from = :atomics.get(a, @dropped)

    cond do
      from > seq -> :ok
      :atomics.compare_exchange(a, @dropped, from, seq + 1) == :ok -> drop(ch, from, seq)
      true -> drop_through(ch, seq)
    end
  end

  # Deletes every object whose last seq is in from..to: a single message, a
  # mark, or a chunk ending there.
  defp drop(ch, from, to) do
    cond do
      :atomics.get(ch.atomics, @chunked) == 0 ->
        Enum.each(from..to//1, &drop_seq(ch, &1))

      to - from < 4 ->
        Enum.each(from..to//1, fn seq ->
          drop_seq(ch, seq)
          :ets.delete(ch.table, chunk_key(seq))
        end)

      true ->
        drop_walk(ch, :ets.next(ch.table, from - 0.25), to + 0.5)
    end
  end

  defp drop_walk(ch, key, bound) when is_number(key) and key <= bound do
    if is_integer(key), do: drop_seq(ch, key), else: :ets.delete(ch.table, key)
    drop_walk(ch, :ets.next(ch.table, key), bound)
  end

  defp drop_walk(_ch, _key, _bound), do: :ok

  # A skip still standing when the ring laps its seq becomes an overwrite: its
  # producer, if it comes back, finds the seq lapped and reports it pushed.
  defp drop_seq(ch, seq) do
    case :ets.take(ch.table, seq) do
      [{_, mark}] when mark in [:skipped, :skipped_claimed] ->
        :atomics.sub(ch.atomics, @skipped, 1)

      _ ->
        :ok
    end
  end

  ## Chunks
  #
  # A drop-oldest batch is stored as one object, `{last + 0.5, first, p1, ...}`.
  # Its key sorts right after `last` and never equals a message's integer key,
  # so `:ets.take/2` on a seq only ever finds a single message or a mark.
  # A seq inside a chunk is found with `:ets.next/2` (the chunk is the first
  # non-integer key after it; integer keys in between are skip marks) and read
  # with `:ets.lookup_element/3`, which copies that one payload. Chunks are
  # deleted whole, by the push that laps their last seq; a pull leaves its
  # message in the chunk, and `first_seq/1` puts it out of every reader's reach.

  defp chunk_key(last), do: last + 0.5

  # The chunk holding `seq`: {key, first, stop}, where `stop` is the last seq
  # of the chunk not shadowed by a skip mark; or nil.
  defp chunk_at(ch, seq) do
    if :atomics.get(ch.atomics, @chunked) == 0,
      do: nil,
      else: chunk_after(ch, seq, seq - 0.25, nil)
  end

  defp chunk_after(ch, seq, from, stop) do
    case :ets.next(ch.table, from) do
      key when is_float(key) ->
        case element(ch.table, key, 2) do
          first when is_integer(first) and first <= seq -> {key, first, stop || trunc(key)}
          _ -> nil
        end

      key when is_integer(key) ->
        if is_mark(element(ch.table, key, 2)),
          do: chunk_after(ch, seq, key, stop || key - 1),
          else: nil

      _end_of_table ->
        nil
    end
  end

  defp chunk_payload(ch, seq) do
    case chunk_at(ch, seq) do
      {key, first, stop} when seq <= stop -> element(ch.table, key, 3 + seq - first)
      _ -> nil
    end
  end

  # nil when the object is gone (a lapping push deleted it meanwhile).
  defp element(table, key, pos) do
    :ets.lookup_element(table, key, pos)
  rescue
    ArgumentError -> nil
  end

  ## Pull

  @spec pull(Channel.t()) :: {:ok, seq, binary()} | :empty
  def pull(ch), do: pull(ch, @stall_ms)

  @doc false
  # `pull/1` with the wait for a stalled producer given, in milliseconds.
  @spec pull(Channel.t(), non_neg_integer()) :: {:ok, seq, binary()} | :empty
  def pull(%Channel{atomics: a} = ch, stall_ms) do
    tail = :atomics.get(a, @tail)

    cond do
      tail >= :atomics.get(a, @head) ->
        :empty

      :atomics.compare_exchange(a, @tail, tail, tail + 1) != :ok ->
        pull(ch, stall_ms)

      true ->
        case take_claimed(ch, tail, stall_ms, nil) do
          {:ok, payload} ->
            :atomics.add(a, @pulled, 1)
            {:ok, tail, payload}

          :gone ->
            pull(ch, stall_ms)
        end
    end
  end

  defp take_claimed(ch, seq, stall_ms, deadline) do
    case :ets.take(ch.table, seq) do
      [{_, payload}] when is_binary(payload) ->
        {:ok, payload}

      [{_, :abandoned}] ->
        :gone

      # A subscription gave up on it before we claimed it: the skip is ours.
      [{_, :skipped}] ->
        :atomics.sub(ch.atomics, @skipped, 1)
        if skip_claimed(ch, seq), do: :gone, else: take_claimed(ch, seq, stall_ms, deadline)

      [] ->
        payload = chunk_payload(ch, seq)

        cond do
          is_binary(payload) ->
            {:ok, payload}

          lapped?(ch, seq) ->
            :gone

          deadline == nil ->
            deadline = :erlang.monotonic_time(:millisecond) + stall_ms
            take_claimed(ch, seq, stall_ms, deadline)

          :erlang.monotonic_time(:millisecond) < deadline ->
            :erlang.yield()
            take_claimed(ch, seq, stall_ms, deadline)

          skip_claimed(ch, seq) ->
            :gone

          true ->
            take_claimed(ch, seq, stall_ms, deadline)
        end
    end
  end

  # The claimer of `seq` gives up on it: a mark its producer, if it comes
  # back, deletes before it pushes again. False if something landed first.
  defp skip_claimed(ch, seq) do
    if :ets.insert_new(ch.table, {seq, :skipped_claimed}) do
      :atomics.add(ch.atomics, @skipped, 1)
      # Lapped meanwhile: the lapping push may have passed it already.
      if lapped?(ch, seq), do: withdraw(ch, seq, :skipped_claimed)
      true
    else
      false
    end
  end

  @doc """
  Gives up on a seq whose producer reserved it and has not stored it, for a
  subscription stuck on it: marks it so that the producer, if it comes back,
  pushes again under a fresh seq. Does nothing to a seq a pull (or a lapping
  push) has claimed: the claimer settles it. Returns true if the mark stands.
  """
  @spec skip(Channel.t(), seq) :: boolean()
  def skip(%Channel{atomics: a} = ch, seq) do
    if seq >= :atomics.get(a, @tail) and :ets.insert_new(ch.table, {seq, :skipped}) do
      :atomics.add(a, @skipped, 1)
      # Claimed meanwhile: the claimer may have taken the message before our
      # mark went in, so leave the seq to it.
      seq >= :atomics.get(a, @tail) or not withdraw(ch, seq, :skipped)
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
      # taken back (the ring lapped the seq, or a pull claimed it).
      [] ->
        if :ets.insert_new(t, {seq, :abandoned}) do
          :atomics.add(ch.atomics, @skipped, 1)
          if lapped?(ch, seq), do: :ets.delete_object(t, {seq, :abandoned})
        else
          abandon(ch, seq)
        end
    end

    :ok
  end

  @doc "How long to wait for a reserved seq before `skip/2`, in milliseconds."
  @spec stall_timeout() :: pos_integer()
  def stall_timeout, do: @stall_ms

  defp lapped?(%Channel{overflow: :drop_oldest} = ch, seq),
    do: :atomics.get(ch.atomics, @head) > seq + ch.capacity

  defp lapped?(_ch, _seq), do: false

  ## Read

  @doc """
  Reads up to `max` messages from `from`. Returns the messages, their count,
  how many seqs at or after `from` were gone before the first one, and the seq
  to read from next. The messages returned are contiguous.
  """
  @spec read(Channel.t(), seq, non_neg_integer()) ::
          {[{seq, binary()}], non_neg_integer(), non_neg_integer(), seq}
  def read(%Channel{} = ch, from, max) do
    start = max(from, first_seq(ch))
    limit = min(start + max, :atomics.get(ch.atomics, @head))
    collect(ch, start, limit, [], 0, start - from)
  end

  defp collect(_ch, seq, limit, acc, n, lost) when seq >= limit,
    do: {:lists.reverse(acc), n, lost, seq}

  defp collect(ch, seq, limit, acc, n, lost) do
    case :ets.lookup(ch.table, seq) do
      [{_, payload}] when is_binary(payload) ->
        collect(ch, seq + 1, limit, [{seq, payload} | acc], n + 1, lost)

      [{_, mark}] when is_mark(mark) and n == 0 ->
        collect(ch, seq + 1, limit, acc, n, lost)

      [] ->
        case chunk_at(ch, seq) do
          {key, first, stop} when seq <= stop ->
            collect_chunk(ch, key, first, seq, min(stop, limit - 1), limit, acc, n, lost)

          _ when n == 0 ->
            # Gone if claimed (pulled or overwritten); else its producer is mid-push.
            if seq < first_seq(ch),
              do: collect(ch, seq + 1, limit, acc, n, lost + 1),
              else: {[], 0, lost, seq}

          _ ->
            {:lists.reverse(acc), n, lost, seq}
        end

      _ ->
        {:lists.reverse(acc), n, lost, seq}
    end
  end

  # Takes seq..stop out of a chunk: one copy of the chunk for a long run, one
  # element at a time for a short one.
  defp collect_chunk(ch, key, first, seq, stop, limit, acc, n, lost) when stop - seq >= 16 do
    case :ets.lookup(ch.table, key) do
      [chunk] ->
        acc = Enum.reduce(seq..stop, acc, &[{&1, elem(chunk, 2 + &1 - first)} | &2])
        collect(ch, stop + 1, limit, acc, n + stop - seq + 1, lost)

      [] ->
        collect(ch, seq, limit, acc, n, lost)
    end
  end

  defp collect_chunk(ch, key, first, seq, stop, limit, acc, n, lost) do
    case element(ch.table, key, 3 + seq - first) do
      nil ->
        collect(ch, seq, limit, acc, n, lost)

      payload when seq == stop ->
        collect(ch, seq + 1, limit, [{seq, payload} | acc], n + 1, lost)

      payload ->
        collect_chunk(ch, key, first, seq + 1, stop, limit, [{seq, payload} | acc], n + 1, lost)
    end
  end

  ## Figures

  @spec first_seq(Channel.t()) :: seq
  def first_seq(%Channel{atomics: a, capacity: cap}) do
    max(:atomics.get(a, @tail), :atomics.get(a, @head) - cap)
  end

  @spec next_seq(Channel.t()) :: seq
  def next_seq(%Channel{atomics: a}), do: :atomics.get(a, @head)

  @spec len(Channel.t()) :: non_neg_integer()
  def len(%Channel{atomics: a, capacity: cap}) do
    (:atomics.get(a, @head) - :atomics.get(a, @tail)) |> max(0) |> min(cap)
  end

  @spec info(Channel.t()) :: map()
  def info(%Channel{atomics: a, capacity: cap} = ch) do
    head = :atomics.get(a, @head)
    tail = :atomics.get(a, @tail)
    pulled = :atomics.get(a, @pulled)
    skipped = :atomics.get(a, @skipped)

    %{
      capacity: cap,
      overflow: ch.overflow,
      len: (head - tail) |> max(0) |> min(cap),
      first_seq: max(tail, head - cap),
      next_seq: head,
      pushed: head - skipped,
      pulled: pulled,
      overwritten: max(tail - pulled - skipped, 0),
      rejected: :atomics.get(a, @rejected),
      skipped: skipped,
      bytes: :atomics.get(a, @bytes)
    }
  end

  ## Wake-ups for subscriptions

  @doc """
  Asks the next push to wake the channel's subscriptions. A subscription calls
  this when it has caught up, then reads once more before it waits: the push
  stores before it looks at the flag, the subscription sets the flag before it
  looks at the store, so one of the two always sees the other.
  """
  @spec arm_wake(Channel.t()) :: :ok
  def arm_wake(%Channel{atomics: a} = ch) do
    :ets.insert(ch.waiters, {self()})
    :atomics.put(a, @waiting, 1)
  end

  @doc "Withdraws the calling process from the channel's waiters."
  @spec disarm(Channel.t()) :: true
  def disarm(%Channel{} = ch), do: :ets.delete(ch.waiters, self())

  # Each waiter is removed and then woken, so none is removed unwoken; a
  # waiter that died meanwhile is removed all the same. Inserting and
  # removing one waiter costs the same however many there are.
  defp wake_all(ch) do
    for {pid} <- :ets.tab2list(ch.waiters) do
      :ets.delete(ch.waiters, pid)
      send(pid, :ringbus_wake)
    end
  end

  defp wake(%Channel{atomics: a} = ch) do
    # An atomic read-modify-write orders this read after the insert above.
    if :atomics.add_get(a, @waiting, 0) != 0 and :atomics.exchange(a, @waiting, 0) != 0 do
      wake_all(ch)
    end

    :ok
  end
end
