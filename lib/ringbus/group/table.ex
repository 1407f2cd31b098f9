defmodule Ringbus.Group.Table do
  @moduledoc false
  # Consumer groups: where each group of a channel stands, its consumers and
  # its pending entries list (PEL). All of it lives in one public, named ETS
  # `:ordered_set` per node, made by `new/0` in `Ringbus.Group.TableOwner`,
  # which owns it and does nothing else. A channel's rows are kept on the
  # node that runs its operations (its home), and only read and changed
  # there, by `Ringbus.Group` as `Ringbus.Op` runs a group request: in the
  # caller on that node, so no process stands on a read path, and in the
  # link that brings another node's requests. So a group is one group in
  # the cluster. Every change is one atomic ETS operation: a group's
  # position moves by compare-and-swap, so consumers of one group never get
  # the same entry as new.
  #
  # Rows are keyed by the channel's incarnation (`c` below), which names one
  # creation of the channel: a channel deleted and created again starts with
  # no group, and the rows of one that is gone are dropped when its anchor
  # stops (`watch/2`, `drop/2`). Keyed so that each channel's and each
  # group's rows are one range:
  #
  #   {{:channel, c}, anchor}             its anchor is watched (`watch/2`)
  #   {{:group, c, group}, last, entries_read, lost, pending, dropped}
  #   {{:consumer, c, group, consumer}, seen_ms}
  #   {{:pending, c, group, seq}, consumer, delivered_ms, deliveries}
  #
  # `last` is the seq of the last entry delivered (-1: none yet); `lost`
  # counts the entries that left the ring before the group got to them;
  # `pending` counts the group's PEL rows; `dropped` counts the PEL rows
  # dropped, oldest first, to keep the PEL within @max_pending.
  #
  # Bounds: @max_groups groups a channel, @max_consumers consumers a group,
  # @max_pending pending entries a group.

  @table :ringbus_groups
  @max_groups 64
  @max_consumers 1_024
  @max_pending 10_000

  @last 2
  @entries_read 3
  @pending 5
  @dropped 6

  @type table :: :ets.tid() | atom()
  @typedoc "A channel's incarnation: whose rows."
  @type c :: term()
  @type group :: %{
          last: integer(),
          entries_read: non_neg_integer(),
          lost: non_neg_integer(),
          pending: non_neg_integer(),
          dropped: non_neg_integer()
        }

  @doc "The bounds, for the errors that name them."
  def limits, do: %{groups: @max_groups, consumers: @max_consumers, pending: @max_pending}

  @doc "The node's table, named, owned by the calling process."
  @spec new() :: table()
  def new, do: :ets.new(@table, [:named_table, :ordered_set, :public, write_concurrency: true])

  @doc "The node's table."
  @spec table() :: table()
  def table, do: @table

  ## Channels

  @doc """
  Records that channel `c`'s anchor is watched: true for the one caller
  that should ask the owner to watch it.
  """
  @spec watch(table(), c(), pid()) :: boolean()
  def watch(t, c, anchor),
    do: not :ets.member(t, {:channel, c}) and :ets.insert_new(t, {{:channel, c}, anchor})

  @doc "Forgets that channel `c`'s anchor is watched, so the next request watches it again."
  @spec unwatch(table(), c()) :: true
  def unwatch(t, c), do: :ets.delete(t, {:channel, c})

  @doc "Deletes every row of channel `c`: it is gone."
  @spec drop(table(), c()) :: :ok
  def drop(t, c) do
    :ets.delete(t, {:channel, c})
    :ets.select_delete(t, [{{{:group, c, :_}, :_, :_, :_, :_, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:consumer, c, :_, :_}, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:pending, c, :_, :_}, :_, :_, :_}, [], [true]}])
    :ok
  end

  ## Groups

  @spec create(table(), c(), binary(), integer(), non_neg_integer()) ::
          :ok | {:error, :exists | :too_many}
  def create(t, c, group, last, entries_read) do
    cond do
      count(t, {{:group, c, :_}, :_, :_, :_, :_, :_}) >= @max_groups -> {:error, :too_many}
      :ets.insert_new(t, {{:group, c, group}, last, entries_read, 0, 0, 0}) -> :ok
      true -> {:error, :exists}
    end
  end

  @spec fetch(table(), c(), binary()) :: {:ok, group()} | :error
  def fetch(t, c, group) do
    case :ets.lookup(t, {:group, c, group}) do
      [{_, last, read, lost, pending, dropped}] ->
        {:ok, %{last: last, entries_read: read, lost: lost, pending: pending, dropped: dropped}}

      [] ->
        :error
    end
  end

  @doc "The groups of a channel, by name."
  @spec groups(table(), c()) :: [{binary(), group()}]
  def groups(t, c) do
    :ets.select(t, [{{{:group, c, :"$1"}, :_, :_, :_, :_, :_}, [], [:"$1"]}])
    |> Enum.flat_map(fn name ->
      case fetch(t, c, name) do
        {:ok, group} -> [{name, group}]
        :error -> []
      end
    end)
  end

  @doc """
  Every group of every channel, for the metrics: its channel's incarnation,
  its figures, how many consumers it has and when the least recently seen
  of them was seen (system ms; nil with no consumer). Reads the group and
  consumer rows, not the PELs.
  """
  @spec summary(table()) :: [map()]
  def summary(t) do
    seen =
      :ets.select(t, [{{{:consumer, :"$1", :"$2", :_}, :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}])
      |> Enum.reduce(%{}, fn {c, group, at}, acc ->
        Map.update(acc, {c, group}, {1, at}, fn {n, oldest} -> {n + 1, min(oldest, at)} end)
      end)

    for {{:group, c, group}, last, read, lost, pending, dropped} <-
          :ets.match_object(t, {{:group, :_, :_}, :_, :_, :_, :_, :_}) do
      {consumers, oldest} = Map.get(seen, {c, group}, {0, nil})

      %{
        incarnation: c,
        group: group,
        last: last,
        entries_read: read,
        lost: lost,
        pending: pending,
        dropped: dropped,
        consumers: consumers,
        oldest_seen: oldest
      }
    end
  end

  @spec group_count(table(), c()) :: non_neg_integer()
  def group_count(t, c), do: count(t, {{:group, c, :_}, :_, :_, :_, :_, :_})

  @doc "Deletes a group with its consumers and PEL; false if there was none."
  @spec destroy(table(), c(), binary()) :: boolean()
  def destroy(t, c, group) do
    case :ets.take(t, {:group, c, group}) do
      [_] ->
        :ets.select_delete(t, [{{{:consumer, c, group, :_}, :_}, [], [true]}])
        :ets.select_delete(t, [{{{:pending, c, group, :_}, :_, :_, :_}, [], [true]}])
        true

      [] ->
        false
    end
  end

  @doc "Sets where a group stands (entries_read nil: as it was)."
  @spec set_last(table(), c(), binary(), integer(), non_neg_integer() | nil) :: boolean()
  def set_last(t, c, group, last, entries_read) do
    key = {:group, c, group}
    updates = [{@last, last}] ++ if(entries_read, do: [{@entries_read, entries_read}], else: [])
    :ets.update_element(t, key, updates)
  end

  @doc """
  Moves a group from `last` (as read) to `new_last`, counting `delivered`
  entries read and `lost` entries missed. False if another consumer moved
  it first: read again from where it stands.
  """
  @spec advance(
          table(),
          c(),
          binary(),
          integer(),
          integer(),
          non_neg_integer(),
          non_neg_integer()
        ) ::
          boolean()
  def advance(t, c, group, last, new_last, delivered, lost) do
    key = {:group, c, group}

    spec = [
      {{key, last, :"$1", :"$2", :"$3", :"$4"}, [],
       [{{{:const, key}, new_last, {:+, :"$1", delivered}, {:+, :"$2", lost}, :"$3", :"$4"}}]}
    ]

    :ets.select_replace(t, spec) == 1
  end

  ## Consumers

  @doc "Makes a consumer if it is new; :created, :exists or :too_many."
  @spec add_consumer(table(), c(), binary(), binary(), integer()) ::
          :created | :exists | :too_many
  def add_consumer(t, c, group, consumer, now) do
    key = {:consumer, c, group, consumer}

    cond do
      :ets.member(t, key) -> :exists
      count(t, {{:consumer, c, group, :_}, :_}) >= @max_consumers -> :too_many
      :ets.insert_new(t, {key, now}) -> :created
      true -> :exists
    end
  end

  @doc "Notes that a consumer was seen now."
  @spec seen(table(), c(), binary(), binary(), integer()) :: boolean()
  def seen(t, c, group, consumer, now),
    do: :ets.update_element(t, {:consumer, c, group, consumer}, {2, now})

  @doc "The consumers of a group: name, seen time, pending count."
  @spec consumers(table(), c(), binary()) :: [{binary(), integer(), non_neg_integer()}]
  def consumers(t, c, group) do
    counts = pending_by_consumer(t, c, group)

    for {name, seen} <-
          :ets.select(t, [{{{:consumer, c, group, :"$1"}, :"$2"}, [], [{{:"$1", :"$2"}}]}]),
        do: {name, seen, Map.get(counts, name, 0)}
  end

  @doc "Deletes a consumer and its pending entries; returns how many it had."
  @spec delete_consumer(table(), c(), binary(), binary()) :: non_neg_integer()
  def delete_consumer(t, c, group, consumer) do
    :ets.delete(t, {:consumer, c, group, consumer})

    taken = :ets.select_delete(t, [{{{:pending, c, group, :_}, consumer, :_, :_}, [], [true]}])

    bump(t, c, group, {@pending, -taken})
    taken
  end

  ## Pending entries

  @doc """
  Adds delivered seqs to a group's PEL. When the PEL would pass its bound,
  its oldest rows are dropped and counted.
  """
  @spec add_pending(table(), c(), binary(), binary(), [non_neg_integer()], integer()) :: :ok
  def add_pending(_t, _c, _group, _consumer, [], _now), do: :ok

  def add_pending(t, c, group, consumer, seqs, now) do
    {rows, n} =
      Enum.reduce(seqs, {[], 0}, fn seq, {rows, n} ->
        {[{{:pending, c, group, seq}, consumer, now, 1} | rows], n + 1}
      end)

    :ets.insert(t, rows)

    case bump(t, c, group, {@pending, n}) do
      pending when pending > @max_pending -> drop_oldest(t, c, group, pending - @max_pending)
      _ -> :ok
    end
  end

  defp drop_oldest(_t, _c, _group, 0), do: :ok

  defp drop_oldest(t, c, group, excess) do
    case :ets.next(t, {:pending, c, group, -1}) do
      {:pending, ^c, ^group, _seq} = key ->
        if :ets.take(t, key) != [], do: bump(t, c, group, [{@pending, -1}, {@dropped, 1}])

        drop_oldest(t, c, group, excess - 1)

      _ ->
        :ok
    end
  end

  @doc "Removes seqs from a group's PEL; returns how many were there."
  @spec ack(table(), c(), binary(), [non_neg_integer()]) :: non_neg_integer()
  def ack(t, c, group, seqs) do
    taken = Enum.count(seqs, fn seq -> :ets.take(t, {:pending, c, group, seq}) != [] end)
    bump(t, c, group, {@pending, -taken})
    taken
  end

  @doc """
  A group's PEL rows from `from` through `to` (seqs), oldest first, at most
  `count`: `{seq, consumer, delivered_ms, deliveries}`. `consumer` limits
  them to one consumer's.
  """
  @spec pending(table(), c(), binary(), integer(), integer(), non_neg_integer(), binary() | nil) ::
          [{non_neg_integer(), binary(), integer(), pos_integer()}]
  def pending(t, c, group, from, to, count, consumer \\ nil)

  def pending(_t, _c, _group, _from, _to, 0, _consumer), do: []

  def pending(t, c, group, from, to, count, consumer) do
    who = consumer || :"$2"

    spec = [
      {{{:pending, c, group, :"$1"}, who, :"$3", :"$4"}, [{:>=, :"$1", from}, {:"=<", :"$1", to}],
       [{{:"$1", who_out(consumer), :"$3", :"$4"}}]}
    ]

    # ETS refuses a huge limit (a count of "all"); a PEL holds no more than this.
    case :ets.select(t, spec, min(count, @max_pending + 1)) do
      {rows, _continuation} -> rows
      :"$end_of_table" -> []
    end
  end

  defp who_out(nil), do: :"$2"
  defp who_out(consumer), do: {:const, consumer}

  @doc "Pending counts by consumer."
  @spec pending_by_consumer(table(), c(), binary()) :: %{binary() => pos_integer()}
  def pending_by_consumer(t, c, group) do
    :ets.select(t, [{{{:pending, c, group, :_}, :"$1", :_, :_}, [], [:"$1"]}])
    |> Enum.frequencies()
  end

  @doc "The lowest and highest pending seq of a group, or nil."
  @spec pending_bounds(table(), c(), binary()) :: {non_neg_integer(), non_neg_integer()} | nil
  def pending_bounds(t, c, group) do
    with {:pending, ^c, ^group, low} <- :ets.next(t, {:pending, c, group, -1}),
         {:pending, ^c, ^group, high} <- :ets.prev(t, {:pending, c, group, :infinity}) do
      {low, high}
    else
      _ -> nil
    end
  end

  @doc """
  Gives a PEL row to `consumer` if it is still as read (same owner and
  delivery time): true if this caller got it.
  """
  @spec claim(
          table(),
          c(),
          binary(),
          {non_neg_integer(), binary(), integer(), pos_integer()},
          binary(),
          integer(),
          boolean()
        ) ::
          boolean()
  def claim(t, c, group, {seq, owner, delivered, deliveries}, consumer, now, count?) do
    key = {:pending, c, group, seq}
    deliveries = if count?, do: deliveries + 1, else: deliveries
    spec = [{{key, owner, delivered, :_}, [], [{{{:const, key}, consumer, now, deliveries}}]}]
    :ets.select_replace(t, spec) == 1
  end

  @doc """
  A consumer read its pending entry again: one more delivery, delivered
  now. False if the entry is no longer that consumer's.
  """
  @spec redeliver(table(), c(), binary(), non_neg_integer(), binary(), integer()) :: boolean()
  def redeliver(t, c, group, seq, consumer, now) do
    key = {:pending, c, group, seq}
    spec = [{{key, consumer, :_, :"$1"}, [], [{{{:const, key}, consumer, now, {:+, :"$1", 1}}}]}]
    :ets.select_replace(t, spec) == 1
  end

  @doc "Removes one PEL row whose entry has left the channel."
  @spec forget(table(), c(), binary(), non_neg_integer()) :: boolean()
  def forget(t, c, group, seq), do: ack(t, c, group, [seq]) == 1

  defp count(t, pattern), do: :ets.select_count(t, [{pattern, [], [true]}])

  # A group destroyed meanwhile has no row to count in: its rows are gone or
  # going, and no count is kept for it.
  defp bump(_t, _c, _group, {_pos, 0}), do: 0

  defp bump(t, c, group, ops) do
    :ets.update_counter(t, {:group, c, group}, ops)
  rescue
    ArgumentError -> 0
  end
end
