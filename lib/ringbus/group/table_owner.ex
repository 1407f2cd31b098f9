defmodule Ringbus.Group.TableOwner do
  @moduledoc false
  # Owns the node's consumer group table (`Ringbus.Group.Table.new/0`), so
  # that no connection, listener or link that reads and writes it takes it
  # down with it, and drops the rows of a channel that is gone: the first
  # group request on a channel asks it to watch the channel's anchor
  # (`watch/2`), which stops when the channel is deleted, by any API and
  # from any node. One per node, started with the application
  # (`Ringbus.Release.node_children/0`), after the store and before the
  # replicated channels, whose machines put their groups here: a store that
  # restarts loses its channels, and this its groups with them (a memory
  # channel's; the replicated channels restart after it, and their machines
  # put their groups back from their logs).
  #
  # It also watches the owners of the Elixir API's consumers (the process
  # that fetches for each, `Ringbus.Group.Fetch`): a fetch by a new owner
  # casts `own/3` once, and when that process exits (or its node goes) the
  # consumers it still owns have their pending entries made due at once,
  # and the channel's waiting fetches woken. A RESP consumer has no owner.
  # A replicated channel's consumer (`own_logged/3`) is watched on the node
  # that sent its fetch, and its owner's exit is a request through the log.

  use GenServer

  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{Redelivery, At, Table}

  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc """
  Watches the anchor of the channel of incarnation `c`, whose rows go when
  it stops. Asks without waiting; `Table.watch/3` tells who asks.
  """
  @spec watch(Table.c(), pid()) :: :ok
  def watch(c, anchor), do: GenServer.cast(__MODULE__, {:watch, c, anchor})

  @doc """
  Watches `owner`, which fetches for consumer `{c, group, consumer}` of
  `channel`: when it exits, that consumer's pending entries are due.
  Asks without waiting; `Table.own/6` tells who asks.
  """
  @spec own(pid(), {Table.c(), binary(), binary()}, Ringbus.Channel.t()) :: :ok
  def own(owner, consumer, channel),
    do: GenServer.cast(__MODULE__, {:own, owner, consumer, channel})

  @doc """
  Watches `owner`, which fetches for consumer `{c, group, consumer}` of a
  replicated channel: when it exits, `on_exit` runs in a process of its
  own (it sends the `:orphan` request through the channel's log).
  """
  @spec own_logged(pid(), {Table.c(), binary(), binary()}, (() -> term())) :: :ok
  def own_logged(owner, consumer, on_exit),
    do: GenServer.cast(__MODULE__, {:own, owner, consumer, {:logged, on_exit}})

  # `watched`: a monitor on a channel's anchor => its incarnation; `owners`:
  # an owner => its monitor and the consumers it fetched for, with their
  # channels; `owner_refs`: a monitor on an owner => the owner.
  @impl true
  def init(nil) do
    Table.new()
    {:ok, %{watched: %{}, owners: %{}, owner_refs: %{}}}
  end

  @impl true
  def handle_cast({:watch, c, anchor}, state),
    do: {:noreply, put_in(state.watched[Process.monitor(anchor)], c)}

  def handle_cast({:own, owner, consumer, channel}, state) do
    case state.owners do
      %{^owner => {ref, consumers}} ->
        {:noreply, put_in(state.owners[owner], {ref, Map.put(consumers, consumer, channel)})}

      _ ->
        ref = Process.monitor(owner)
        state = put_in(state.owner_refs[ref], owner)
        {:noreply, put_in(state.owners[owner], {ref, %{consumer => channel}})}
    end
  end

  # Deleted, or gone before it was watched: its groups go. An anchor that
  # stopped for another reason is replaced by the store, with the channel
  # still there: the next request watches the new one.
  @impl true
  def handle_info({:DOWN, ref, :process, pid, reason}, state) do
    case Map.pop(state.owner_refs, ref) do
      {nil, _} -> {:noreply, anchor_down(state, ref, reason)}
      {^pid, refs} -> {:noreply, owner_down(%{state | owner_refs: refs}, pid)}
    end
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp anchor_down(state, ref, reason) do
    {c, watched} = Map.pop(state.watched, ref)

    cond do
      c == nil -> :ok
      reason in [:channel_deleted, :noproc] -> Table.drop(Table.table(), c)
      true -> Table.unwatch(Table.table(), c)
    end

    %{state | watched: watched}
  end

  # Each consumer it still owns (a later fetch by another process took it
  # over otherwise) has its entries due now.
  defp owner_down(state, owner) do
    {{_ref, consumers}, owners} = Map.pop(state.owners, owner)
    {t, now} = {Table.table(), At.now()}

    for {{c, group, name} = consumer, channel} <- consumers do
      case channel do
        {:logged, on_exit} ->
          spawn(on_exit)

        channel ->
          if Table.disown(t, c, group, name, owner), do: orphan(t, channel, consumer, now)
      end
    end

    %{state | owners: owners}
  end

  @doc """
  Makes a consumer's pending entries due at `now` and wakes the channel's
  waiting fetches: for its removal, or its owner's exit. Returns how many.
  """
  def orphan(t, channel, {c, group, consumer}, now) do
    n =
      Enum.count(Table.rows_of(t, c, group, consumer), fn row ->
        Table.replace(t, c, group, row, Redelivery.orphaned(row, now))
      end)

    if n > 0, do: Ring.wake_waiters(channel)
    n
  end
end
