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
  #
  # It starts only on a node that has replicated channels: at boot when the
  # catalogue lists some, else at the first create (`ensure_system/0`). A
  # node without them touches no data dir, so two VMs in one directory (a
  # server and a `mix run` client beside it) never share a Raft log.

  use Supervisor

  alias Ringbus.Replica.{Catalogue, Config}

  @wanted {__MODULE__, :system_wanted}

  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(_opts), do: Supervisor.start_link(__MODULE__, :ok, name: __MODULE__)

  @impl true
  def init(:ok) do
    # Ra tells of every WAL file, segment and election at info and debug:
    # an operator's log keeps its warnings and errors.
    :ok = :logger.set_application_level(:ra, :warning)
    dir = Config.data_dir()

    children = [
      %{id: :ra_system, start: {__MODULE__, :start_system, [dir]}, type: :supervisor},
      {DynamicSupervisor, name: Ringbus.Replica.Writers, strategy: :one_for_one},
      {Catalogue, dir}
    ]

    Supervisor.init(children, strategy: :rest_for_one)
  end

  @doc """
  Starts the Ra system now if it is not running (the first replicated
  channel of this node); `:ok` once it runs.
  """
  @spec ensure_system() :: :ok | {:error, term()}
  def ensure_system do
    # Set once per VM: from then on the system restarts like any child.
    unless :persistent_term.get(@wanted, false), do: :persistent_term.put(@wanted, true)

    case Supervisor.restart_child(__MODULE__, :ra_system) do
      {:ok, _pid} -> :ok
      {:error, :running} -> :ok
      {:error, reason} -> {:error, reason}
    end
  end

  @doc false
  # The Ra system's start: `:ignore` (it stays listed, not running) on a
  # node whose catalogue lists no channel, unless asked by ensure_system/0.
  def start_system(dir) do
    if Catalogue.any?(dir) or :persistent_term.get(@wanted, false) do
      File.mkdir_p!(dir)
      config = Config.ra_system(dir)
      # What `:ra_system.start/1` does before it starts the same supervisor.
      :ok = :ra_system.store(config)
      :ra_system_sup.start_link(config)
    else
      :ignore
    end
  end
end
