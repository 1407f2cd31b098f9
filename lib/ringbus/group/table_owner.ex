defmodule Ringbus.Group.TableOwner do
  @moduledoc false
  # Owns the node's consumer group table (`Ringbus.Group.Table.new/0`), so
  # that no connection, listener or link that reads and writes it takes it
  # down with it, and drops the rows of a channel that is gone: the first
  # group request on a channel asks it to watch the channel's anchor
  # (`watch/2`), which stops when the channel is deleted, by any API and
  # from any node. One per node, started with the application
  # (`Ringbus.Release.node_children/0`), after the store: a store that
  # restarts loses its channels, and this its groups with them.

  use GenServer

  alias Ringbus.Group.Table

  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc """
  Watches the anchor of the channel of incarnation `c`, whose rows go when
  it stops. Asks without waiting; `Table.watch/3` tells who asks.
  """
  @spec watch(Table.c(), pid()) :: :ok
  def watch(c, anchor), do: GenServer.cast(__MODULE__, {:watch, c, anchor})

  @impl true
  def init(nil) do
    Table.new()
    {:ok, %{}}
  end

  @impl true
  def handle_cast({:watch, c, anchor}, watched),
    do: {:noreply, Map.put(watched, Process.monitor(anchor), c)}

  # Deleted, or gone before it was watched: its groups go. An anchor that
  # stopped for another reason is replaced by the store, with the channel
  # still there: the next request watches the new one.
  @impl true
  def handle_info({:DOWN, ref, :process, _anchor, reason}, watched) do
    {c, watched} = Map.pop(watched, ref)

    if reason in [:channel_deleted, :noproc],
      do: Table.drop(Table.table(), c),
      else: Table.unwatch(Table.table(), c)

    {:noreply, watched}
  end
end
