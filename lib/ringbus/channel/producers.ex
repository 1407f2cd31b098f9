defmodule Ringbus.Channel.Producers do
  @moduledoc false
  # The producer tags of a memory channel: a push under `{producer_id, n}`
  # is stored once, however often it is sent, and every later send answers
  # the seq it got then. A replicated channel keeps its tags in its Ra
  # machine instead (`Ringbus.Replica.Machine`), with the same rules.
  #
  # One ETS table per channel, created and owned by `Ringbus.Store` like the
  # ring's tables, and written by the pushing processes themselves: no
  # process hop on the push path. Its rows:
  #
  #   {{:t, producer, n}, {:pending, pid}}  a push under this tag is running in pid
  #   {{:t, producer, n}, {:ok, seq}}       stored; every resend answers this
  #   {{:p, producer}, -last, seen}         the highest n stored (negated, so
  #                                         update_counter can raise it
  #                                         atomically) and when, for eviction
  #   {:count, producers}                   how many {:p, _} rows there are
  #
  # The rules, as the Ra machine's:
  #
  #   * A producer's n increases. A tag stored already answers `{:ok, seq}`
  #     of its first push and stores nothing.
  #   * The channel remembers a producer's tags in (last - 64, last], where
  #     last is its highest n stored: with n going up by one per push, its
  #     last 64 tags. A tag at or below last - 64 answers
  #     `{:error, :stale_tag}`: it may have been stored and forgotten.
  #   * A refused push (`:full`, `:too_large`) does not spend its tag.
  #   * At most 1024 producers per channel; past that the one whose last
  #     store is oldest is forgotten, and a resend of its tags stores again.
  #
  # Concurrency. The claim `:ets.insert_new` of the tag's row decides which
  # of many concurrent sends pushes: one wins, pushes, and writes the seq
  # over its claim (or deletes the claim if refused). A send that finds a
  # claim waits, 1 ms at a time, while the claimant is alive: a push never
  # blocks, so the wait is short, and it ends with the seq (answered), the
  # claim gone (refused: this send claims and tries itself), or the
  # claimant dead (its claim is deleted, and this send claims). The one gap
  # left: a process killed after the ring stored its push and before it
  # wrote the seq leaves the tag unspent, so a resend stores again.
  #
  # Forgetting. Raising a producer's last from l0 to l deletes the tags that
  # fall out of the window, (l0 - 64, min(l0, l - 64)]: at most 64 deletes.
  # A tag written below the window by a push that lost the race deletes
  # itself. `last` is raised before tags are deleted, and a claimant reads
  # it after claiming, so a tag deleted as forgotten is never claimed anew:
  # its claimant sees it stale. No match spec names a producer id, so any
  # term is a valid id.

  alias Ringbus.Channel
  alias Ringbus.Channel.Ring

  @window 64

  @doc "How many of a producer's latest tags a channel remembers."
  @spec window() :: pos_integer()
  def window, do: @window

  @max_producers 1024

  @type tag :: {term(), integer()}

  @doc "The table of a new channel's tags, owned by the calling process."
  @spec new() :: :ets.tid()
  def new, do: :ets.new(:ringbus_producers, [:ordered_set, :public, write_concurrency: true])

  @doc "The most producers remembered per channel: `1024`."
  @spec max_producers() :: pos_integer()
  def max_producers, do: @max_producers

  @doc """
  Pushes a batch of `count` payloads, `bytes` bytes (`Ring.measure!/1`),
  to a memory channel under `tag`, or untagged when `tag` is nil.
  """
  @spec push_tagged(
          Channel.t(),
          tag() | nil,
          Enumerable.t(),
          non_neg_integer(),
          non_neg_integer()
        ) ::
          {:ok, non_neg_integer()} | {:error, :full | :too_large | :stale_tag}
  def push_tagged(channel, nil, payloads, count, bytes),
    do: Ring.push_measured(channel, payloads, count, bytes)

  def push_tagged(channel, tag, payloads, count, bytes),
    do:
      push(channel.producers, tag, fn -> Ring.push_measured(channel, payloads, count, bytes) end)

  @doc """
  Runs `push` (a push to the channel) under `tag`, once: a tag stored
  already answers its first `{:ok, seq}`; a forgotten one `{:error, :stale_tag}`.
  """
  @spec push(:ets.tid(), tag(), (() -> {:ok, non_neg_integer()} | {:error, atom()})) ::
          {:ok, non_neg_integer()} | {:error, atom()}
  def push(table, {producer, n} = tag, push) when is_integer(n) do
    key = {:t, producer, n}

    cond do
      stale?(table, producer, n) -> {:error, :stale_tag}
      :ets.insert_new(table, {key, {:pending, self()}}) -> claimed(table, tag, push)
      true -> claimed_by_other(table, tag, push)
    end
  end

  defp claimed(table, {producer, n} = tag, push) do
    claim = {{:t, producer, n}, {:pending, self()}}

    # Read after the claim: a tag forgotten meanwhile was forgotten after last passed it.
    if stale?(table, producer, n) do
      :ets.delete_object(table, claim)
      {:error, :stale_tag}
    else
      case run(table, claim, push) do
        {:ok, _seq} = reply ->
          record(table, tag, reply)
          reply

        refused ->
          :ets.delete_object(table, claim)
          refused
      end
    end
  end

  # A push that raises leaves no claim behind for resends to wait on.
  defp run(table, claim, push) do
    push.()
  rescue
    e ->
      if :ets.info(table, :id) != :undefined, do: :ets.delete_object(table, claim)
      reraise e, __STACKTRACE__
  end

  defp claimed_by_other(table, {producer, n} = tag, push) do
    key = {:t, producer, n}

    case :ets.lookup(table, key) do
      [{_, {:ok, _seq} = reply}] ->
        reply

      [{_, {:pending, owner}} = claim] ->
        if owner != self() and Process.alive?(owner) do
          receive after: (1 -> :ok)
        else
          :ets.delete_object(table, claim)
        end

        push(table, tag, push)

      [] ->
        push(table, tag, push)
    end
  end

  defp stale?(table, producer, n) do
    case :ets.lookup(table, {:p, producer}) do
      [{_, neg_last, _seen}] -> n <= -neg_last - @window
      [] -> false
    end
  end

  # Writes the seq over the claim, raises the producer's last, and forgets
  # what falls out of its window.
  defp record(table, {producer, n}, reply) do
    key = {:t, producer, n}
    :ets.insert(table, {key, reply})

    case raise_last(table, producer, n) do
      {:new, last} when n <= last - @window ->
        :ets.delete_object(table, {key, reply})

      {:new, _last} ->
        :ok

      {l0, last} ->
        if last > l0, do: forget(table, producer, l0 - @window + 1, min(l0, last - @window))
        if n <= last - @window, do: :ets.delete_object(table, {key, reply})
    end
  end

  defp forget(table, producer, from, to) do
    if from <= to do
      for k <- from..to, do: :ets.delete(table, {:t, producer, k})
    end

    :ok
  end

  # {previous last, last now}, or {:new, n} for a producer not known before.
  defp raise_last(table, producer, n) do
    pkey = {:p, producer}
    seen = :erlang.unique_integer([:monotonic])

    if :ets.insert_new(table, {pkey, -n, seen}) do
      counted(table)
      {:new, n}
    else
      try do
        # -last > -n means last < n: then last becomes n. Both ops in one atomic call.
        [old, new] = :ets.update_counter(table, pkey, [{2, 0}, {2, 0, -n, -n}])
        :ets.update_element(table, pkey, {3, seen})
        {-old, -new}
      rescue
        # Forgotten between the two calls: insert it again.
        ArgumentError -> raise_last(table, producer, n)
      end
    end
  end

  # Counts a new producer and forgets the least recently seen past the bound.
  defp counted(table) do
    if :ets.update_counter(table, :count, {2, 1}, {:count, 0}) > @max_producers,
      do: evict(table)

    :ok
  end

  # Linear in the producers, and only when a new one comes past the bound.
  defp evict(table) do
    seen = :ets.select(table, [{{{:p, :"$1"}, :"$2", :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}])
    {oldest, _, _} = Enum.min_by(seen, fn {_id, _neg_last, seen} -> seen end)

    case :ets.take(table, {:p, oldest}) do
      [{_, neg_last, _}] ->
        last = -neg_last
        forget(table, oldest, last - @window + 1, last)

        if :ets.update_counter(table, :count, {2, -1}) > @max_producers,
          do: evict(table)

      [] ->
        if :ets.lookup_element(table, :count, 2) > @max_producers, do: evict(table)
    end
  end
end
