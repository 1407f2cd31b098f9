defmodule Ringbus.Replica.Catalogue do
  @moduledoc false
  # The replicated channels this node is a member of, kept in the data dir
  # (`channels.etf`, rewritten whole and renamed into place on each create
  # and delete), so that a node that starts again knows which rings to
  # make and which Ra servers to restart from their logs. Creates and
  # deletes of members on this node go through this process, one at a time;
  # nothing on a read or write path does.
  #
  # A member is, in this order: its ring in the store (whose handle says
  # `replica`), its Ra server, its writer. The ring comes first so that the
  # machine applies every entry into it: a ring made after entries were
  # applied would count the seqs it missed as overwritten.

  use GenServer

  require Logger

  alias Ringbus.Store
  alias Ringbus.Replica.{Config, RaSystem, Writer}

  @spec start_link(Path.t()) :: GenServer.on_start()
  def start_link(dir), do: GenServer.start_link(__MODULE__, dir, name: __MODULE__)

  @doc """
  Makes this node (`node`) a member of replicated channel `name`: its
  ring, server and writer. `replica` is the handle's `:replica` map.
  """
  @spec create(node(), term(), keyword(), map(), timeout()) :: :ok | {:error, term()}
  def create(node, name, opts, replica, timeout),
    do: call(node, {:create, name, opts, replica}, timeout)

  @doc """
  Records the new membership `members` (Ra server ids) of `name` on `node`:
  in its catalogue, so a restart keeps it, and in its ring's handle.
  """
  @spec put_members(node(), term(), [{atom(), node()}], timeout()) :: :ok | {:error, term()}
  def put_members(node, name, members, timeout),
    do: call(node, {:members, name, members}, timeout)

  @doc "Removes this node's member of `name`: writer, server and its data, ring."
  @spec delete(node(), term(), timeout()) :: :ok | {:error, term()}
  def delete(node, name, timeout), do: call(node, {:delete, name}, timeout)

  # A member on another node is asked through the distribution: a create
  # or delete waits on each member, within `timeout`.
  defp call(node, request, timeout) do
    GenServer.call({__MODULE__, node}, request, timeout)
  catch
    :exit, {:timeout, _} -> {:error, :node_busy}
    :exit, _ -> {:error, :node_down}
  end

  @impl true
  def init(dir) do
    file = Config.catalogue_file(dir)
    channels = read(file)
    # One that fails stays listed, its log kept, for the next start or a
    # delete: an error here must not lose a channel.
    for {name, entry} <- channels, do: restore(name, entry)
    {:ok, %{file: file, channels: channels}}
  end

  @impl true
  def handle_call({:create, name, opts, replica}, _from, state) do
    if Map.has_key?(state.channels, name) or match?({:ok, _}, Store.fetch(name)) do
      {:reply, {:error, :exists}, state}
    else
      entry = %{opts: opts, replica: replica, uid: :ra.new_uid(Atom.to_string(replica.cluster))}

      with :ok <- RaSystem.ensure(),
           :ok <- start_member(name, entry, :new) do
        channels = Map.put(state.channels, name, entry)
        write(state.file, channels)
        {:reply, :ok, %{state | channels: channels}}
      else
        error -> {:reply, error, state}
      end
    end
  end

  def handle_call({:members, name, members}, _from, state) do
    case state.channels do
      %{^name => entry} ->
        replica = %{entry.replica | members: members}
        channels = Map.put(state.channels, name, %{entry | replica: replica})
        write(state.file, channels)
        _ = Store.put_replica(name, replica)
        {:reply, :ok, %{state | channels: channels}}

      _ ->
        {:reply, {:error, :no_channel}, state}
    end
  end

  def handle_call({:delete, name}, _from, state) do
    case Map.pop(state.channels, name) do
      {nil, _} ->
        {:reply, {:error, :no_channel}, state}

      {entry, channels} ->
        stop_member(name, entry)
        write(state.file, channels)
        {:reply, :ok, %{state | channels: channels}}
    end
  end

  defp restore(name, entry) do
    case start_member(name, entry, :restart) do
      :ok ->
        :ok

      error ->
        Logger.error(
          "ringbus: replicated channel #{inspect(name)} not restored: #{inspect(error)}"
        )

        error
    end
  end

  defp start_member(name, %{opts: opts, replica: replica} = entry, how) do
    system = Config.system()

    with :ok <- ring(name, opts, replica),
         :ok <- server(how, system, name, entry),
         {:ok, _} <- DynamicSupervisor.start_child(Ringbus.Replica.Writers, {Writer, replica}) do
      :ok
    else
      error ->
        # A new member's data goes; a restored one's stays, for next time.
        if how == :new, do: :ra.force_delete_server(system, replica.server)
        _ = Store.delete(name)
        error
    end
  end

  # A ring that outlived its server (this layer restarted, the store did
  # not) is kept: the log applies onto it again and changes nothing.
  defp ring(name, opts, replica) do
    case Store.fetch(name) do
      {:ok, %{replica: ^replica}} -> :ok
      {:ok, _other} -> {:error, :exists}
      {:error, :no_channel} -> Store.create(name, [{:replica, replica} | opts])
    end
  end

  defp server(:new, system, name, %{replica: replica} = entry) do
    # What a member of this name deleted while this node was away left.
    _ = :ra.force_delete_server(system, replica.server)
    :ra.start_server(system, server_config(name, entry))
  end

  defp server(:restart, system, name, %{replica: replica} = entry) do
    case :ra.restart_server(system, replica.server) do
      :ok ->
        elect_alone(replica)

      {:error, {:already_started, _}} ->
        :ok

      # Ra's directory of names (a dets file) lost the entry to a kill: the
      # same uid finds the same log.
      {:error, :name_not_registered} ->
        with :ok <- :ra.start_server(system, server_config(name, entry)), do: elect_alone(replica)

      error ->
        error
    end
  end

  # What `:ra.start_server/5` makes, with the uid this catalogue keeps.
  defp server_config(name, %{opts: opts, replica: replica, uid: uid}) do
    %{
      cluster_name: replica.cluster,
      id: replica.server,
      uid: uid,
      initial_members: replica.members,
      log_init_args: %{uid: uid, snapshot_interval: Config.raft()[:snapshot_interval]},
      machine: {:module, Ringbus.Replica.Machine, machine_config(name, opts)}
    }
  end

  # A member alone need not wait for its election timeout to lead again.
  defp elect_alone(%{members: [server], server: server}), do: :ra.trigger_election(server)
  defp elect_alone(_replica), do: :ok

  defp machine_config(name, opts) do
    %{
      channel: name,
      capacity: opts[:capacity],
      overflow: opts[:overflow],
      max_bytes: opts[:max_bytes],
      max_age: opts[:max_age]
    }
  end

  defp stop_member(name, %{replica: replica}) do
    case Process.whereis(replica.writer) do
      nil -> :ok
      pid -> DynamicSupervisor.terminate_child(Ringbus.Replica.Writers, pid)
    end

    _ = :ra.force_delete_server(Config.system(), replica.server)
    _ = Store.delete(name)
    :ok
  end

  defp read(file) do
    case File.read(file) do
      {:ok, binary} -> :erlang.binary_to_term(binary)
      {:error, :enoent} -> %{}
    end
  end

  defp write(file, channels) do
    tmp = file <> ".tmp"
    File.write!(tmp, :erlang.term_to_binary(channels), [:sync])
    File.rename!(tmp, file)
  end
end
