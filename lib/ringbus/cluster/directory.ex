defmodule Ringbus.Cluster.Directory do
  @moduledoc false
  # Where every channel lives: the protocol (claims, votes, announces,
  # healing) is in `Ringbus.Cluster.Directory.Core`, pure; this process
  # runs it. It owns the table `:ringbus_cluster_directory`, which holds what
  # the other nodes said they home, `{name, home, opts, stamp, incarnation}`,
  # and callers read directly to resolve a name; it serialises every create
  # and delete of this node and every directory message from the others,
  # hands each to the core with what the core needs to know (the links'
  # states, the store), and carries out the effects the core returns: sends
  # through the links, replies, timers, the table and the store.

  use GenServer

  alias Ringbus.Store
  alias Ringbus.Cluster.Links
  alias Ringbus.Cluster.Directory.Core

  @table :ringbus_cluster_directory
  @leaders :ringbus_cluster_leaders

  @doc false
  def child_spec(config),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [config]}}

  @spec start_link(Ringbus.Cluster.Config.t()) :: GenServer.on_start()
  def start_link(config),
    do:
      GenServer.start_link(__MODULE__, config,
        name: __MODULE__,
        spawn_opt: [message_queue_data: :off_heap]
      )

  ## Callers

  @doc "The node that homes `name` if it is another one, by a read of the table."
  @spec remote_home(term()) :: {:ok, node()} | :error
  def remote_home(name) do
    {:ok, :ets.lookup_element(@table, name, 2)}
  rescue
    ArgumentError -> :error
  end

  @doc """
  The node that homes `name` if it is another one, and the options it was
  announced with (a replicated channel's have `:members`), by a read of
  the table.
  """
  @spec remote_entry(term()) :: {:ok, node(), keyword()} | :error
  def remote_entry(name) do
    case :ets.lookup(@table, name) do
      [{_, home, opts, _stamp, _incarnation}] -> {:ok, home, opts}
      [] -> :error
    end
  rescue
    ArgumentError -> :error
  end

  @doc """
  The leader of replicated channel `name` as one of its members last said
  (`put_leader/2`), or nil.
  """
  @spec leader(term()) :: node() | nil
  def leader(name) do
    :ets.lookup_element(@leaders, name, 2)
  rescue
    ArgumentError -> nil
  end

  @doc "Remembers `leader` as the leader of replicated channel `name` (of another node)."
  @spec put_leader(term(), node()) :: :ok
  def put_leader(name, leader) do
    :ets.insert(@leaders, {name, leader})
    :ok
  rescue
    # The cluster layer is restarting.
    ArgumentError -> :ok
  end

  @doc """
  Claims `name` cluster-wide for a replicated channel: `{:ok, stamp}` once
  every node up granted it, after which this node holds the claim until
  `claimed/4`.
  """
  @spec claim(term()) :: {:ok, term()} | {:error, :exists | :node_busy}
  def claim(name), do: GenServer.call(__MODULE__, {:claim, name}, :infinity)

  @doc """
  Settles a claim of `claim/1`: with `:ok` the replicated channel is
  announced (its `opts` with `:members`), else the claim is released and
  `result` returned.
  """
  @spec claimed(term(), keyword(), term(), term()) :: term()
  def claimed(name, opts, stamp, result),
    do: GenServer.call(__MODULE__, {:claimed, name, opts, stamp, result}, :infinity)

  @doc "Tells every node the options of replicated channel `name` (of `stamp`): its new members."
  @spec announce(term(), keyword(), term()) :: :ok
  def announce(name, opts, stamp),
    do: GenServer.call(__MODULE__, {:announce, name, opts, stamp}, :infinity)

  @doc "Tells every node that replicated channel `name` (of `stamp`) is deleted."
  @spec deleted(term(), term()) :: :ok
  def deleted(name, stamp), do: GenServer.call(__MODULE__, {:deleted, name, stamp}, :infinity)

  @doc "Creates channel `name` here; see the moduledoc for how."
  @spec create(term(), keyword()) :: :ok | {:error, :exists | :node_busy}
  def create(name, opts), do: GenServer.call(__MODULE__, {:create, name, opts}, :infinity)

  @doc "Deletes channel `name`, homed here."
  @spec delete(term()) :: :ok | {:error, :no_channel}
  def delete(name), do: GenServer.call(__MODULE__, {:delete, name}, :infinity)

  @doc "Drops the entries of `node`, which is not connected; see `Ringbus.Cluster.forget_node/1`."
  @spec forget(node()) :: {:ok, non_neg_integer()} | {:error, :node_up}
  def forget(node), do: GenServer.call(__MODULE__, {:forget, node})

  @doc "The channels of other nodes this node knows of, `{name, home}`, by a read of the table."
  @spec entries() :: [{term(), node()}]
  def entries do
    :ets.select(@table, [{{:"$1", :"$2", :_, :_, :_}, [], [{{:"$1", :"$2"}}]}])
  rescue
    ArgumentError -> []
  end

  @doc "The channels of other nodes, by home."
  @spec remote_channels() :: %{node() => non_neg_integer()}
  def remote_channels do
    @table
    |> :ets.select([{{:_, :"$1", :_, :_, :_}, [], [:"$1"]}])
    |> Enum.frequencies()
  rescue
    ArgumentError -> %{}
  end

  ## Links

  @doc "A create or delete another node asked for; the answer goes to `link`."
  @spec remote(pid(), reference(), term()) :: :ok
  def remote(link, ref, request), do: notify({:ringbus_remote, link, ref, request})

  @doc "A directory message from `node`."
  @spec peer(node(), term()) :: :ok
  def peer(node, message), do: notify({:ringbus_dir, node, message})

  @doc "The link to `node` is up (or has room again): send it our channels."
  @spec link_up(node()) :: :ok
  def link_up(node), do: notify({:ringbus_link_up, node})

  @doc "The link to `node` has stopped."
  @spec link_down(node()) :: :ok
  def link_down(node), do: notify({:ringbus_link_down, node})

  # A link outlives the directory for a moment when the cluster layer stops.
  defp notify(message) do
    if pid = Process.whereis(__MODULE__), do: send(pid, message)
    :ok
  end

  ## Process

  @impl true
  def init(config) do
    :ets.new(@table, [:named_table, :protected, :set, read_concurrency: true])
    # Leaders of replicated channels as their members last said (the router's).
    :ets.new(@leaders, [:named_table, :public, :set, read_concurrency: true])
    incarnation = {System.os_time(:microsecond), :erlang.unique_integer()}
    # core: the directory's state; timers: create id => timer reference;
    # claimers: monitor => {name, stamp, from} of each `claim/1` caller
    # until it settles the claim (`claimed/4`) or is refused one.
    {:ok, %{core: Core.new(incarnation, config.create_timeout), timers: %{}, claimers: %{}}}
  end

  @impl true
  def handle_call({:create, name, opts}, from, state),
    do: {:noreply, create(state, name, opts, {:call, from})}

  # A claim is held for its caller until it calls `claimed/4`: should it die
  # first, the claim is given up, or it would keep the name from every create.
  def handle_call({:claim, name}, {pid, _} = from, state) do
    stamp = {System.os_time(:microsecond), node()}
    claimers = Map.put(state.claimers, Process.monitor(pid), {name, stamp, from})

    {:noreply,
     run(%{state | claimers: claimers}, {:claim, name, {:call, from}, make_ref(), stamp})}
  end

  def handle_call({:claimed, name, opts, stamp, result}, from, state) do
    state = settled(state, fn {n, s, _from} -> n == name and s == stamp end)
    {:noreply, run(state, {:claimed, name, opts, stamp, {:call, from}, result})}
  end

  def handle_call({:announce, name, opts, stamp}, from, state),
    do: {:noreply, run(state, {:announce, name, opts, stamp, {:call, from}})}

  def handle_call({:deleted, name, stamp}, from, state),
    do: {:noreply, run(state, {:deleted, name, stamp, {:call, from}})}

  def handle_call({:forget, node}, from, state),
    do: {:noreply, run(state, {:forget, node, node in Node.list(), {:call, from}})}

  def handle_call({:delete, name}, from, state),
    do: {:noreply, run(state, {:delete, name, {:call, from}, Store.delete(name)})}

  @impl true
  def handle_info({:ringbus_remote, link, ref, {:create, name, opts}}, state),
    do: {:noreply, create(state, name, opts, {:link, link, ref})}

  def handle_info({:ringbus_remote, link, ref, {:delete, name}}, state),
    do: {:noreply, run(state, {:delete, name, {:link, link, ref}, Store.delete(name)})}

  def handle_info({:ringbus_dir, node, message}, state),
    do: {:noreply, run(state, {:peer, node, message})}

  def handle_info({:ringbus_link_up, node}, state), do: {:noreply, run(state, {:link_up, node})}

  def handle_info({:ringbus_link_down, node}, state),
    do: {:noreply, run(state, {:link_down, node})}

  def handle_info({:DOWN, monitor, :process, _pid, _reason}, state) do
    case Map.pop(state.claimers, monitor) do
      {{name, stamp, _from}, claimers} ->
        {:noreply, run(%{state | claimers: claimers}, {:abandon, name, stamp})}

      {nil, _} ->
        {:noreply, state}
    end
  end

  def handle_info({:create_timeout, id}, state) do
    state = %{state | timers: Map.delete(state.timers, id)}
    {:noreply, run(state, {:timeout, id})}
  end

  defp create(state, name, opts, reply_to) do
    stamp = {System.os_time(:microsecond), node()}
    run(state, {:create, name, opts, reply_to, make_ref(), stamp})
  end

  # The replicated channels of this node's store, as its syncs list them.
  defp replicated do
    for {name, %{replica: %{members: members} = replica} = channel} <- Store.replicated() do
      opts = [
        capacity: channel.capacity,
        overflow: channel.overflow,
        max_bytes: channel.max_bytes
      ]

      {name, [members: for({_, n} <- members, do: n)] ++ opts,
       Map.get(replica, :stamp) || {0, node()}}
    end
  end

  # Stops watching the claimers `settled?` picks.
  defp settled(state, settled?) do
    {done, claimers} = Enum.split_with(state.claimers, fn {_monitor, c} -> settled?.(c) end)
    Enum.each(done, fn {monitor, _} -> Process.demonitor(monitor, [:flush]) end)
    %{state | claimers: Map.new(claimers)}
  end

  ## Effects

  defp run(state, event) do
    world = %{
      links: Links.states(),
      stored?: &match?({:ok, _}, Store.fetch(&1)),
      replicated: &replicated/0
    }

    {core, effects} = Core.handle(state.core, event, world)
    Enum.reduce(effects, %{state | core: core}, &execute/2)
  end

  defp execute({:send, node, message}, state) do
    Links.cast(node, {:dir, message})
    state
  end

  defp execute({:reply, {:call, from}, answer}, state) do
    GenServer.reply(from, answer)
    # A claim refused is not held: its caller has nothing to settle.
    if match?({:error, _}, answer),
      do: settled(state, &(elem(&1, 2) == from)),
      else: state
  end

  defp execute({:reply, {:link, link, ref}, answer}, state) do
    send(link, {:ringbus_reply, ref, answer})
    state
  end

  defp execute({:start_timer, id, ms}, state) do
    timer = Process.send_after(self(), {:create_timeout, id}, ms)
    %{state | timers: Map.put(state.timers, id, timer)}
  end

  defp execute({:cancel_timer, id}, state) do
    {timer, timers} = Map.pop(state.timers, id)
    if timer, do: Process.cancel_timer(timer)
    %{state | timers: timers}
  end

  defp execute({:put_entry, entry}, state) do
    :ets.insert(@table, entry)
    state
  end

  defp execute({:drop_entry, name}, state) do
    :ets.delete(@table, name)
    :ets.delete(@leaders, name)
    state
  end

  # The core hears the store's answer before the effects that follow.
  defp execute({:create_channel, name, opts, purpose}, state),
    do: run(state, {:created, name, opts, purpose, Store.create(name, opts)})

  defp execute({:delete_channel, name}, state) do
    Store.delete(name)
    state
  end
end
