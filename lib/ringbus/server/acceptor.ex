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
  # When the server holds `max_connections`, a new TCP connection gets an
  # ERROR `server_busy` frame and is closed; a TLS one is closed.

  use Task, restart: :permanent

  require Logger

  alias Ringbus.Server.{Connection, ConnectionSupervisor, Listener, Stats}
  alias Ringbus.Server.Transport
  alias Ringbus.Wire.Frame

  @transient [:econnaborted, :econnreset, :timeout, :einval, :eproto, :esslaccept]

  def start_link({server, config}), do: Task.start_link(__MODULE__, :run, [server, config])

  @doc false
  # Runs once the server supervisor has started every child, since it asks
  # the supervisor for its siblings.
  def run(server, config) do
    %{socket: listen, counters: counters} = Listener.info(Listener.whereis(server))
    loop(listen, ConnectionSupervisor.whereis(server), config, counters)
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

  defp start_connection(kind, socket, connections, config, counters) do
    case ConnectionSupervisor.start_connection(connections, config) do
      {:ok, pid} ->
        Stats.count(counters, :accepted)

        case Ringbus.Socket.controlling_process(kind, socket, pid) do
          :ok -> Connection.hand_over(pid, kind, socket)
          {:error, _} -> Ringbus.Socket.close(kind, socket)
        end

      {:error, :max_children} ->
        Stats.refused(counters, kind, socket, config.max_connections)
        refuse(kind, socket)
    end
  end

  defp refuse(:tcp, socket) do
    frame = {:error, 0, :server_busy, "the server has too many connections"}
    :gen_tcp.send(socket, Frame.encode(frame))
    :gen_tcp.close(socket)
  end

  defp refuse(:tls, socket), do: :ssl.close(socket)
end
