defmodule Ringbus.Server.Listener do
  @moduledoc false
  # Opens the listening socket and owns it; acceptors share it. If this
  # process dies the socket closes, and the supervisor (rest_for_one) restarts
  # the acceptors after a new listener.
  #
  # It also holds its protocol's counters (`Ringbus.Server.Stats`, made by
  # `Ringbus.Server` and given here in the config of the child spec), which
  # the acceptors and connections bump and `Ringbus.Server.stats/2` reads,
  # and lists the listener in `Ringbus.Server.Directory` for as long as it
  # listens. It logs the connections refused at `max_connections`: told of
  # the first by an acceptor (`Ringbus.Server.Stats.refused/2`), it waits a
  # second and logs how many there were, so a flood is a line a second.

  use GenServer

  alias Ringbus.Server.{Directory, Protocol, Stats, Transport}

  @refusals_every 1_000

  @type info :: %{
          socket: Transport.listener(),
          port: :inet.port_number(),
          counters: :counters.counters_ref()
        }

  def child_spec({config, %Protocol{name: name} = protocol}) do
    %{
      id: {__MODULE__, name},
      start: {GenServer, :start_link, [__MODULE__, {config, protocol}]}
    }
  end

  @doc "The listener of `protocol` in the server supervisor `server`."
  @spec whereis(Supervisor.supervisor(), atom()) :: pid()
  def whereis(server, protocol) do
    {_, pid, _, _} = List.keyfind(Supervisor.which_children(server), {__MODULE__, protocol}, 0)
    pid
  end

  @doc "The listening socket, the port it is bound to and the accept counters."
  @spec info(pid()) :: info()
  def info(pid), do: GenServer.call(pid, :info)

  @impl true
  def init({config, %Protocol{name: name, port: port, figures: figures}}) do
    case Transport.listen(config, port) do
      {:ok, listen} ->
        port = Transport.port(listen)
        Directory.register(name, port, config.counters, figures)

        {:ok,
         %{
           socket: listen,
           port: port,
           counters: config.counters,
           where: "#{:inet.ntoa(config.host)}:#{port} (#{name})",
           max_connections: config.max_connections,
           refused_logged: Stats.refusals_reset(config.counters),
           refusals_timer: nil
         }}

      {:error, reason} ->
        {:stop, {:listen_failed, reason}}
    end
  end

  @impl true
  def handle_call(:info, _from, state),
    do: {:reply, Map.take(state, [:socket, :port, :counters]), state}

  @impl true
  def handle_info(:refused, %{refusals_timer: nil} = state),
    do:
      {:noreply,
       %{state | refusals_timer: Process.send_after(self(), :log_refused, @refusals_every)}}

  def handle_info(:refused, state), do: {:noreply, state}

  def handle_info(:log_refused, state) do
    {logged, more?} =
      Stats.refused_since(
        state.counters,
        state.refused_logged,
        state.where,
        state.max_connections
      )

    timer = if more?, do: Process.send_after(self(), :log_refused, @refusals_every)
    {:noreply, %{state | refused_logged: logged, refusals_timer: timer}}
  end

  @impl true
  def terminate(_reason, %{socket: listen}), do: Transport.close_listener(listen)
end
