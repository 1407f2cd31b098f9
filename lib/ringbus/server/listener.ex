defmodule Ringbus.Server.Listener do
  @moduledoc false
  # Opens the listening socket and owns it; acceptors share it. If this
  # process dies the socket closes, and the supervisor (rest_for_one) restarts
  # the acceptors after a new listener.
  #
  # It also holds the server's accept counters (made by `Ringbus.Server` and
  # given here in the child spec), which the acceptors bump and
  # `Ringbus.Server.stats/1` reads.

  use GenServer

  alias Ringbus.Server.Transport

  @accepted 1
  @accept_errors 2
  @refused 3

  @type info :: %{
          socket: {Transport.kind(), term()},
          port: :inet.port_number(),
          counters: :counters.counters_ref()
        }

  def child_spec({config, port, counters, protocol}) do
    %{
      id: {__MODULE__, protocol},
      start: {GenServer, :start_link, [__MODULE__, {config, port, counters}]}
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

  @doc "Counters for `count/2` and `counts/1`."
  @spec new_counters() :: :counters.counters_ref()
  def new_counters, do: :counters.new(3, [:write_concurrency])

  @doc "Counts one accepted connection, accept error or refused connection."
  @spec count(:counters.counters_ref(), :accepted | :accept_errors | :refused) :: :ok
  def count(counters, :accepted), do: :counters.add(counters, @accepted, 1)
  def count(counters, :accept_errors), do: :counters.add(counters, @accept_errors, 1)
  def count(counters, :refused), do: :counters.add(counters, @refused, 1)

  @doc "What the counters hold."
  @spec counts(:counters.counters_ref()) :: %{atom() => non_neg_integer()}
  def counts(counters) do
    %{
      accepted: :counters.get(counters, @accepted),
      accept_errors: :counters.get(counters, @accept_errors),
      refused: :counters.get(counters, @refused)
    }
  end

  @impl true
  def init({config, port, counters}) do
    case Transport.listen(config, port) do
      {:ok, listen} -> {:ok, %{socket: listen, port: Transport.port(listen), counters: counters}}
      {:error, reason} -> {:stop, {:listen_failed, reason}}
    end
  end

  @impl true
  def handle_call(:info, _from, info), do: {:reply, info, info}

  @impl true
  def terminate(_reason, %{socket: listen}), do: Transport.close_listener(listen)
end
