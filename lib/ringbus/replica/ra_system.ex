defmodule Ringbus.Replica.RaSystem do
  @moduledoc false
  # Ringbus's Ra system, started only on a node that has replicated
  # channels: at boot when the catalogue lists some, else at the first
  # create (`ensure/0`). A node without them touches no data dir, so two VMs
  # in one directory (a server and a `mix run` client beside it) never share
  # a Raft log. It is a child of the replica layer's supervisor that stays
  # listed, not running, until it is wanted; from then on it restarts like
  # any child.

  alias Ringbus.Replica.Config

  @wanted {__MODULE__, :wanted}

  @doc "Its id among the replica layer's children."
  @spec child_id() :: atom()
  def child_id, do: :ra_system

  @doc false
  # The child's start: `:ignore` while no channel needs the system.
  def start_link(dir) do
    if listed?(dir) or :persistent_term.get(@wanted, false) do
      File.mkdir_p!(dir)
      config = Config.ra_system(dir)
      # What `:ra_system.start/1` does before it starts the same supervisor.
      :ok = :ra_system.store(config)
      :ra_system_sup.start_link(config)
    else
      :ignore
    end
  end

  @doc "Starts the system now if it is not running; `:ok` once it runs."
  @spec ensure() :: :ok | {:error, term()}
  def ensure do
    # Set once per VM.
    unless :persistent_term.get(@wanted, false), do: :persistent_term.put(@wanted, true)

    case Supervisor.restart_child(Config.supervisor_name(), child_id()) do
      {:ok, _pid} -> :ok
      {:error, :running} -> :ok
      {:error, reason} -> {:error, reason}
    end
  end

  # Whether the catalogue (`Ringbus.Replica.Catalogue`) lists a channel.
  defp listed?(dir) do
    case File.read(Config.catalogue_file(dir)) do
      {:ok, binary} -> :erlang.binary_to_term(binary) != %{}
      {:error, _} -> false
    end
  end
end
