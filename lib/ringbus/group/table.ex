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
  #   {{:group, c, group}, last, entries_read, lost, pending, dropped,
  #                        acked, redelivered, dead, held, config}
  #   {{:consumer, c, group, consumer}, seen_ms, owner}
  #   {{:pending, c, group, seq}, consumer, delivered_ms, deliveries, due_ms}
  #   {{:due, c, group, due_ms, seq}}     the PEL by due time (an index)
  #   {{:push, c, group, consumer}, pid, ref}
  #                                       the consumer's push subscription
  #                                       (`Ringbus.Group.Push`), told of acks
  #   {{:gone, c, seq}, id}               the Redis stream ID of a pending
  #                                       entry the ring trimmed
  #                                       (`Ringbus.Group.GoneIds`)
  #
  # `last` is the seq of the last entry delivered (-1: none yet); `lost`
  # counts the entries that left the ring before the group got to them (or
  # before a pending one was delivered again); `pending` counts the group's
  # PEL rows (and a fetch's reservation while it takes new entries);
  # `dropped` counts the PEL rows dropped, oldest first, to keep a front
  # end's reads (RESP) within `max_pending`; `acked`, `redelivered` and
  # `dead` count entries acked, delivered again, and given up after
  # `max_deliver` deliveries; `held` counts fetches that took fewer new
  # entries than asked because the PEL was at `max_pending`. `config` is
  # `%{ack_wait, max_deliver, dead_letter, max_pending, hold}` (`config/1`).
  #
  # A consumer's `owner` is the process that fetched for it last through
  # the Elixir API (`Ringbus.Groups`), or nil: `Ringbus.Group.TableOwner`
  # monitors it, and when it exits (or its node goes) the consumer's
  # pending entries are due; so are they when a fetch takes the consumer
  # from an owner that has exited before the monitor fired.
  #
  # A pending entry's `due_ms` is when a fetch may deliver it again:
  # `ack_wait` after its delivery, or when a nack or its owner's exit said.
  # Each PEL row has one `:due` row beside it, so that a fetch finds the
  # entries due without reading the PEL; a `:due` row whose PEL row is gone
  # or has another due time is stale, and the fetch that finds it deletes
  # it (a change writes the PEL row first, by compare-and-swap, then the
  # index).
  #
  # Bounds: @max_groups groups a channel, @max_consumers consumers a group,
  # a group's `max_pending` pending entries (10,000 by default).

  @table :ringbus_groups
  @max_groups 64
  @max_consumers 1_024
  @max_pending 10_000
  # The largest `max_pending` a group may be given.
  @pending_cap 1_000_000

  @last 2
  @entries_read 3
  @lost 4
  @pending 5
  @dropped 6
  @acked 7
  @redelivered 8
  @dead 9
  @held 10
  @config 11

  @default_config %{
    ack_wait: 30_000,
    max_deliver: :infinity,
    dead_letter: nil,
    max_pending: 10_000,
    hold: false
  }

  # Match patterns of each kind of row.
  @group_row {:_, :_, :_, :_, :_, :_, :_, :_, :_, :_}

  @type table :: :ets.tid() | atom()
  @typedoc "A channel's incarnation: whose rows."
  @type c :: term()
  @type group :: %{
          last: integer(),
          entries_read: integer(),
          lost: non_neg_integer(),
          pending: non_neg_integer(),
          dropped: non_neg_integer(),
          acked: non_neg_integer(),
          redelivered: non_neg_integer(),
          dead: non_neg_integer(),
          held: non_neg_integer(),
          config: config()
        }

  @typedoc """
  How a group delivers (see `Ringbus.Groups`): `ack_wait` (ms), `max_deliver`
  (deliveries, or `:infinity`), `dead_letter` (a channel name, or nil) and
  `max_pending`, and `hold` (a holding group, `Ringbus.Group.Hold`).
  """
  @type config :: %{
          ack_wait: pos_integer(),
          max_deliver: pos_integer() | :infinity,
          dead_letter: term(),
          max_pending: pos_integer(),
          hold: boolean()
        }

  @typedoc "A PEL row: seq, consumer, delivery time, deliveries, due time (ms)."
  @type row :: {non_neg_integer(), binary(), integer(), pos_integer(), integer()}

  @doc "The bounds, for the errors that name them."
  def limits,
    do: %{
      groups: @max_groups,
      consumers: @max_consumers,
      pending: @max_pending,
      pending_cap: @pending_cap
    }

  @doc "A group's configuration: `opts` over the defaults (those of a group RESP makes)."
  @spec config(map() | keyword()) :: config()
  def config(opts \\ %{}), do: Map.merge(@default_config, Map.new(opts))

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
    :ets.select_delete(t, [{group_row({:group, c, :_}), [], [true]}])
    :ets.select_delete(t, [{{{:consumer, c, :_, :_}, :_, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:pending, c, :_, :_}, :_, :_, :_, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:due, c, :_, :_, :_}}, [], [true]}])
    :ets.select_delete(t, [{{{:push, c, :_, :_}, :_, :_}, [], [true]}])
    :ets.select_delete(t, [{{{:gone, c, :_}, :_}, [], [true]}])
    :ok
  end

  @doc """
  Channel `c`'s groups, consumers, PEL and push subscriptions, as rows to `restore/3` elsewhere
  (a replicated channel's snapshot); the due index is rebuilt from the PEL.
  """
  @spec dump(table(), c()) :: [tuple()]
  # One select a kind of row: each key's bound prefix is one range of the
  # ordered set, where a spec of many patterns would read the whole table.
  def dump(t, c) do
    :ets.select(t, [{group_row({:group, c, :_}), [], [:"$_"]}]) ++
      :ets.select(t, [{{{:consumer, c, :_, :_}, :_, :_}, [], [:"$_"]}]) ++
      :ets.select(t, [{{{:pending, c, :_, :_}, :_, :_, :_, :_}, [], [:"$_"]}]) ++
      :ets.select(t, [{{{:push, c, :_, :_}, :_, :_}, [], [:"$_"]}])
  end

  @doc "Whether channel `c` has a group."
  @spec any?(table(), c()) :: boolean()
  def any?(t, c),
    do: :ets.select(t, [{group_row({:group, c, :_}), [], [true]}], 1) != :"$end_of_table"

  @doc "Channel `c`'s rows become `rows` (from `dump/2`); whether it is watched is kept."
  @spec restore(table(), c(), [tuple()]) :: :ok
  def restore(t, c, rows) do
    watched = :ets.lookup(t, {:channel, c})
    drop(t, c)
    :ets.insert(t, watched)

    due = for {{:pending, ^c, group, seq}, _, _, _, due} <- rows, do: {{:due, c, group, due, seq}}

    :ets.insert(t, rows)
    :ets.insert(t, due)
    :ok
  end

  ## Groups

  @spec create(table(), c(), binary(), integer(), integer(), config()) ::
          :ok | {:error, :exists | :too_many}
  def create(t, c, group, last, entries_read, config \\ @default_config) do
    row = {{:group, c, group}, last, entries_read, 0, 0, 0, 0, 0, 0, 0, config}

    cond do
      count(t, group_row({:group, c, :_})) >= @max_groups -> {:error, :too_many}
      :ets.insert_new(t, row) -> :ok
      true -> {:error, :exists}
    end
  end

  @spec fetch(table(), c(), binary()) :: {:ok, group()} | :error
  def fetch(t, c, group) do
    case :ets.lookup(t, {:group, c, group}) do
      [row] -> {:ok, group(row)}
      [] -> :error
    end
  end

  defp group({_, last, read, lost, pending, dropped, acked, redelivered, dead, held, config}) do
    %{
      last: last,
      entries_read: read,
      lost: lost,
      pending: pending,
      dropped: dropped,
      acked: acked,
      redelivered: redelivered,
      dead: dead,
      held: held,
      config: config
    }
  end

  defp group_row(key), do: Tuple.insert_at(@group_row, 0, key)

  @doc "The groups of a channel, by name."
  @spec groups(table(), c()) :: [{binary(), group()}]
  def groups(t, c) do
    :ets.select(t, [{group_row({:group, c, :"$1"}), [], [:"$1"]}])
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
      :ets.select(t, [
        {{{:consumer, :"$1", :"$2", :_}, :"$3", :_}, [], [{{:"$1", :"$2", :"$3"}}]}
      ])
      |> Enum.reduce(%{}, fn {c, group, at}, acc ->
        Map.update(acc, {c, group}, {1, at}, fn {n, oldest} -> {n + 1, min(oldest, at)} end)
      end)

    for {{:group, c, group}, _, _, _, _, _, _, _, _, _, _} = row <-
          :ets.match_object(t, group_row({:group, :_, :_})) do
      {consumers, oldest} = Map.get(seen, {c, group}, {0, nil})

      row
      |> group()
      |> Map.delete(:config)
      |> Map.merge(%{incarnation: c, group: group, consumers: consumers, oldest_seen: oldest})
    end
  end

  @spec group_count(table(), c()) :: non_neg_integer()
  def group_count(t, c), do: count(t, group_row({:group, c, :_}))

  @doc "Deletes a group with its consumers and PEL; false if there was none."
  @spec destroy(table(), c(), binary()) :: boolean()
  def destroy(t, c, group) do
    case :ets.take(t, {:group, c, group}) do
      [_] ->
        :ets.select_delete(t, [{{{:consumer, c, group, :_}, :_, :_}, [], [true]}])
        :ets.select_delete(t, [{{{:pending, c, group, :_}, :_, :_, :_, :_}, [], [true]}])
        :ets.select_delete(t, [{{{:due, c, group, :_, :_}}, [], [true]}])
        :ets.select_delete(t, [{{{:push, c, group, :_}, :_, :_}, [], [true]}])
        true

      [] ->
        false
    end
  end

  @doc "Sets where a group stands (entries_read nil: as it was)."
  @spec set_last(table(), c(), binary(), integer(), integer() | nil) :: boolean()
  def set_last(t, c, group, last, entries_read) do
    key = {:group, c, group}
    updates = [{@last, last}] ++ if(entries_read, do: [{@entries_read, entries_read}], else: [])
    :ets.update_element(t, key, updates)
  end

  @doc """
  Moves a group from `last` with `entries_read` (as read) to `new_last`
  with `new_read`, counting `lost` entries missed. False if another
  request moved it first: read again from where it stands.
  """
  @spec advance(
          table(),
          c(),
          binary(),
          {integer(), integer()},
          integer(),
          integer(),
          non_neg_integer()
        ) ::
          boolean()
  def advance(t, c, group, {last, read}, new_last, new_read, lost) do
    key = {:group, c, group}

    spec = [
      {{key, last, read, :"$2", :"$3", :"$4", :"$5", :"$6", :"$7", :"$8", :"$9"}, [],
       [
         {{{:const, key}, new_last, new_read, {:+, :"$2", lost}, :"$3", :"$4", :"$5", :"$6",
           :"$7", :"$8", :"$9"}}
       ]}
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
      consumer_count(t, c, group) >= @max_consumers -> :too_many
      :ets.insert_new(t, {key, now, nil}) -> :created
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
          :ets.select(t, [{{{:consumer, c, group, :"$1"}, :"$2", :_}, [], [{{:"$1", :"$2"}}]}]),
        do: {name, seen, Map.get(counts, name, 0)}
  end

  @doc """
  The first `max` consumers of a group by name, as `consumers/3` gives
  them, and how many it has. Their pending counts are read from the PEL
  only with `pending?` (none are pending otherwise).
  """
  @spec consumers(table(), c(), binary(), non_neg_integer(), boolean()) ::
          {[{binary(), integer(), non_neg_integer()}], non_neg_integer()}
  def consumers(t, c, group, max, pending?) do
    all = consumer_count(t, c, group)
    spec = [{{{:consumer, c, group, :"$1"}, :"$2", :_}, [], [{{:"$1", :"$2"}}]}]
    rows = if max > 0 and all > 0, do: select(t, spec, max), else: []
    counts = if pending? and rows != [], do: pending_by_consumer(t, c, group), else: %{}
    {for({name, seen} <- rows, do: {name, seen, Map.get(counts, name, 0)}), all}
  end

  @doc "How many consumers a group has."
  @spec consumer_count(table(), c(), binary()) :: non_neg_integer()
  def consumer_count(t, c, group), do: count(t, {{:consumer, c, group, :_}, :_, :_})

  @doc """
  Makes `owner` the consumer's owner (the consumer made if new):
  `{:owned, previous}` when it was not already (`previous` the owner it
  had, or nil), for the caller to have the owner watched; else false.
  """
  @spec own(table(), c(), binary(), binary(), pid(), integer()) ::
          {:owned, pid() | nil} | false
  def own(t, c, group, consumer, owner, now) do
    key = {:consumer, c, group, consumer}
    _ = add_consumer(t, c, group, consumer, now)
    spec = fn previous -> [{{key, :"$1", previous}, [], [{{{:const, key}, :"$1", owner}}]}] end

    case :ets.lookup(t, key) do
      [{^key, _seen, ^owner}] -> false
      # Taken from the owner read, unless another fetch took it first.
      [{^key, _seen, other}] -> :ets.select_replace(t, spec.(other)) == 1 && {:owned, other}
      # Past the bound of consumers: fetches all the same, unwatched.
      [] -> false
    end
  end

  @doc "The consumer's owner, or nil."
  @spec owner(table(), c(), binary(), binary()) :: pid() | nil
  def owner(t, c, group, consumer) do
    :ets.lookup_element(t, {:consumer, c, group, consumer}, 3)
  rescue
    ArgumentError -> nil
  end

  @doc "The consumer is no longer `owner`'s, if it still was: true then."
  @spec disown(table(), c(), binary(), binary(), pid()) :: boolean()
  def disown(t, c, group, consumer, owner) do
    key = {:consumer, c, group, consumer}
    spec = [{{key, :"$1", owner}, [], [{{{:const, key}, :"$1", nil}}]}]
    :ets.select_replace(t, spec) == 1
  end

  @doc "Deletes a consumer, leaving its pending entries; false if there was none."
  @spec forget_consumer(table(), c(), binary(), binary()) :: boolean()
  def forget_consumer(t, c, group, consumer),
    do: :ets.take(t, {:consumer, c, group, consumer}) != []

  @doc "Deletes a consumer and its pending entries; returns how many it had."
  @spec delete_consumer(table(), c(), binary(), binary()) :: non_neg_integer()
  def delete_consumer(t, c, group, consumer) do
    :ets.delete(t, {:consumer, c, group, consumer})

    rows = :ets.select(t, [{{{:pending, c, group, :_}, consumer, :_, :_, :_}, [], [:"$_"]}])
    taken = Enum.count(rows, &take_row(t, &1))
    bump(t, c, group, {@pending, -taken})
    taken
  end

  ## Pending entries

  @doc """
  Adds delivered seqs to a group's PEL, due `ack_wait` from now. When the
  PEL would pass the group's `max_pending`, its oldest rows are dropped and
  counted (a front end's reads; a fetch reserves its room first and adds
  with `add_reserved/6`).
  """
  @spec add_pending(table(), c(), binary(), binary(), [non_neg_integer()], integer()) :: :ok
  def add_pending(_t, _c, _group, _consumer, [], _now), do: :ok

  def add_pending(t, c, group, consumer, seqs, now) do
    wait = config_of(t, c, group).ack_wait
    count_pending(t, c, group, insert_pending(t, c, group, consumer, seqs, now, now + wait))
  end

  @doc """
  Counts `n` rows added to a group's PEL (by `stage/6`), dropping its
  oldest past `max_pending` as `add_pending/6` does.
  """
  @spec count_pending(table(), c(), binary(), non_neg_integer()) :: :ok
  def count_pending(t, c, group, n) do
    max = config_of(t, c, group).max_pending

    case bump(t, c, group, {@pending, n}) do
      pending when pending > max -> drop_oldest(t, c, group, pending - max)
      _ -> :ok
    end
  end

  @doc "Adds delivered seqs to a group's PEL, due at `due`, in room `reserve/5` gave."
  @spec add_reserved(
          table(),
          c(),
          binary(),
          binary(),
          [non_neg_integer()],
          {integer(), integer()}
        ) ::
          non_neg_integer()
  def add_reserved(t, c, group, consumer, seqs, {now, due}),
    do: insert_pending(t, c, group, consumer, seqs, now, due)

  defp insert_pending(t, c, group, consumer, seqs, now, due) do
    {rows, index, n} = pending_rows(c, group, consumer, seqs, now, due)
    :ets.insert(t, rows)
    :ets.insert(t, index)
    n
  end

  defp pending_rows(c, group, consumer, seqs, now, due) do
    Enum.reduce(seqs, {[], [], 0}, fn seq, {rows, index, n} ->
      {[{{:pending, c, group, seq}, consumer, now, 1, due} | rows],
       [{{:due, c, group, due, seq}} | index], n + 1}
    end)
  end

  @doc """
  Adds seqs to a group's PEL, delivered at `now` and due at `due`, before
  its position moves past them (a holding group's reads, so that every seq
  it passed is pending or acked): `{:ok, added}`, or `:taken` with nothing
  added when a row of one is there already. Not counted: `count_pending/4`
  or a reservation counts them.
  """
  @spec stage(table(), c(), binary(), binary(), [non_neg_integer()], {integer(), integer()}) ::
          {:ok, non_neg_integer()} | :taken
  def stage(t, c, group, consumer, seqs, {now, due}) do
    {rows, index, n} = pending_rows(c, group, consumer, seqs, now, due)
    if :ets.insert_new(t, rows) and :ets.insert(t, index), do: {:ok, n}, else: :taken
  end

  @doc "Takes back the rows `stage/6` added, the position having moved first."
  @spec unstage(table(), c(), binary(), binary(), [non_neg_integer()], {integer(), integer()}) ::
          :ok
  def unstage(t, c, group, consumer, seqs, {now, due}) do
    Enum.each(seqs, &take_row(t, {{:pending, c, group, &1}, consumer, now, 1, due}))
  end

  @doc "A group's configuration (the default one if it is gone)."
  @spec config_of(table(), c(), binary()) :: config()
  def config_of(t, c, group) do
    :ets.lookup_element(t, {:group, c, group}, @config)
  rescue
    ArgumentError -> @default_config
  end

  @doc """
  Reserves room for up to `want` new entries in a group's PEL within `max`:
  returns how many it may add (the pending count holds them meanwhile).
  """
  @spec reserve(table(), c(), binary(), non_neg_integer(), pos_integer()) :: non_neg_integer()
  def reserve(_t, _c, _group, 0, _max), do: 0

  def reserve(t, c, group, want, max) do
    case bump(t, c, group, {@pending, want}) do
      0 ->
        0

      pending when pending > max ->
        over = min(want, pending - max)
        bump(t, c, group, {@pending, -over})
        want - over

      _ ->
        want
    end
  end

  @doc "Gives back `n` reserved places that were not used."
  @spec release(table(), c(), binary(), non_neg_integer()) :: :ok
  def release(t, c, group, n) do
    bump(t, c, group, {@pending, -n})
    :ok
  end

  defp drop_oldest(_t, _c, _group, 0), do: :ok

  defp drop_oldest(t, c, group, excess) do
    case :ets.next(t, {:pending, c, group, -1}) do
      {:pending, ^c, ^group, _seq} = key ->
        case :ets.take(t, key) do
          [row] ->
            unindex(t, row)
            bump(t, c, group, [{@pending, -1}, {@dropped, 1}])

          [] ->
            :ok
        end

        drop_oldest(t, c, group, excess - 1)

      _ ->
        :ok
    end
  end

  @doc """
  Removes seqs from a group's PEL, counted acked: returns how many were
  there, and the seqs taken by consumer.
  """
  @spec ack(table(), c(), binary(), [non_neg_integer()]) ::
          {non_neg_integer(), %{binary() => [non_neg_integer()]}}
  def ack(t, c, group, seqs) do
    {taken, by} =
      Enum.reduce(seqs, {0, %{}}, fn seq, {n, by} ->
        case :ets.take(t, {:pending, c, group, seq}) do
          [{_, consumer, _, _, _} = row] ->
            unindex(t, row)
            {n + 1, Map.update(by, consumer, [seq], &[seq | &1])}

          [] ->
            {n, by}
        end
      end)

    bump(t, c, group, [{@pending, -taken}, {@acked, taken}])
    {taken, by}
  end

  defp take(t, c, group, seq) do
    case :ets.take(t, {:pending, c, group, seq}) do
      [row] -> unindex(t, row)
      [] -> false
    end
  end

  ## Push subscriptions

  @doc "Makes `pid` (tagged `ref`) the consumer's push subscription, in place of any other."
  @spec attach(table(), c(), binary(), binary(), pid(), reference()) :: true
  def attach(t, c, group, consumer, pid, ref),
    do: :ets.insert(t, {{:push, c, group, consumer}, pid, ref})

  @doc "The consumer has no push subscription any more, if `pid` was still it."
  @spec detach(table(), c(), binary(), binary(), pid()) :: boolean()
  def detach(t, c, group, consumer, pid),
    do: :ets.select_delete(t, [{{{:push, c, group, consumer}, pid, :_}, [], [true]}]) == 1

  @doc "The consumer's push subscription, `{pid, ref}`, or nil."
  @spec push_of(table(), c(), binary(), binary()) :: {pid(), reference()} | nil
  def push_of(t, c, group, consumer) do
    case :ets.lookup(t, {:push, c, group, consumer}) do
      [{_, pid, ref}] -> {pid, ref}
      [] -> nil
    end
  end

  defp take_row(t, row), do: :ets.select_delete(t, [{row, [], [true]}]) == 1 and unindex(t, row)

  defp unindex(t, {{:pending, c, group, seq}, _consumer, _at, _n, due}),
    do: :ets.delete(t, {:due, c, group, due, seq})

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
      {{{:pending, c, group, :"$1"}, who, :"$3", :"$4", :_},
       [{:>=, :"$1", from}, {:"=<", :"$1", to}], [{{:"$1", who_out(consumer), :"$3", :"$4"}}]}
    ]

    select(t, spec, count)
  end

  # ETS refuses a huge limit (a count of "all"); a PEL holds no more than this.
  defp select(t, spec, count) do
    case :ets.select(t, spec, min(count, @pending_cap + 1)) do
      {rows, _continuation} -> rows
      :"$end_of_table" -> []
    end
  end

  defp who_out(nil), do: :"$2"
  defp who_out(consumer), do: {:const, consumer}

  @doc "One PEL row, or nil."
  @spec row(table(), c(), binary(), non_neg_integer()) :: row() | nil
  def row(t, c, group, seq) do
    case :ets.lookup(t, {:pending, c, group, seq}) do
      [{_, consumer, at, n, due}] -> {seq, consumer, at, n, due}
      [] -> nil
    end
  end

  @doc "A consumer's PEL rows, oldest first."
  @spec rows_of(table(), c(), binary(), binary()) :: [row()]
  def rows_of(t, c, group, consumer) do
    spec = [
      {{{:pending, c, group, :"$1"}, consumer, :"$2", :"$3", :"$4"}, [],
       [{{:"$1", {:const, consumer}, :"$2", :"$3", :"$4"}}]}
    ]

    :ets.select(t, spec)
  end

  @doc "Up to `count` PEL rows delivered at or before `before` (system ms), oldest seq first."
  @spec delivered_before(table(), c(), binary(), integer(), pos_integer()) :: [row()]
  def delivered_before(t, c, group, before, count) do
    spec = [
      {{{:pending, c, group, :"$1"}, :"$2", :"$3", :"$4", :"$5"}, [{:"=<", :"$3", before}],
       [{{:"$1", :"$2", :"$3", :"$4", :"$5"}}]}
    ]

    select(t, spec, count)
  end

  @doc """
  Up to `count` entries of the due index with due times at or before
  `now`, earliest first: `{due_ms, seq}`. Each may be stale (see the header).
  """
  @spec due(table(), c(), binary(), integer(), pos_integer()) :: [{integer(), non_neg_integer()}]
  def due(t, c, group, now, count) do
    spec = [{{{:due, c, group, :"$1", :"$2"}}, [{:"=<", :"$1", now}], [{{:"$1", :"$2"}}]}]
    select(t, spec, count)
  end

  @doc "The earliest due time in a group's index, or nil."
  @spec next_due(table(), c(), binary()) :: integer() | nil
  def next_due(t, c, group) do
    case :ets.next(t, {:due, c, group, -1, -1}) do
      {:due, ^c, ^group, due, _seq} -> due
      _ -> nil
    end
  end

  @doc "Deletes an index entry found stale."
  @spec unindex(table(), c(), binary(), integer(), non_neg_integer()) :: true
  def unindex(t, c, group, due, seq), do: :ets.delete(t, {:due, c, group, due, seq})

  @doc """
  Replaces PEL row `old` with `new` (same seq) if it is still as read, and
  moves its index entry: true if this caller changed it.
  """
  @spec replace(table(), c(), binary(), row(), row()) :: boolean()
  def replace(t, c, group, {seq, consumer, at, n, due}, {seq, consumer2, at2, n2, due2}) do
    key = {:pending, c, group, seq}
    spec = [{{key, consumer, at, n, due}, [], [{{{:const, key}, consumer2, at2, n2, due2}}]}]

    if :ets.select_replace(t, spec) == 1 do
      if due2 != due do
        :ets.insert(t, {{:due, c, group, due2, seq}})
        :ets.delete(t, {:due, c, group, due, seq})
      end

      true
    else
      false
    end
  end

  @doc """
  Removes PEL row `row` if it is still as read, counting it in `why`
  (`:lost`, `:dead` or `:acked`): true if this caller removed it.
  """
  @spec remove(table(), c(), binary(), row(), :lost | :dead | :acked) :: boolean()
  def remove(t, c, group, {seq, consumer, at, n, due}, why) do
    if take_row(t, {{:pending, c, group, seq}, consumer, at, n, due}) do
      bump(t, c, group, [{@pending, -1}, {counter(why), 1}])
      true
    else
      false
    end
  end

  defp counter(:lost), do: @lost
  defp counter(:dead), do: @dead
  defp counter(:acked), do: @acked

  @doc "Counts `n` redeliveries, or a fetch held at `max_pending` (`:held`)."
  @spec count_up(table(), c(), binary(), :redelivered | :held, non_neg_integer()) :: :ok
  def count_up(_t, _c, _group, _what, 0), do: :ok

  def count_up(t, c, group, what, n) do
    bump(t, c, group, {if(what == :held, do: @held, else: @redelivered), n})
    :ok
  end

  @doc "Pending counts by consumer."
  @spec pending_by_consumer(table(), c(), binary()) :: %{binary() => pos_integer()}
  def pending_by_consumer(t, c, group) do
    :ets.select(t, [{{{:pending, c, group, :_}, :"$1", :_, :_, :_}, [], [:"$1"]}])
    |> Enum.frequencies()
  end

  @doc "The seqs below `stop` that any group of channel `c` has pending."
  @spec pending_seqs(table(), c(), non_neg_integer()) :: MapSet.t(non_neg_integer())
  def pending_seqs(t, c, stop) do
    spec = [{{{:pending, c, :_, :"$1"}, :_, :_, :_, :_}, [{:<, :"$1", stop}], [:"$1"]}]
    MapSet.new(:ets.select(t, spec))
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

  @doc "Removes one PEL row whose entry has left the channel, counted lost."
  @spec forget(table(), c(), binary(), non_neg_integer()) :: boolean()
  def forget(t, c, group, seq) do
    if take(t, c, group, seq) do
      bump(t, c, group, [{@pending, -1}, {@lost, 1}])
      true
    else
      false
    end
  end

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
