defmodule Ringbus.Test.Internals do
  @moduledoc """
  The internal contracts that tests reach into, in one place: a subscription
  handle is `{pid, ref}`, a channel name resolves to its `Ringbus.Channel`
  handle through `Ringbus.Store.fetch/1`, a server's acceptors are the
  children of its `{:acceptors, protocol}` supervisor, and this node's
  cluster member is its pid in the `:pg` members group.
  """

  @doc "The process behind a subscription handle."
  def subscription_pid({pid, ref}) when is_pid(pid) and is_reference(ref), do: pid

  @doc "The handle of an existing channel."
  def channel!(name) do
    {:ok, channel} = Ringbus.Store.fetch(name)
    channel
  end

  @doc """
  Creates a channel of a fresh name with `opts`, deleted when the calling
  test ends, and returns its handle.
  """
  def temp_channel!(opts) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    ExUnit.Callbacks.on_exit(fn -> Ringbus.delete(name) end)
    channel!(name)
  end

  @doc "The acceptor processes of `server`'s listener for `protocol`."
  def acceptors(server, protocol \\ :binary) do
    {_, sup, _, _} = List.keyfind(Supervisor.which_children(server), {:acceptors, protocol}, 0)
    for {_, pid, _, _} <- Supervisor.which_children(sup), do: pid
  end

  @doc "The process that stands for this node in the cluster's members group."
  def cluster_member do
    alias Ringbus.Cluster.Links

    [pid] =
      for pid <- :pg.get_members(Links.scope(), Links.members_group()),
          node(pid) == node(),
          do: pid

    pid
  end

  @doc "The handle of a channel, or `{:error, :no_channel}`."
  def channel(name), do: Ringbus.Store.fetch(name)

  @doc "The registered name of replicated channel `name`'s Raft server on this node."
  def ra_server(name) do
    {:ok, %{replica: %{server: {local, _node}}}} = Ringbus.Store.fetch(name)
    local
  end

  @doc """
  The index of the newest snapshot of replicated channel `name`'s Raft
  member on this node, from Ra's metrics table (refreshed on Ra's tick,
  every second); 0 when there is none.
  """
  def snapshot_index(name) do
    {:ok, %{replica: %{server: {local, _node}}}} = Ringbus.Store.fetch(name)

    case :ets.lookup(:ra_metrics, local) do
      [{_, _term, index, _applied, _commit, _written, _latency}] when is_integer(index) -> index
      _ -> 0
    end
  end
end
