defmodule Ringbus.Cluster.Members do
  @moduledoc false
  # Who is in the cluster, and one link to each of them.
  #
  # A member is a node whose cluster layer has joined the `:pg` group
  # `Links.members_group()` in the scope `Links.scope()`; `:pg` tells this
  # process of every join and leave (`:pg.monitor_scope/1`), and
  # `:net_kernel.monitor_nodes/2` of every node that goes down, with the
  # reason. For each member it keeps one `Ringbus.Cluster.Link` running
  # under `Ringbus.Cluster.LinkSupervisor`, and tells it the pid of its peer,
  # the link on the other node that talks to this one (the members of
  # `Links.group(node())`).
  #
  # It keeps connected to the nodes it was told to join and to every member
  # it has seen: every `reconnect_interval` ms (while there are any) it
  # starts a connection attempt to each that is not connected. `Node.connect/1` to a silent node waits
  # up to `net_setuptime` (7 s), so each attempt runs in a process of its
  # own that nobody waits on, one per node at a time. Nodes that join
  # through one member meet the others through `global`'s fully connected
  # network (`-connect_all`, the default).
  #
  # It owns the links table (`Ringbus.Cluster.Links`).
  #
  # It logs one line per member that joins (info; notice when a node seen
  # before rejoins, after a restart or a partition) and one per member that
  # leaves (warning, with the nodedown reason).

  use GenServer

  require Logger

  alias Ringbus.Cluster.{Link, Links, Member}

  @link_supervisor Ringbus.Cluster.LinkSupervisor
  @restart_after 100

  @doc false
  def child_spec(config), do: %{id: __MODULE__, start: {__MODULE__, :start_link, [config]}}

  @spec start_link(Ringbus.Cluster.Config.t()) :: GenServer.on_start()
  def start_link(config), do: GenServer.start_link(__MODULE__, config, name: __MODULE__)

  @doc "Adds nodes to keep connected to, and tries them now."
  @spec join([node()]) :: :ok
  def join(nodes), do: GenServer.call(__MODULE__, {:join, nodes})

  @doc "This node and the members connected now."
  @spec members() :: [node()]
  def members do
    others = for pid <- :pg.get_members(Links.scope(), Links.members_group()), do: node(pid)
    Enum.uniq([node() | Enum.sort(others -- [node()])])
  end

  @impl true
  def init(config) do
    Links.new_table()
    :ok = :net_kernel.monitor_nodes(true, %{node_type: :visible, nodedown_reason: true})
    {ref, groups} = :pg.monitor_scope(Links.scope())
    # A process of its own joins the group (see `Member` why).
    Member.start_link()

    state = %{
      config: config,
      pg: ref,
      join: MapSet.new(config.join),
      seen: MapSet.new(),
      # the members now, to log each join and leave once
      present: MapSet.new(),
      # node => {link pid, monitor}
      links: %{},
      # node => the pid of its link to this node
      peers: %{},
      # node => the process trying to connect to it
      attempts: %{},
      ticking?: false
    }

    state = Enum.reduce(groups, state, fn {group, pids}, state -> joined(state, group, pids) end)
    {:ok, tick(reconnect(state))}
  end

  @impl true
  def handle_call({:join, nodes}, _from, state) do
    state = %{state | join: MapSet.union(state.join, MapSet.new(nodes))}
    {:reply, :ok, tick(reconnect(state))}
  end

  @impl true
  def handle_info({ref, :join, group, pids}, %{pg: ref} = state),
    do: {:noreply, tick(joined(state, group, pids))}

  def handle_info({ref, :leave, group, pids}, %{pg: ref} = state),
    do: {:noreply, left(state, group, pids)}

  def handle_info({:nodedown, node, info}, state) do
    reason = info[:nodedown_reason]
    state = gone(%{state | peers: Map.delete(state.peers, node)}, node, inspect(reason))
    tell(state, node, {:ringbus_link_down, {:node_down, reason}})
    {:noreply, state}
  end

  def handle_info({:nodeup, _node, _info}, state), do: {:noreply, state}

  def handle_info({:DOWN, monitor, :process, _pid, _reason}, state) do
    case Enum.find(state.links, fn {_node, {_pid, m}} -> m == monitor end) do
      {node, _} ->
        counters = Links.counters(node)
        Links.put(node, nil, counters, state.config)
        Links.set_state(counters, :down)
        # A member still connected gets a new link; one that went down, when
        # it is back.
        if node in Node.list(),
          do: Process.send_after(self(), {:ensure_link, node}, @restart_after)

        {:noreply, %{state | links: Map.delete(state.links, node)}}

      nil ->
        {:noreply,
         %{state | attempts: Map.reject(state.attempts, fn {_, {_, m}} -> m == monitor end)}}
    end
  end

  def handle_info({:ensure_link, node}, state) do
    if member?(node), do: {:noreply, ensure_link(state, node)}, else: {:noreply, state}
  end

  def handle_info(:reconnect, state),
    do: {:noreply, tick(reconnect(%{state | ticking?: false}))}

  def handle_info(_other, state), do: {:noreply, state}

  ## Membership

  # Every node's cluster layer joins the members group; every link joins
  # the group of the node it talks to, so the links that talk to this node
  # are the members of `Links.group(node())`.
  defp joined(state, group, pids) do
    others = for pid <- pids, node(pid) != node(), do: pid

    cond do
      group == Links.members_group() ->
        Enum.reduce(others, state, fn pid, state ->
          state |> arrived(node(pid)) |> ensure_link(node(pid))
        end)

      group == Links.group(node()) ->
        Enum.reduce(others, state, fn pid, state ->
          state = %{state | peers: Map.put(state.peers, node(pid), pid)}
          state = ensure_link(state, node(pid))
          tell(state, node(pid), {:ringbus_link_peer, pid})
          state
        end)

      true ->
        state
    end
  end

  # A member whose cluster layer stopped while its node stays connected; one
  # that went down is logged at its nodedown, with the reason.
  defp left(state, group, pids) do
    cond do
      group == Links.members_group() ->
        connected = Node.list()

        Enum.reduce(pids, state, fn pid, state ->
          if node(pid) in connected,
            do: gone(state, node(pid), "its Ringbus stopped"),
            else: state
        end)

      group == Links.group(node()) ->
        peer_left(state, pids)

      true ->
        state
    end
  end

  defp peer_left(state, pids) do
    Enum.reduce(pids, state, fn pid, state ->
      node = node(pid)

      if state.peers[node] == pid do
        tell(state, node, {:ringbus_link_down, :peer_left})
        %{state | peers: Map.delete(state.peers, node)}
      else
        state
      end
    end)
  end

  defp arrived(state, node) do
    cond do
      MapSet.member?(state.present, node) ->
        :ok

      MapSet.member?(state.seen, node) ->
        Logger.notice("Ringbus cluster member #{node} rejoined")

      true ->
        Logger.info("Ringbus cluster member #{node} joined")
    end

    %{state | seen: MapSet.put(state.seen, node), present: MapSet.put(state.present, node)}
  end

  defp gone(state, node, why) do
    if MapSet.member?(state.present, node) do
      Logger.warning("Ringbus cluster member #{node} left: #{why}")
      %{state | present: MapSet.delete(state.present, node)}
    else
      state
    end
  end

  defp member?(node) do
    Enum.any?(:pg.get_members(Links.scope(), Links.members_group()), &(node(&1) == node))
  end

  defp ensure_link(state, node) do
    if Map.has_key?(state.links, node) do
      state
    else
      counters = Links.counters(node)
      args = %{node: node, counters: counters, config: state.config}
      {:ok, pid} = DynamicSupervisor.start_child(@link_supervisor, {Link, args})
      if peer = state.peers[node], do: send(pid, {:ringbus_link_peer, peer})
      %{state | links: Map.put(state.links, node, {pid, Process.monitor(pid)})}
    end
  end

  defp tell(state, node, message) do
    case state.links do
      %{^node => {pid, _}} -> send(pid, message)
      _ -> :ok
    end
  end

  ## Connections

  # The reconnection timer runs while there is a node to keep connected to.
  defp tick(%{ticking?: false} = state) do
    if MapSet.size(state.join) + MapSet.size(state.seen) > 0 do
      Process.send_after(self(), :reconnect, state.config.reconnect_interval)
      %{state | ticking?: true}
    else
      state
    end
  end

  defp tick(state), do: state

  defp reconnect(state) do
    if Node.alive?() do
      connected = MapSet.new(Node.list())

      state.join
      |> MapSet.union(state.seen)
      |> Enum.reject(
        &(&1 == node() or MapSet.member?(connected, &1) or Map.has_key?(state.attempts, &1))
      )
      |> Enum.reduce(state, fn node, state ->
        attempt = spawn_monitor(fn -> Node.connect(node) end)
        %{state | attempts: Map.put(state.attempts, node, attempt)}
      end)
    else
      state
    end
  end
end
