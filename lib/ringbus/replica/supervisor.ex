defmodule Ringbus.Replica.Supervisor do
  @moduledoc false
  # The replica layer of this node (see lib/ringbus/replica/README.md):
  #
  # Ringbus.Replica.Supervisor (rest_for_one)
  # ├── Ra system :ringbus              ra_system_sup: its WAL, segment
  # │                                   writer and servers, in the data dir
  # ├── Ringbus.Replica.Writers         DynamicSupervisor: a Writer per
  # │                                   replicated channel of this node
  # └── Ringbus.Replica.Catalogue       the replicated channels of this node,
  #                                     in the data dir; restores them at start
  #
  # The Ra system is ours rather than Ra's (`:ra_system.start/1` puts it
  # under Ra's own supervisor): it stops with Ringbus, and when it restarts
  # the writers and the catalogue restart after it, which restarts each
  # channel's server from its log.

  use Supervisor

  alias Ringbus.Replica.{Catalogue, Config}

  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(_opts), do: Supervisor.start_link(__MODULE__, :ok, name: __MODULE__)

  @impl true
  def init(:ok) do
    # Ra tells of every WAL file, segment and election at info and debug:
    # an operator's log keeps its warnings and errors.
    :ok = :logger.set_application_level(:ra, :warning)
    dir = Config.data_dir()
    File.mkdir_p!(dir)
    config = Config.ra_system(dir)

    # What `:ra_system.start/1` does before it starts the same supervisor.
    :ok = :ra_system.store(config)

    children = [
      %{id: :ra_system, start: {:ra_system_sup, :start_link, [config]}, type: :supervisor},
      {DynamicSupervisor, name: Ringbus.Replica.Writers, strategy: :one_for_one},
      {Catalogue, dir}
    ]

    Supervisor.init(children, strategy: :rest_for_one)
  end
end
