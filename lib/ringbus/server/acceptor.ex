defmodule Ringbus.Server.Acceptor do
  @moduledoc false
  # Accepts connections in a loop and hands each socket to a new connection
  # process. Accept errors are sorted:
  #
  #   :closed                      the listener is gone: stop
  #   :emfile, :enfile, :enobufs   out of descriptors or buffers: wait, retry
  #   :econnaborted, :timeout, ... one failed connection: count it, go on
  #   anything else                crash, and let the supervisor decide
  #
  # When the listener holds `max_connections`, a new TCP connection gets its
  # protocol's busy reply (`Ringbus.Server.Protocol`) and is closed; a TLS
  # one is closed. Refusals are counted, and logged by the listener, once a
  # second at most.

  use Task, restart: :permanent

  require Logger

  alias Ringbus.Server.{Connection, ConnectionSupervisor, Listener, Protocol, Stats, Transport}

  @transient [:econnaborted, :econnreset, :timeout, :einval, :eproto, :esslaccept]

  def start_link({server, config, protocol}),
    do: Task.start_link(__MODULE__, :run, [server, config, protocol])

  @doc false
  # Runs once the server supervisor has started every child, since it asks
  # the supervisor for its siblings.
  def run(server, config, %Protocol{name: name} = protocol) do
    listener = Listener.whereis(server, name)
    %{socket: listen, counters: counters} = Listener.info(listener)
    connections = {ConnectionSupervisor.whereis(server, name), protocol, listener}
    loop(listen, connections, config, counters)
  end

  defp loop({kind, _} = listen, connections, config, counters) do
    case Transport.accept(listen) do
      {:ok, socket} ->
        start_connection(kind, socket, connections, config, counters)
        loop(listen, connections, config, counters)

      {:error, :closed} ->
        :ok

      {:error, reason} when reason in [:emfile, :enfile, :enobufs] ->
        Logger.error("Ringbus server cannot accept: #{reason}; retrying in 100 ms")
        Stats.count(counters, :accept_errors)
        Process.sleep(100)
        loop(listen, connections, config, counters)

      {:error, reason} when reason in @transient ->
        Stats.count(counters, :accept_errors)
        loop(listen, connections, config, counters)

      {:error, {:tls_alert, _}} ->
        Stats.count(counters, :accept_errors)
        loop(listen, connections, config, counters)

      {:error, reason} ->
        exit({:accept_failed, reason})
    end
  end

  defp start_connection(kind, socket, {sup, protocol, listener}, config, counters) do
    case ConnectionSupervisor.start_connection(sup, protocol, config) do
      {:ok, pid} ->
        Stats.count(counters, :accepted)

        case Ringbus.Socket.controlling_process(kind, socket, pid) do
          :ok -> Connection.hand_over(pid, kind, socket)
          {:error, _} -> Ringbus.Socket.close(kind, socket)
        end

      {:error, :max_children} ->
        Stats.refused(counters, listener)
        refuse(kind, socket, protocol)
    end
  end

  defp refuse(:tcp, socket, protocol) do
    :gen_tcp.send(socket, protocol.busy)
    :gen_tcp.close(socket)
  end

  defp refuse(:tls, socket, _protocol), do: :ssl.close(socket)
end
