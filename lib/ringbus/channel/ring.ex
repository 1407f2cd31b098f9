defmodule Ringbus.Channel.Ring do
  @moduledoc false
  # The ring: operations on a channel handle that run in the caller's process.
  #
  # Layout. One public ETS `:set` per channel holds `{seq, payload}`; a key is a
  # sequence number, so a slot is `rem(seq, capacity)` in spirit but two
  # messages never share a key. `:atomics` hold the cursors and counters:
  #
  #   head - the next seq to hand out. A push reserves seqs by bumping it.
  #   tail - the next seq a pull may claim. Seqs below it are pulled or claimed.
  #
  # Ownership of a message is decided by `:ets.take/2`, which is atomic: the one
  # process whose take returns the object owns it. A pull claims a seq by a CAS
  # on tail and then takes it; under `:drop_oldest` the push of `seq + capacity`
  # takes `seq` to overwrite it. Whichever take wins decides whether the message
  # was delivered or counted as overwritten; the other finds nothing. So a
  # message is pulled at most once and is never both pulled and overwritten.
  #
  # Between reserving a seq and inserting it a producer can be descheduled (or
  # killed). A puller that claimed such a seq waits a bounded time for it, then
  # writes a tombstone `{seq, :skipped}` with `insert_new`; the late producer's
  # own `insert_new` then fails and it pushes again under a fresh seq, so the
  # message is not lost. Tombstones are cleaned by the push that reaches
  # `seq + capacity`.

  alias Ringbus.Channel

  @head 1
  @tail 2
  @pushed 3
  @pulled 4
  @overwritten 5
  @rejected 6
  @bytes 7
  @waiting 8
  @slots 8

  # How long a puller waits for a reserved seq whose producer has not stored it.
  @stall_ns 5_000_000

  @typep seq :: non_neg_integer()

  @doc "Creates the storage of a channel. Called by the table owner."
  @spec new(Channel.name(), Channel.options()) :: Channel.t()
  def new(name, opts) do
    table = :ets.new(:ringbus_ring, [:set, :public, write_concurrency: true])

    %Channel{
      name: name,
      table: table,
      atomics: :atomics.new(@slots, signed: true),
      capacity: Keyword.fetch!(opts, :capacity),
      overflow: Keyword.fetch!(opts, :overflow),
      max_bytes: Keyword.fetch!(opts, :max_bytes)
    }
  end

  ## Push

  @spec push(Channel.t(), binary()) :: {:ok, seq} | {:error, :full | :too_large}
  def push(%Channel{max_bytes: max} = ch, payload)
      when is_integer(max) and byte_size(payload) > max do
    :atomics.add(ch.atomics, @rejected, 1)
    {:error, :too_large}
  end

  def push(%Channel{overflow: :drop_oldest, atomics: a} = ch, payload) do
    seq = :atomics.add_get(a, @head, 1) - 1

    if :ets.insert_new(ch.table, {seq, payload}) do
      :atomics.add(a, @pushed, 1)
      :atomics.add(a, @bytes, byte_size(payload))
      overwrite(ch, seq - ch.capacity)
      settle(ch, seq, seq)
      {:ok, seq}
    else
      retry_skipped(ch, seq)
      push(ch, payload)
    end
  end

  def push(%Channel{overflow: :reject, atomics: a} = ch, payload) do
    size = byte_size(payload)

    with :ok <- reserve_bytes(ch, size),
         {:ok, seq} <- reserve_seqs(ch, 1, size) do
      if :ets.insert_new(ch.table, {seq, payload}) do
        :atomics.add(a, @pushed, 1)
        clear_tombstone(ch, seq - ch.capacity)
        wake(ch)
        {:ok, seq}
      else
        retry_skipped(ch, seq)
        :atomics.sub(a, @bytes, size)
        push(ch, payload)
      end
    end
  end

  @spec push_many(Channel.t(), [binary()]) ::
          {:ok, seq} | {:error, :full | :too_large}
  def push_many(%Channel{} = ch, payloads) do
    {count, bytes, too_large?} = measure(payloads, ch.max_bytes, 0, 0, false)

    cond do
      too_large? ->
        :atomics.add(ch.atomics, @rejected, count)
        {:error, :too_large}

      count == 0 ->
        {:ok, :atomics.get(ch.atomics, @head)}

      true ->
        push_batch(ch, payloads, count, bytes)
    end
  end

  defp measure([p | rest], max, n, bytes, big?) when is_binary(p) do
    measure(
      rest,
      max,
      n + 1,
      bytes + byte_size(p),
      big? or (is_integer(max) and byte_size(p) > max)
    )
  end

  defp measure([], _max, n, bytes, big?), do: {n, bytes, big?}

  defp measure([p | _], _max, _n, _bytes, _big?) do
    raise ArgumentError, "expected every payload to be a binary, got: #{inspect(p)}"
  end

  defp push_batch(%Channel{overflow: :drop_oldest, atomics: a} = ch, payloads, count, bytes) do
    first = :atomics.add_get(a, @head, count) - count

    if :ets.insert_new(ch.table, number(payloads, first, [])) do
      :atomics.add(a, @pushed, count)
      :atomics.add(a, @bytes, bytes)
      last = first + count - 1
      Enum.each((first - ch.capacity)..(last - ch.capacity)//1, &overwrite(ch, &1))
      settle(ch, first, last)
      {:ok, first}
    else
      Enum.each(first..(first + count - 1)//1, &retry_skipped(ch, &1))
      push_batch(ch, payloads, count, bytes)
    end
  end

  defp push_batch(%Channel{overflow: :reject, atomics: a} = ch, payloads, count, bytes) do
    with :ok <- reserve_bytes(ch, bytes, count),
         {:ok, first} <- reserve_seqs(ch, count, bytes) do
      if :ets.insert_new(ch.table, number(payloads, first, [])) do
        :atomics.add(a, @pushed, count)

        Enum.each(
          (first - ch.capacity)..(first + count - 1 - ch.capacity)//1,
          &clear_tombstone(ch, &1)
        )

        wake(ch)
        {:ok, first}
      else
        Enum.each(first..(first + count - 1)//1, &retry_skipped(ch, &1))
        :atomics.sub(a, @bytes, bytes)
        push_batch(ch, payloads, count, bytes)
      end
    end
  end

  defp number([p | rest], seq, acc), do: number(rest, seq + 1, [{seq, p} | acc])
  defp number([], _seq, acc), do: acc

  # A puller gave up on this seq and left a tombstone: remove it and push again.
  defp retry_skipped(ch, seq), do: :ets.delete_object(ch.table, {seq, :skipped})

  defp clear_tombstone(_ch, seq) when seq < 0, do: :ok
  defp clear_tombstone(ch, seq), do: :ets.delete_object(ch.table, {seq, :skipped})

  # Reject mode: the ring must have room for `count` more seqs beyond tail.
  defp reserve_seqs(%Channel{atomics: a, capacity: cap} = ch, count, bytes) do
    head = :atomics.get(a, @head)

    if head + count - :atomics.get(a, @tail) > cap do
      :atomics.add(a, @rejected, count)
      :atomics.sub(a, @bytes, bytes)
      {:error, :full}
    else
      case :atomics.compare_exchange(a, @head, head, head + count) do
        :ok -> {:ok, head}
        _ -> reserve_seqs(ch, count, bytes)
      end
    end
  end

  defp reserve_bytes(ch, size, count \\ 1)

  defp reserve_bytes(%Channel{max_bytes: :infinity, atomics: a}, size, _count) do
    :atomics.add(a, @bytes, size)
  end

  defp reserve_bytes(%Channel{max_bytes: max, atomics: a}, size, count) do
    if :atomics.add_get(a, @bytes, size) > max do
      :atomics.sub(a, @bytes, size)
      :atomics.add(a, @rejected, count)
      {:error, :full}
    else
      :ok
    end
  end

  # Drop-oldest: the push of `seq + capacity` overwrites `seq`, if still there.
  defp overwrite(_ch, seq) when seq < 0, do: :ok

  defp overwrite(ch, seq) do
    case :ets.take(ch.table, seq) do
      [{_, payload}] when is_binary(payload) ->
        :atomics.add(ch.atomics, @overwritten, 1)
        :atomics.sub(ch.atomics, @bytes, byte_size(payload))

      _ ->
        :ok
    end
  end

  # After a drop-oldest push of first..last: a producer descheduled long enough
  # that the ring lapped it must overwrite its own message, or it would stay
  # behind for good. Then enforce :max_bytes and wake any waiting subscriber.
  defp settle(%Channel{atomics: a, capacity: cap} = ch, first, last) do
    head = :atomics.get(a, @head)
    if head > first + cap, do: Enum.each(first..min(last, head - cap - 1)//1, &overwrite(ch, &1))
    trim(ch)
    wake(ch)
  end

  defp trim(%Channel{max_bytes: :infinity}), do: :ok

  defp trim(%Channel{max_bytes: max, atomics: a} = ch) do
    if :atomics.get(a, @bytes) > max do
      case claim(ch) do
        {:ok, _seq, _payload} ->
          :atomics.add(a, @overwritten, 1)
          trim(ch)

        :empty ->
          :ok
      end
    end
  end

  ## Pull

  @spec pull(Channel.t()) :: {:ok, seq, binary()} | :empty
  def pull(%Channel{} = ch) do
    with {:ok, _seq, _payload} = ok <- claim(ch) do
      :atomics.add(ch.atomics, @pulled, 1)
      ok
    end
  end

  # Claims the oldest message: CAS tail past it, then take it.
  defp claim(%Channel{atomics: a, capacity: cap} = ch) do
    tail = :atomics.get(a, @tail)
    head = :atomics.get(a, @head)

    cond do
      tail >= head ->
        :empty

      ch.overflow == :drop_oldest and tail < head - cap ->
        # Everything below head - capacity is overwritten: skip it in one step.
        :atomics.compare_exchange(a, @tail, tail, head - cap)
        claim(ch)

      :atomics.compare_exchange(a, @tail, tail, tail + 1) == :ok ->
        case take_claimed(ch, tail, nil) do
          {:ok, payload} ->
            :atomics.sub(a, @bytes, byte_size(payload))
            {:ok, tail, payload}

          :gone ->
            claim(ch)
        end

      true ->
        claim(ch)
    end
  end

  defp take_claimed(ch, seq, deadline) do
    case :ets.take(ch.table, seq) do
      [{_, payload}] when is_binary(payload) ->
        {:ok, payload}

      [] ->
        cond do
          lapped?(ch, seq) ->
            :gone

          deadline == nil ->
            take_claimed(ch, seq, :erlang.monotonic_time() + @stall_ns)

          :erlang.monotonic_time() < deadline ->
            :erlang.yield()
            take_claimed(ch, seq, deadline)

          :ets.insert_new(ch.table, {seq, :skipped}) ->
            :gone

          true ->
            take_claimed(ch, seq, deadline)
        end
    end
  end

  defp lapped?(%Channel{overflow: :drop_oldest} = ch, seq),
    do: :atomics.get(ch.atomics, @head) > seq + ch.capacity

  defp lapped?(_ch, _seq), do: false

  ## Read

  @doc """
  Reads up to `max` messages from `from`. Returns the messages, their count,
  how many messages at or after `from` were gone before the first one, and the
  seq to read from next. The messages returned are contiguous.
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

      [{_, :skipped}] when n == 0 ->
        collect(ch, seq + 1, limit, acc, n, lost)

      [] when n == 0 ->
        if gone?(ch, seq),
          do: collect(ch, seq + 1, limit, acc, n, lost + 1),
          else: {[], 0, lost, seq}

      _ ->
        {:lists.reverse(acc), n, lost, seq}
    end
  end

  # A seq is gone when it was pulled (or claimed) or overwritten; otherwise it
  # is reserved by a producer that has not stored it yet.
  defp gone?(ch, seq), do: seq < first_seq(ch)

  ## Counters

  @spec first_seq(Channel.t()) :: seq
  def first_seq(%Channel{atomics: a, capacity: cap}) do
    max(:atomics.get(a, @tail), :atomics.get(a, @head) - cap)
  end

  @spec next_seq(Channel.t()) :: seq
  def next_seq(%Channel{atomics: a}), do: :atomics.get(a, @head)

  @spec len(Channel.t()) :: non_neg_integer()
  def len(%Channel{atomics: a, capacity: cap}) do
    held = :atomics.get(a, @pushed) - :atomics.get(a, @pulled) - :atomics.get(a, @overwritten)

    held |> max(0) |> min(cap)
  end

  @spec info(Channel.t()) :: map()
  def info(%Channel{atomics: a} = ch) do
    %{
      capacity: ch.capacity,
      overflow: ch.overflow,
      max_bytes: ch.max_bytes,
      len: len(ch),
      first_seq: first_seq(ch),
      next_seq: next_seq(ch),
      pushed: :atomics.get(a, @pushed),
      pulled: :atomics.get(a, @pulled),
      overwritten: :atomics.get(a, @overwritten),
      rejected: :atomics.get(a, @rejected),
      bytes: max(:atomics.get(a, @bytes), 0)
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
  def arm_wake(%Channel{atomics: a}), do: :atomics.put(a, @waiting, 1)

  defp wake(%Channel{atomics: a} = ch) do
    if :atomics.get(a, @waiting) != 0 and :atomics.exchange(a, @waiting, 0) != 0 do
      Ringbus.Channel.Subscription.wake_all(ch.name)
    end

    :ok
  end
end
