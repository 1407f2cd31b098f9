defmodule Ringbus.Replica.Supervisor do
  @moduledoc false
  # The replica layer of this node (see lib/ringbus/replica/README.md):
  #
  # Ringbus.Replica.Supervisor (rest_for_one, registered :ringbus_replicas)
  # ├── Ra system :ringbus              ra_system_sup (RaSystem): its WAL, segment
  # │                                   writer and servers, in the data dir
  # ├── Ringbus.Replica.Writers         DynamicSupervisor: a Writer per
  # │                                   replicated channel of this node
  # ├── Ringbus.Replica.Catalogue       the replicated channels of this node,
  # │                                   in the data dir; restores them at start
  # └── Ringbus.Replica.Reporter        each member's figures, this node's and
  #                                     the other members' reports, in ETS
  #
  # The Ra system is ours rather than Ra's (`:ra_system.start/1` puts it
  # under Ra's own supervisor): it stops with Ringbus, and when it restarts
  # the writers and the catalogue restart after it, which restarts each
  # channel's server from its log.
  #
  # It starts only on a node that has replicated channels
  # (`Ringbus.Replica.RaSystem`).

  use Supervisor

  alias Ringbus.Replica.{Catalogue, Config, RaSystem, Reporter}

  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(_opts),
    do: Supervisor.start_link(__MODULE__, :ok, name: Config.supervisor_name())

  @impl true
  def init(:ok) do
    # Ra tells of every WAL file, segment and election at info and debug:
    # an operator's log keeps its warnings and errors.
    :ok = :logger.set_application_level(:ra, :warning)
    dir = Config.data_dir()

    children = [
      %{id: RaSystem.child_id(), start: {RaSystem, :start_link, [dir]}, type: :supervisor},
      {DynamicSupervisor, name: Ringbus.Replica.Writers, strategy: :one_for_one},
      {Catalogue, dir},
      Reporter
    ]

    Supervisor.init(children, strategy: :rest_for_one)
  end
end
