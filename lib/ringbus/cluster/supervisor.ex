defmodule Ringbus.Cluster.Supervisor do
  @moduledoc false
  # The cluster layer's processes, started by `Ringbus.Application` after
  # `Ringbus.Store` (`rest_for_one`: a new store has no channels, so the
  # cluster layer starts over with it, under a new incarnation):
  #
  #   Ringbus.Cluster.Supervisor (one_for_all)
  #   ├── :pg scope :ringbus_cluster       membership and link discovery
  #   ├── Ringbus.Cluster.Directory        owns the directory table; creates,
  #   │                                    deletes, directory messages
  #   ├── Ringbus.Cluster.LinkSupervisor   DynamicSupervisor, one Link per
  #   │                                    remote member (temporary)
  #   └── Ringbus.Cluster.Members          owns the links table; node and
  #                                        :pg events, reconnections, links
  #
  # `one_for_all`: the tables and the links describe one another (a link's
  # row, the directory's view of a node), so they start over together.

  use Supervisor

  alias Ringbus.Cluster.{Config, Directory, Links, Members}

  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(_opts), do: Supervisor.start_link(__MODULE__, :ok, name: __MODULE__)

  @impl true
  def init(:ok) do
    config = Config.from_env()

    children = [
      %{id: :pg, start: {:pg, :start_link, [Links.scope()]}},
      {Directory, config},
      {DynamicSupervisor, name: Ringbus.Cluster.LinkSupervisor, strategy: :one_for_one},
      {Members, config}
    ]

    Supervisor.init(children, strategy: :one_for_all)
  end
end
