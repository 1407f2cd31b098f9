defmodule Ringbus.Server.Acceptor do
  @moduledoc false
  # Accepts connections in a loop and hands each socket to a new connection
  # process. Accept errors are sorted:
  #
  #   :closed                      the listener is gone: stop
  #   :emfile, :enfile, :enobufs   out of descriptors or buffers: wait, retry
  #   :econnaborted, :einval, ...  one failed connection: count it, go on
  #   anything else                crash, and let the supervisor decide
  #
  # When the listener holds `max_connections`, a new TCP connection gets its
  # protocol's busy reply (`Ringbus.Server.Protocol`) and is closed; a TLS
  # one is closed. Refusals are counted, and logged by the listener, once a
  # second at most.
  #
  # A `:proc_lib` process rather than a Task, so that it answers `:sys`: a
  # process blocked in accept reads no message, so each accept waits at most
  # `@sys_wait` ms, and between accepts the acceptor takes what its mailbox
  # holds (only `:sys` requests come).

  require Logger

  alias Ringbus.Server.{Connection, ConnectionSupervisor, Listener, Protocol, Stats}

  @transient [:econnaborted, :econnreset, :einval, :eproto, :esslaccept]

  @sys_wait 500

  @doc false
  def child_spec(arg),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [arg]}, restart: :permanent}

  @spec start_link({pid(), Ringbus.Server.Config.t(), Protocol.t()}) :: {:ok, pid()}
  def start_link({server, config, protocol}),
    do: {:ok, :proc_lib.spawn_link(__MODULE__, :run, [self(), server, config, protocol])}

  @doc false
  # Runs once the server supervisor has started every child, since it asks
  # the supervisor for its siblings.
  def run(parent, server, config, %Protocol{name: name} = protocol) do
    listener = Listener.whereis(server, name)
    %{socket: listen, counters: counters} = Listener.info(listener)
    connections = {ConnectionSupervisor.whereis(server, name), protocol, listener}

    loop(%{
      parent: parent,
      listen: listen,
      connections: connections,
      config: config,
      counters: counters
    })
  end

  defp loop(%{listen: {transport, listen}, counters: counters} = state) do
    case transport.accept(listen, @sys_wait) do
      {:ok, socket} ->
        start_connection(transport, socket, state.connections, state.config, counters)
        mailbox(state)

      {:error, :timeout} ->
        mailbox(state)

      {:error, :closed} ->
        :ok

      {:error, reason} when reason in [:emfile, :enfile, :enobufs] ->
        Logger.error("Ringbus server cannot accept: #{reason}; retrying in 100 ms")
        Stats.count(counters, :accept_errors)
        Process.sleep(100)
        mailbox(state)

      {:error, reason} when reason in @transient ->
        Stats.count(counters, :accept_errors)
        mailbox(state)

      {:error, {:tls_alert, _}} ->
        Stats.count(counters, :accept_errors)
        mailbox(state)

      {:error, reason} ->
        exit({:accept_failed, reason})
    end
  end

  defp mailbox(state) do
    receive do
      {:system, from, request} ->
        :sys.handle_system_msg(request, from, state.parent, __MODULE__, [], state)

      _stray ->
        mailbox(state)
    after
      0 -> loop(state)
    end
  end

  ## :sys

  @doc false
  def system_continue(_parent, _debug, state), do: loop(state)

  @doc false
  def system_terminate(reason, _parent, _debug, _state), do: exit(reason)

  @doc false
  def system_get_state(state), do: {:ok, state}

  @doc false
  def system_replace_state(fun, state) do
    state = fun.(state)
    {:ok, state, state}
  end

  @doc false
  def system_code_change(state, _module, _old, _extra), do: {:ok, state}

  defp start_connection(transport, socket, {sup, protocol, listener}, config, counters) do
    case ConnectionSupervisor.start_connection(sup, protocol, config) do
      {:ok, pid} ->
        Stats.count(counters, :accepted)

        case transport.controlling_process(socket, pid) do
          :ok -> Connection.hand_over(pid, transport, socket)
          {:error, _} -> transport.close(socket)
        end

      {:error, :max_children} ->
        Stats.refused(counters, listener)
        transport.refuse(socket, protocol.busy)
    end
  end
end
