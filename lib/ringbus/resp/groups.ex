defmodule Ringbus.Resp.Groups do
  @moduledoc false
  # Consumer groups: where each group of a stream stands, its consumers and
  # its pending entries list (PEL). All of it lives in one public, named ETS
  # `:ordered_set` per node, made by `new/0` in `Ringbus.Resp.GroupTable`,
  # which owns it and does nothing else. A stream's rows are kept on the
  # node that homes the stream, and only read and changed there, through
  # `Ringbus.Resp.GroupHome`: by the connections of that node directly, so
  # no process stands on a read path, and for other nodes' connections by
  # the link that brings their requests. So a group is one group in the
  # cluster. Every change is one atomic ETS operation: a group's position
  # moves by compare-and-swap, so consumers of one group never get the same
  # entry as new.
  #
  # Rows, keyed so that each stream's and each group's rows are one range:
  #
  #   {{:stream, stream}, incarnation}    which creation of the stream the
  #                                       rows below belong to (`fresh/3`)
  #   {{:group, stream, group}, last, entries_read, lost, pending, dropped}
  #   {{:consumer, stream, group, consumer}, seen_ms}
  #   {{:pending, stream, group, seq}, consumer, delivered_ms, deliveries}
  #
  # `last` is the seq of the last entry delivered (-1: none yet); `lost`
  # counts the entries that left the ring before the group got to them;
  # `pending` counts the group's PEL rows; `dropped` counts the PEL rows
  # dropped, oldest first, to keep the PEL within @max_pending.
  #
  # Bounds: @max_groups groups a stream, @max_consumers consumers a group,
  # @max_pending pending entries a group.

  @table :ringbus_resp_groups
  @max_groups 64
  @max_consumers 1_024
  @max_pending 10_000

  @last 2
  @entries_read 3
  @pending 5
  @dropped 6

  @type table :: :ets.tid()
  @type group :: %{
          last: integer(),
          entries_read: non_neg_integer(),
          lost: non_neg_integer(),
          pending: non_neg_integer(),
          dropped: non_neg_integer()
        }

  @doc "The bounds, for the documentation and the errors that name them."
  def limits, do: %{groups: @max_groups, consumers: @max_consumers, pending: @max_pending}

  @doc "The node's table, named, owned by the calling process."
  @spec new() :: table()
  def new, do: :ets.new(@table, [:named_table, :ordered_set, :public, write_concurrency: true])

  @doc "The node's table."
  @spec table() :: table()
  def table, do: @table

  @doc """
  Makes the rows of `stream` those of its creation `incarnation`: rows of
  an earlier creation (a stream deleted and created again, by any API) are
  dropped, as Redis drops a key's groups with the key.
  """
  @spec fresh(table(), binary(), pos_integer()) :: :ok
  def fresh(t, stream, incarnation) do
    case :ets.lookup(t, {:stream, stream}) do
      [{_, ^incarnation}] ->
        :ok

      [] ->
        :ets.insert_new(t, {{:stream, stream}, incarnation})
        :ok

      [{_, old}] ->
        # One caller wins the swap and drops the old creation's rows.
        spec = [{{{:stream, stream}, old}, [], [{{{{:stream, stream}}, incarnation}}]}]
        if :ets.select_replace(t, spec) == 1, do: drop_groups(t, stream)
        :ok
    end
  end

  ## Groups

  @spec create(table(), binary(), binary(), integer(), non_neg_integer()) ::
          :ok | {:error, :exists | :too_many}
  def create(t, stream, group, last, entries_read) do
    cond do
      count(t, {{:group, stream, :_}, :_, :_, :_, :_, :_}) >= @max_groups -> {:error, :too_many}
      :ets.insert_new(t, {{:group, stream, group}, last, entries_read, 0, 0, 0}) -> :ok
      true -> {:error, :exists}
    end
  end

  @spec fetch(table(), binary(), binary()) :: {:ok, group()} | :error
  def fetch(t, stream, group) do
    case :ets.lookup(t, {:group, stream, group}) do
      [{_, last, read, lost, pending, dropped}] ->
        {:ok, %{last: last, entries_read: read, lost: lost, pending: pending, dropped: dropped}}

      [] ->
        :error
    end
  end

  @doc "The groups of a stream, by name."
  @spec groups(table(), binary()) :: [{binary(), group()}]
  def groups(t, stream) do
    :ets.select(t, [{{{:group, stream, :"$1"}, :_, :_, :_, :_, :_}, [], [:"$1"]}])
    |> Enum.flat_map(fn name ->
      case fetch(t, stream, name) do
        {:ok, group} -> [{name, group}]
        :error -> []
      end
    end)
  end

  @doc """
  Every group of every stream, for the metrics: its figures, how many
  consumers it has and when the least recently seen of them was seen
  (system ms; nil with no consumer). Reads the group and consumer rows, not
  the PELs.
  """
  @spec summary(table()) :: [map()]
  def summary(t) do
    live = current_streams(t)

    seen =
      :ets.select(t, [{{{:consumer, :"$1", :"$2", :_}, :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}])
      |> Enum.reduce(%{}, fn {stream, group, at}, acc ->
        Map.update(acc, {stream, group}, {1, at}, fn {n, oldest} -> {n + 1, min(oldest, at)} end)
      end)

    for {{:group, stream, group}, last, read, lost, pending, dropped} <-
          :ets.match_object(t, {{:group, :_, :_}, :_, :_, :_, :_, :_}),
        MapSet.member?(live, stream) do
      {consumers, oldest} = Map.get(seen, {stream, group}, {0, nil})

      %{
        stream: stream,
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

  # The streams whose rows are those of the channel this node holds now.
  defp current_streams(t) do
    here = MapSet.new(Ringbus.channels())

    for {{:stream, stream}, incarnation} <- :ets.match_object(t, {{:stream, :_}, :_}),
        MapSet.member?(here, stream),
        match?({:ok, %{incarnation: ^incarnation}}, Ringbus.info(stream)),
        into: MapSet.new(),
        do: stream
  end

  @spec group_count(table(), binary()) :: non_neg_integer()
  def group_count(t, stream), do: count(t, {{:group, stream, :_}, :_, :_, :_, :_, :_})

  @doc "Deletes a group with its consumers and PEL; false if there was none."
  @spec destroy(table(), binary(), binary()) :: boolean()
  def destroy(t, stream, group) do
    case :ets.take(t, {:group, stream, group}) do
      [_] ->
        :ets.select_delete(t, [{{{:consumer, stream, group, :_}, :_}, [], [true]}])
        :ets.select_delete(t, [{{{:pending, stream, group, :_}, :_, :_, :_}, [], [true]}])
        true

      [] ->
        false
    end
  end

  @doc "Deletes every group of a stream."
  @spec drop_stream(table(), binary()) :: :ok
  def drop_stream(t, stream) do
    :ets.delete(t, {:stream, stream})
    drop_groups(t, stream)
  end

  defp drop_groups(t, stream) do
    :ets.select_delete(t, [{{{:group, stream, :_}, :_, :_, :_, :_, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:consumer, stream, :_, :_}, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:pending, stream, :_, :_}, :_, :_, :_}, [], [true]}])
    :ok
  end

  @doc "Sets where a group stands (XGROUP SETID)."
  @spec set_last(table(), binary(), binary(), integer(), non_neg_integer() | nil) :: boolean()
  def set_last(t, stream, group, last, entries_read) do
    key = {:group, stream, group}
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
          binary(),
          binary(),
          integer(),
          integer(),
          non_neg_integer(),
          non_neg_integer()
        ) ::
          boolean()
  def advance(t, stream, group, last, new_last, delivered, lost) do
    key = {:group, stream, group}

    spec = [
      {{key, last, :"$1", :"$2", :"$3", :"$4"}, [],
       [{{{:const, key}, new_last, {:+, :"$1", delivered}, {:+, :"$2", lost}, :"$3", :"$4"}}]}
    ]

    :ets.select_replace(t, spec) == 1
  end

  ## Consumers

  @doc "Makes a consumer if it is new; :created, :exists or :too_many."
  @spec add_consumer(table(), binary(), binary(), binary(), integer()) ::
          :created | :exists | :too_many
  def add_consumer(t, stream, group, consumer, now) do
    key = {:consumer, stream, group, consumer}

    cond do
      :ets.member(t, key) -> :exists
      count(t, {{:consumer, stream, group, :_}, :_}) >= @max_consumers -> :too_many
      :ets.insert_new(t, {key, now}) -> :created
      true -> :exists
    end
  end

  @doc "Notes that a consumer was seen now."
  @spec seen(table(), binary(), binary(), binary(), integer()) :: true
  def seen(t, stream, group, consumer, now),
    do: :ets.update_element(t, {:consumer, stream, group, consumer}, {2, now})

  @doc "The consumers of a group: name, seen time, pending count."
  @spec consumers(table(), binary(), binary()) :: [{binary(), integer(), non_neg_integer()}]
  def consumers(t, stream, group) do
    counts = pending_by_consumer(t, stream, group)

    for {name, seen} <-
          :ets.select(t, [{{{:consumer, stream, group, :"$1"}, :"$2"}, [], [{{:"$1", :"$2"}}]}]),
        do: {name, seen, Map.get(counts, name, 0)}
  end

  @doc "Deletes a consumer and its pending entries; returns how many it had."
  @spec delete_consumer(table(), binary(), binary(), binary()) :: non_neg_integer()
  def delete_consumer(t, stream, group, consumer) do
    :ets.delete(t, {:consumer, stream, group, consumer})

    taken =
      :ets.select_delete(t, [{{{:pending, stream, group, :_}, consumer, :_, :_}, [], [true]}])

    bump(t, stream, group, {@pending, -taken})
    taken
  end

  ## Pending entries

  @doc """
  Adds delivered seqs to a group's PEL. When the PEL would pass its bound,
  its oldest rows are dropped and counted.
  """
  @spec add_pending(table(), binary(), binary(), binary(), [Ringbus.seq()], integer()) :: :ok
  def add_pending(_t, _stream, _group, _consumer, [], _now), do: :ok

  def add_pending(t, stream, group, consumer, seqs, now) do
    {rows, n} =
      Enum.reduce(seqs, {[], 0}, fn seq, {rows, n} ->
        {[{{:pending, stream, group, seq}, consumer, now, 1} | rows], n + 1}
      end)

    :ets.insert(t, rows)

    case bump(t, stream, group, {@pending, n}) do
      pending when pending > @max_pending -> drop_oldest(t, stream, group, pending - @max_pending)
      _ -> :ok
    end
  end

  defp drop_oldest(_t, _stream, _group, 0), do: :ok

  defp drop_oldest(t, stream, group, excess) do
    case :ets.next(t, {:pending, stream, group, -1}) do
      {:pending, ^stream, ^group, _seq} = key ->
        if :ets.take(t, key) != [], do: bump(t, stream, group, [{@pending, -1}, {@dropped, 1}])

        drop_oldest(t, stream, group, excess - 1)

      _ ->
        :ok
    end
  end

  @doc "Removes seqs from a group's PEL; returns how many were there."
  @spec ack(table(), binary(), binary(), [Ringbus.seq()]) :: non_neg_integer()
  def ack(t, stream, group, seqs) do
    taken = Enum.count(seqs, fn seq -> :ets.take(t, {:pending, stream, group, seq}) != [] end)
    bump(t, stream, group, {@pending, -taken})
    taken
  end

  @doc """
  A group's PEL rows from `from` through `to` (seqs), oldest first, at most
  `count`: `{seq, consumer, delivered_ms, deliveries}`. `consumer` limits
  them to one consumer's.
  """
  @spec pending(table(), binary(), binary(), integer(), integer(), pos_integer(), binary() | nil) ::
          [{Ringbus.seq(), binary(), integer(), pos_integer()}]
  def pending(t, stream, group, from, to, count, consumer \\ nil) do
    who = consumer || :"$2"

    spec = [
      {{{:pending, stream, group, :"$1"}, who, :"$3", :"$4"},
       [{:>=, :"$1", from}, {:"=<", :"$1", to}], [{{:"$1", who_out(consumer), :"$3", :"$4"}}]}
    ]

    # ETS refuses a huge limit (XPENDING's count, XINFO's COUNT 0); a PEL holds no more than this.
    case :ets.select(t, spec, min(count, @max_pending + 1)) do
      {rows, _continuation} -> rows
      :"$end_of_table" -> []
    end
  end

  defp who_out(nil), do: :"$2"
  defp who_out(consumer), do: {:const, consumer}

  @doc "Pending counts by consumer, for XPENDING's summary and XINFO."
  @spec pending_by_consumer(table(), binary(), binary()) :: %{binary() => pos_integer()}
  def pending_by_consumer(t, stream, group) do
    :ets.select(t, [{{{:pending, stream, group, :_}, :"$1", :_, :_}, [], [:"$1"]}])
    |> Enum.frequencies()
  end

  @doc "The lowest and highest pending seq of a group, or nil."
  @spec pending_bounds(table(), binary(), binary()) :: {Ringbus.seq(), Ringbus.seq()} | nil
  def pending_bounds(t, stream, group) do
    with {:pending, ^stream, ^group, low} <- :ets.next(t, {:pending, stream, group, -1}),
         {:pending, ^stream, ^group, high} <- :ets.prev(t, {:pending, stream, group, :infinity}) do
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
          binary(),
          binary(),
          {Ringbus.seq(), binary(), integer(), pos_integer()},
          binary(),
          integer(),
          boolean()
        ) ::
          boolean()
  def claim(t, stream, group, {seq, owner, delivered, deliveries}, consumer, now, count?) do
    key = {:pending, stream, group, seq}
    deliveries = if count?, do: deliveries + 1, else: deliveries
    spec = [{{key, owner, delivered, :_}, [], [{{{:const, key}, consumer, now, deliveries}}]}]
    :ets.select_replace(t, spec) == 1
  end

  @doc """
  A consumer read its pending entry again (XREADGROUP with an ID): one
  more delivery, delivered now, as Redis counts it. False if the entry is
  no longer that consumer's.
  """
  @spec redeliver(table(), binary(), binary(), Ringbus.seq(), binary(), integer()) :: boolean()
  def redeliver(t, stream, group, seq, consumer, now) do
    key = {:pending, stream, group, seq}
    spec = [{{key, consumer, :_, :"$1"}, [], [{{{:const, key}, consumer, now, {:+, :"$1", 1}}}]}]
    :ets.select_replace(t, spec) == 1
  end

  @doc "Removes one PEL row whose entry has left the stream."
  @spec forget(table(), binary(), binary(), Ringbus.seq()) :: boolean()
  def forget(t, stream, group, seq), do: ack(t, stream, group, [seq]) == 1

  defp count(t, pattern), do: :ets.select_count(t, [{pattern, [], [true]}])

  # A group destroyed meanwhile has no row to count in: its rows are gone or
  # going, and no count is kept for it.
  defp bump(_t, _stream, _group, {_pos, 0}), do: 0

  defp bump(t, stream, group, ops) do
    :ets.update_counter(t, {:group, stream, group}, ops)
  rescue
    ArgumentError -> 0
  end
end
