defmodule Ringbus.Resp.GroupTable do
  @moduledoc false
  # Owns the node's consumer group table (`Ringbus.Resp.Groups.new/0`) and
  # does nothing else, so that no connection, listener or link that reads
  # and writes it takes it down with it. One per node, started with the
  # application (`Ringbus.Release.node_children/0`), after the store: a
  # store that restarts loses its channels, and this its groups with them.

  use GenServer

  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @impl true
  def init(nil) do
    Ringbus.Resp.Groups.new()
    {:ok, nil}
  end
end
