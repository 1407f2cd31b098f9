defmodule Ringbus.Store do
  @moduledoc false
  # Owns every ETS table of Ringbus and does nothing else, so that no crash of a
  # caller, subscriber or connection can take data with it. It is linked to
  # each channel's `Ringbus.Channel.Anchor` and traps exits: deleting a channel
  # stops its anchor, which closes its subscriptions; if this process stops,
  # the anchors stop with it.
  #
  # The channel directory `:ringbus_channels` maps a name to its
  # `Ringbus.Channel` handle. Callers read it directly; only create and delete
  # go through this process, which keeps them serialised.
  #
  # Callers keep the handles they used in their process dictionary
  # (`fetch/1`, documented in `Ringbus`'s moduledoc): a handle copied out of
  # ETS on every call costs a heap allocation and two references the caller's
  # GC must sweep. The cache is stamped with this store's `:atomics` version,
  # which every delete bumps, so no process uses a deleted channel's handle
  # past its next call; a restarted store has a new version array, so no
  # stamp of the old one matches. The version array is found through a
  # `:persistent_term` key that `terminate/2` erases.
  #
  # Backlog safety. A burst of create or delete calls (clients declaring their
  # channels at once) queues here. Each is handled in arrival order by
  # gen_server's plain receive; handling one does no selective receive and
  # counts no list, so the work stays linear in the backlog (`mix ringbus.bench
  # backlog --only store`). Its queue is off the heap, where the queued calls
  # take no part in its garbage collections.
  #
  # It also holds the node's delivery-time histograms
  # (`Ringbus.Channel.Delivery`), which subscriptions add to.

  use GenServer

  alias Ringbus.Channel
  alias Ringbus.Channel.{Anchor, Delivery, Producers, Ring}

  @channels :ringbus_channels
  @version {__MODULE__, :version}
  @cache {__MODULE__, :handles}
  @cache_max 256

  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts),
    do:
      GenServer.start_link(__MODULE__, :ok,
        name: __MODULE__,
        spawn_opt: [message_queue_data: :off_heap]
      )

  @doc """
  The handle of channel `name`, read from ETS by the calling process through
  its cache of handles.
  """
  @spec fetch(Channel.name()) :: {:ok, Channel.t()} | {:error, :no_channel}
  def fetch(name) do
    case :persistent_term.get(@version, nil) do
      nil -> {:error, :no_channel}
      version -> fetch(name, version, :atomics.get(version, 1))
    end
  end

  defp fetch(name, version, stamp) do
    case Process.get(@cache) do
      {^version, ^stamp, %{^name => channel}} -> {:ok, channel}
      {^version, ^stamp, handles} -> cache(name, version, stamp, handles)
      _ -> cache(name, version, stamp, %{})
    end
  end

  defp cache(name, version, stamp, handles) do
    case :ets.lookup(@channels, name) do
      [{_, channel}] ->
        handles = if map_size(handles) >= @cache_max, do: %{}, else: handles
        Process.put(@cache, {version, stamp, Map.put(handles, name, channel)})
        {:ok, channel}

      [] ->
        {:error, :no_channel}
    end
  end

  @spec create(Channel.name(), Channel.options()) :: :ok | {:error, :exists}
  # No call timeout: the work is done either way, and under a storm of exiting
  # processes the reply may take a while.
  def create(name, opts), do: GenServer.call(__MODULE__, {:create, name, opts}, :infinity)

  @spec delete(Channel.name()) :: :ok | {:error, :no_channel}
  def delete(name), do: GenServer.call(__MODULE__, {:delete, name}, :infinity)

  @doc """
  Replaces the `:replica` of replicated channel `name`'s handle (its
  members changed); cached handles are refreshed on their next use.
  """
  @spec put_replica(Channel.name(), map()) :: :ok | {:error, :no_channel}
  def put_replica(name, replica),
    do: GenServer.call(__MODULE__, {:put_replica, name, replica}, :infinity)

  @doc "Lists the names of all channels."
  @spec names() :: [Channel.name()]
  def names, do: :ets.select(@channels, [{{:"$1", :_}, [], [:"$1"]}])

  @doc "The replicated channels this store holds, as `{name, channel}`."
  @spec replicated() :: [{Channel.name(), Channel.t()}]
  def replicated,
    do: :ets.select(@channels, [{{:_, %{replica: :"$1"}}, [{:"/=", :"$1", nil}], [:"$_"]}])

  @doc """
  Up to `limit` memory channels under `max_age`, as `{name, channel}`, and a
  continuation that gives the next ones; `:"$end_of_table"` after the last.
  A channel created or deleted meanwhile may be missed or given twice.
  """
  @spec aging(pos_integer() | :ets.continuation()) ::
          {[{Channel.name(), Channel.t()}], :ets.continuation()} | :"$end_of_table"
  def aging(limit) when is_integer(limit) and limit > 0,
    do:
      :ets.select(
        @channels,
        [{{:_, %{max_age: :"$1", replica: nil}}, [{:"/=", :"$1", nil}], [:"$_"]}],
        limit
      )

  def aging(continuation), do: :ets.select(continuation)

  @impl true
  def init(:ok) do
    :ets.new(@channels, [:named_table, :set, :protected, read_concurrency: true])
    # A fresh array: handles cached from a previous store match no stamp.
    :persistent_term.put(@version, :atomics.new(1, signed: false))
    Delivery.start()
    Process.flag(:trap_exit, true)
    {:ok, nil}
  end

  @impl true
  def terminate(_reason, _state) do
    Delivery.stop()
    :persistent_term.erase(@version)
  end

  @impl true
  def handle_call({:create, name, opts}, _from, state) do
    if :ets.member(@channels, name) do
      {:reply, {:error, :exists}, state}
    else
      :ets.insert(@channels, {name, new_channel(opts)})
      {:reply, :ok, state}
    end
  end

  def handle_call({:put_replica, name, replica}, _from, state) do
    case :ets.lookup(@channels, name) do
      [{_, %{replica: old} = channel}] when old != nil ->
        :ets.insert(@channels, {name, %{channel | replica: replica}})
        bump_version()
        {:reply, :ok, state}

      _ ->
        {:reply, {:error, :no_channel}, state}
    end
  end

  def handle_call({:delete, name}, _from, state) do
    case :ets.take(@channels, name) do
      [{_, channel}] ->
        :ets.delete(channel.table)
        :ets.delete(channel.waiters)
        if channel.producers, do: :ets.delete(channel.producers)
        bump_version()
        Anchor.stop(channel.anchor, :channel_deleted)
        {:reply, :ok, state}

      [] ->
        {:reply, {:error, :no_channel}, state}
    end
  end

  @impl true
  # A deleted channel's anchor, stopped above.
  def handle_info({:EXIT, _anchor, :channel_deleted}, state), do: {:noreply, state}

  # An anchor stopped by something else: its subscriptions have closed, and
  # the channel, if it still exists, gets a new anchor for the next ones.
  def handle_info({:EXIT, pid, _reason}, state) do
    for {name, channel} <- :ets.match_object(@channels, {:_, %{anchor: pid}}) do
      :ets.insert(@channels, {name, %{channel | anchor: Anchor.start_link()}})
      bump_version()
    end

    {:noreply, state}
  end

  # A replicated channel keeps its producer tags in its Ra machine.
  defp new_channel(opts) do
    channel = Ring.new(opts)
    if channel.replica, do: channel, else: %{channel | producers: Producers.new()}
  end

  defp bump_version, do: :atomics.add(:persistent_term.get(@version), 1, 1)
end
