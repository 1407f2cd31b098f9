defmodule Ringbus.Server.Listener do
  @moduledoc false
  # Opens the listening socket and owns it; acceptors share it. If this
  # process dies the socket closes, and the supervisor (rest_for_one) restarts
  # the acceptors after a new listener.
  #
  # It also holds the server's counters (`Ringbus.Server.Stats`, made by
  # `Ringbus.Server` and given here in the child spec), which the acceptors
  # and connections bump and `Ringbus.Server.stats/1` reads, and lists the
  # server in `Ringbus.Server.Directory` for as long as it listens.

  use GenServer

  alias Ringbus.Server.{Directory, Transport}

  @type info :: %{
          socket: {Transport.kind(), term()},
          port: :inet.port_number(),
          counters: :counters.counters_ref()
        }

  def start_link({config, counters}), do: GenServer.start_link(__MODULE__, {config, counters})

  @doc "The listener of the server supervisor `server`."
  @spec whereis(Supervisor.supervisor()) :: pid()
  def whereis(server) do
    {_, pid, _, _} = List.keyfind(Supervisor.which_children(server), __MODULE__, 0)
    pid
  end

  @doc "The listening socket, the port it is bound to and the accept counters."
  @spec info(pid()) :: info()
  def info(pid), do: GenServer.call(pid, :info)

  @impl true
  def init({config, counters}) do
    case Transport.listen(config) do
      {:ok, listen} ->
        port = Transport.port(listen)
        Directory.register(:binary, port, counters)
        {:ok, %{socket: listen, port: port, counters: counters}}

      {:error, reason} ->
        {:stop, {:listen_failed, reason}}
    end
  end

  @impl true
  def handle_call(:info, _from, info), do: {:reply, info, info}

  @impl true
  def terminate(_reason, %{socket: listen}), do: Transport.close_listener(listen)
end
