defmodule Ringbus.Server.ConnectionSupervisor do
  @moduledoc false
  # The supervisor of one protocol's connections: a DynamicSupervisor whose
  # `max_children` is the server's `:max_connections`, so that an acceptor
  # learns from `start_child/2` that the listener is full.

  alias Ringbus.Server.{Connection, Protocol}

  @spec child_spec({Ringbus.Server.Config.t(), atom()}) :: Supervisor.child_spec()
  def child_spec({config, protocol}) do
    %{
      id: {__MODULE__, protocol},
      start: {__MODULE__, :start_link, [config]},
      type: :supervisor
    }
  end

  @spec start_link(Ringbus.Server.Config.t()) :: Supervisor.on_start()
  def start_link(config) do
    DynamicSupervisor.start_link(strategy: :one_for_one, max_children: config.max_connections)
  end

  @doc "The connection supervisor of `protocol` in the server supervisor `server`."
  @spec whereis(Supervisor.supervisor(), atom()) :: pid()
  def whereis(server, protocol) do
    {_, pid, _, _} = List.keyfind(Supervisor.which_children(server), {__MODULE__, protocol}, 0)
    pid
  end

  @doc "Starts a connection process of `protocol` for a socket not yet handed over."
  @spec start_connection(pid(), Protocol.t(), Ringbus.Server.Config.t()) ::
          {:ok, pid()} | {:error, :max_children | term()}
  def start_connection(sup, %Protocol{} = protocol, config) do
    spec = Supervisor.child_spec({Connection, protocol}, shutdown: config.shutdown_timeout)
    DynamicSupervisor.start_child(sup, spec)
  end
end
