defmodule Ringbus.Channel.Ids do
  @moduledoc false
  # A channel's Redis stream IDs, `{ms, n}` (both u64): the system ms a
  # message was stored at and a counter within that ms. A channel keeps the
  # last ID it gave in `:atomics`, read and advanced by compare-and-swap, so
  # that pushers reserve IDs from their own processes, as they reserve seqs.
  #
  # The stamp. Slot 1 holds the last ID packed as `(ms - epoch) <<< 18 ||| n`,
  # `epoch` 2025-01-01: the ms of any date from then to 2094 and 262,144 IDs
  # per ms fit one small integer (below 2^59, so no bignum is built on a
  # push's path, which costs about as much as the rest of the reservation),
  # and one CAS moves it. A reservation of `count` IDs takes the
  # ones after the stamp, or `{now, 0}` if that is later, and never lets a
  # batch's counter carry into the next ms (it then starts at the next ms):
  # a batch's IDs are `{ms, n}, {ms, n + 1}, ...`, so a chunk needs only its
  # first (`nth/2`). Read between a push's read of `head` and its CAS on it,
  # the stamp gives IDs that increase in seq order, by the argument that
  # orders the ring's times (`Ringbus.Channel.Ring`); a failed head CAS
  # leaves a gap in the counter, which no reader sees.
  #
  # Wide IDs. An ID that does not pack (a client's explicit ID with a huge
  # or small ms or a huge counter; Redis's own tests use `1-1` and
  # `18446744073709551615-...`; a fresh stamp's `0-0`) leaves
  # the stamp saturated: slots 3 and 4 then hold the last ID whole, written
  # under slot 2, a version that is odd while a writer holds it (readers
  # retry on a change). Only that state serialises pushers, until the next
  # auto ID, which packs again; so too a batch of more IDs than a ms holds.
  #
  # Errors are Redis's: `:not_greater` (an explicit ID at or below the last),
  # `:zero` (`0-0`), `:exhausted` (no ID after the last).

  import Bitwise

  @n_bits 18
  @n_max (1 <<< @n_bits) - 1
  # 2025-01-01T00:00:00Z in system ms.
  @epoch 1_735_689_600_000
  # The largest small integer: above it an integer is a bignum, on the heap.
  @saturated (1 <<< 59) - 1
  @max_u64 0xFFFF_FFFF_FFFF_FFFF

  @stamp 1
  @version 2
  @wide_ms 3
  @wide_n 4
  @deleted_ms 5
  @deleted_n 6

  @typedoc "A stream ID: ms and counter, both u64."
  @type id :: {non_neg_integer(), non_neg_integer()}

  @typedoc "A refusal, as Redis words it (`Ringbus.Resp.Errors`)."
  @type error :: :not_greater | :zero | :exhausted

  @typedoc """
  The ID a push asks for: `:auto` (Redis's `*`), `{ms, n}` (`ms-n`), or
  `{ms, :auto}` (`ms-*`).
  """
  @type given :: :auto | {non_neg_integer(), non_neg_integer() | :auto}

  @doc "Whether `id` is an ID: two u64."
  defguard is_id(id)
           when is_tuple(id) and tuple_size(id) == 2 and is_integer(elem(id, 0)) and
                  is_integer(elem(id, 1)) and elem(id, 0) >= 0 and elem(id, 0) <= @max_u64 and
                  elem(id, 1) >= 0 and elem(id, 1) <= @max_u64

  @doc "Whether `given` is a push's ID request (`t:given/0`)."
  defguard is_given(given)
           when given == :auto or is_id(given) or
                  (is_tuple(given) and tuple_size(given) == 2 and elem(given, 1) == :auto and
                     is_integer(elem(given, 0)) and elem(given, 0) >= 0 and
                     elem(given, 0) <= @max_u64)

  @doc "A fresh stamp: the last ID is `0-0`."
  @spec new() :: :atomics.atomics_ref()
  def new do
    ids = :atomics.new(6, signed: false)
    # 0-0 is below the epoch: held wide.
    :atomics.put(ids, @stamp, @saturated)
    ids
  end

  @doc "The last ID given (or set by `set/2`)."
  @spec last(:atomics.atomics_ref()) :: id()
  def last(ids) do
    case :atomics.get(ids, @stamp) do
      @saturated -> read_wide(ids)
      stamp -> unpack(stamp)
    end
  end

  @doc """
  Reserves `count` (≥ 1) consecutive auto IDs at system time `now_ms`:
  the first of them, later than the last ID given.
  """
  @spec reserve(:atomics.atomics_ref(), pos_integer(), non_neg_integer()) ::
          {:ok, id()} | {:error, error()}
  def reserve(ids, count, now_ms) do
    stamp = :atomics.get(ids, @stamp)
    first = max(stamp + 1, (now_ms - @epoch) <<< @n_bits)
    # A batch never carries its counter into the next ms.
    first = if (first &&& @n_max) + count - 1 > @n_max, do: (first ||| @n_max) + 1, else: first
    last = first + count - 1

    cond do
      stamp == @saturated or last >= @saturated or count > @n_max or
          now_ms - @epoch > @saturated >>> @n_bits ->
        wide(ids, fn prev -> auto_after(prev, count, now_ms) end)

      :atomics.compare_exchange(ids, @stamp, stamp, last) == :ok ->
        {:ok, unpack(first)}

      true ->
        reserve(ids, count, now_ms)
    end
  end

  @doc "`reserve/3` at `at`, a monotonic µs time (its ms as `Ringbus.Channel.Times.ms/1` has it)."
  @spec reserve_at(:atomics.atomics_ref(), pos_integer(), integer()) ::
          {:ok, id()} | {:error, error()}
  def reserve_at(ids, count, at),
    do: reserve(ids, count, div(at + :erlang.time_offset(:microsecond), 1000))

  @doc """
  `{at, first}`: `count` IDs reserved at `at` (`reserve_at/3`), where
  no ID given before can have exhausted them.
  """
  @spec stamp!(:atomics.atomics_ref(), pos_integer(), integer()) :: {integer(), id()}
  def stamp!(ids, count, at) do
    {:ok, first} = reserve_at(ids, count, at)
    {at, first}
  end

  @doc "Moves the last ID up to the last of `count` given from `first` (a stamp `{at, first}`)."
  @spec follow(:atomics.atomics_ref(), {integer(), id()}, pos_integer()) :: {integer(), id()}
  def follow(ids, {_at, first} = stamp, count) do
    raise_to(ids, nth(first, count - 1))
    stamp
  end

  @doc "Moves the last ID up to `id`, if `id` is above it (a single writer's: a replicated ring's)."
  @spec raise_to(:atomics.atomics_ref(), id()) :: :ok
  def raise_to(ids, id) do
    if above?(id, last(ids)), do: set(ids, id), else: :ok
  end

  @doc "`explicit/3` with nothing to claim: `{:ok, id}`, or the refusal."
  @spec reserve_explicit(:atomics.atomics_ref(), {non_neg_integer(), non_neg_integer() | :auto}) ::
          {:ok, id()} | {:error, error()}
  def reserve_explicit(ids, given) do
    with {:ok, id, nil} <- explicit(ids, given, fn _id -> {:ok, nil} end), do: {:ok, id}
  end

  @doc """
  Takes a client's ID, `{ms, n}` or `{ms, :auto}` (Redis's `ms-*`: the
  next counter in `ms` if the last ID is in it, else `ms-0`), if above the
  last ID, and runs `claim` with it while every other reservation waits:
  the caller reserves its seq there, so no ID reserved meanwhile can take a
  seq before it. The ID is kept if `claim` answers `{:ok, value}`:
  `{:ok, id, value}`; else the last ID stays, and `claim`'s error is the
  answer.
  """
  @spec explicit(:atomics.atomics_ref(), {non_neg_integer(), non_neg_integer() | :auto}, fun()) ::
          {:ok, id(), term()} | {:error, term()}
  def explicit(_ids, {0, 0}, _claim), do: {:error, :zero}

  def explicit(ids, given, claim) do
    lock(ids)
    prev = last_locked(ids)

    result =
      with {:ok, id} <- explicit_after(prev, given),
           {:ok, value} <- claim.(id),
           do: {:ok, id, value}

    store(ids, if(match?({:ok, _, _}, result), do: elem(result, 1), else: prev))
    unlock(ids)
    result
  end

  @doc """
  Sets the last ID (XSETID; a re-created stream's start): the caller has
  checked it against the entries held.
  """
  @spec set(:atomics.atomics_ref(), id()) :: :ok
  def set(ids, id), do: set(ids, id, fn _prev -> :ok end)

  @doc """
  Sets the last ID to `id` if `check` answers `:ok` on the last ID, run
  while every other reservation waits; else the last ID stays, and
  `check`'s answer is the answer.
  """
  @spec set(:atomics.atomics_ref(), id(), (id() -> :ok | {:error, term()})) ::
          :ok | {:error, term()}
  def set(ids, id, check) do
    lock(ids)
    prev = last_locked(ids)
    result = check.(prev)
    store(ids, if(result == :ok, do: id, else: prev))
    unlock(ids)
    result
  end

  @doc "The highest ID removed (`removed/2`): `0-0` before any."
  @spec max_removed(:atomics.atomics_ref()) :: id()
  def max_removed(ids) do
    v = :atomics.get(ids, @version)
    id = {:atomics.get(ids, @deleted_ms), :atomics.get(ids, @deleted_n)}

    if (v &&& 1) == 1 or :atomics.get(ids, @version) != v do
      :erlang.yield()
      max_removed(ids)
    else
      id
    end
  end

  @doc "Notes that the message of ID `id` was removed (Redis's max-deleted-entry-id)."
  @spec removed(:atomics.atomics_ref(), id()) :: :ok
  def removed(ids, {ms, n} = id) do
    if above?(id, max_removed(ids)) do
      lock(ids)

      if above?(id, {:atomics.get(ids, @deleted_ms), :atomics.get(ids, @deleted_n)}) do
        :atomics.put(ids, @deleted_ms, ms)
        :atomics.put(ids, @deleted_n, n)
      end

      unlock(ids)
    end

    :ok
  end

  @doc "The `i`-th ID of a batch whose first is `first`, as `reserve/3` numbers them."
  @spec nth(id(), non_neg_integer()) :: id()
  def nth({ms, n}, i) when n + i <= @max_u64, do: {ms, n + i}
  def nth({ms, n}, i), do: {ms + 1, n + i - @max_u64 - 1}

  @doc "Whether `a` is above `b` in Redis's order."
  @spec above?(id(), id()) :: boolean()
  def above?({ms_a, n_a}, {ms_b, n_b}), do: ms_a > ms_b or (ms_a == ms_b and n_a > n_b)

  ## Packing

  @doc false
  @spec pack(id()) :: non_neg_integer() | :wide
  def pack({ms, n}) when n <= @n_max and ms >= @epoch do
    packed = (ms - @epoch) <<< @n_bits ||| n
    if packed < @saturated, do: packed, else: :wide
  end

  def pack(_id), do: :wide

  defp unpack(packed), do: {(packed >>> @n_bits) + @epoch, packed &&& @n_max}

  @doc false
  # The IDs one ms holds packed: a batch of more goes wide.
  @spec packed_per_ms() :: pos_integer()
  def packed_per_ms, do: @n_max + 1

  ## Rules, on the last ID

  @doc """
  The rule of `reserve/3` on a last ID held elsewhere (a replicated
  channel's machine decides IDs in its state): `count` auto IDs after
  `prev` at system time `now_ms`, `{:ok, first, last}`. Pure.
  """
  @spec next_auto(id(), pos_integer(), non_neg_integer()) ::
          {:ok, id(), id()} | {:error, :exhausted}
  def next_auto(prev, count, now_ms), do: auto_after(prev, count, now_ms)

  @doc "The rule of `explicit/3` on a last ID held elsewhere: the ID `given` names. Pure."
  @spec next_given(id(), {non_neg_integer(), non_neg_integer() | :auto}) ::
          {:ok, id()} | {:error, error()}
  def next_given(_prev, {0, 0}), do: {:error, :zero}
  def next_given(prev, given), do: explicit_after(prev, given)

  defp auto_after({ms, _n} = prev, count, now_ms) do
    first = if ms >= now_ms, do: next(prev), else: {:ok, {now_ms, 0}}

    case first do
      # The batch would run past the largest ID.
      {:ok, {f_ms, f_n} = first} when f_ms < @max_u64 or f_n + count - 1 <= @max_u64 ->
        {:ok, first, nth(first, count - 1)}

      _none_left ->
        {:error, :exhausted}
    end
  end

  defp explicit_after({ms, n}, {ms, :auto}) when n < @max_u64, do: {:ok, {ms, n + 1}}
  defp explicit_after({last_ms, _n}, {ms, :auto}) when ms > last_ms, do: {:ok, {ms, 0}}
  defp explicit_after(_last, {_ms, :auto}), do: {:error, :not_greater}

  defp explicit_after(last, id) do
    if above?(id, last), do: {:ok, id}, else: {:error, :not_greater}
  end

  defp next({@max_u64, @max_u64}), do: {:error, :not_greater}
  defp next({ms, @max_u64}), do: {:ok, {ms + 1, 0}}
  defp next({ms, n}), do: {:ok, {ms, n + 1}}

  ## The saturated stamp

  # Runs `rule` on the last ID under the version lock, and keeps the last
  # ID it reserves.
  defp wide(ids, rule) do
    lock(ids)
    prev = last_locked(ids)

    {result, keep} =
      case rule.(prev) do
        {:ok, first, last} -> {{:ok, first}, last}
        {:error, _} = error -> {error, prev}
      end

    store(ids, keep)
    unlock(ids)
    result
  end

  # Under the lock: the last ID, packed into the stamp, or whole with the
  # stamp saturated.
  defp store(ids, {ms, n} = id) do
    case pack(id) do
      :wide ->
        :atomics.put(ids, @wide_ms, ms)
        :atomics.put(ids, @wide_n, n)
        :atomics.put(ids, @stamp, @saturated)

      packed ->
        :atomics.put(ids, @stamp, packed)
    end
  end

  # Under the lock the stamp can still move (unlocked packed reservations):
  # saturating it by CAS would race them, so the lock holder reads the last
  # ID and then stops them by swapping in the saturated stamp.
  defp last_locked(ids) do
    stamp = :atomics.get(ids, @stamp)

    cond do
      stamp == @saturated ->
        {:atomics.get(ids, @wide_ms), :atomics.get(ids, @wide_n)}

      :atomics.compare_exchange(ids, @stamp, stamp, @saturated) == :ok ->
        unpack(stamp)

      true ->
        last_locked(ids)
    end
  end

  defp lock(ids) do
    v = :atomics.get(ids, @version)

    if (v &&& 1) == 0 and :atomics.compare_exchange(ids, @version, v, v + 1) == :ok do
      :ok
    else
      :erlang.yield()
      lock(ids)
    end
  end

  defp unlock(ids), do: :atomics.add(ids, @version, 1)

  defp read_wide(ids) do
    v = :atomics.get(ids, @version)
    id = {:atomics.get(ids, @wide_ms), :atomics.get(ids, @wide_n)}

    cond do
      (v &&& 1) == 1 or :atomics.get(ids, @version) != v -> retry_read(ids)
      :atomics.get(ids, @stamp) != @saturated -> last(ids)
      true -> id
    end
  end

  defp retry_read(ids) do
    :erlang.yield()
    last(ids)
  end
end
