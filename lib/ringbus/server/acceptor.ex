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

  alias Ringbus.Server.{Connection, Transport}
  alias Ringbus.Wire.Frame

  @transient [:econnaborted, :econnreset, :timeout, :einval, :eproto, :esslaccept]

  def start_link({server, config, counters}) do
    Task.start_link(__MODULE__, :run, [server, config, counters])
  end

  @doc false
  def run(server, config, counters) do
    {listener, connections} = Ringbus.Server.parts(server)
    {listen, _port} = Ringbus.Server.Listener.socket(listener)
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
        :counters.add(counters, 2, 1)
        Process.sleep(100)
        loop(listen, connections, config, counters)

      {:error, reason} when reason in @transient ->
        :counters.add(counters, 2, 1)
        loop(listen, connections, config, counters)

      {:error, {:tls_alert, _}} ->
        :counters.add(counters, 2, 1)
        loop(listen, connections, config, counters)

      {:error, reason} ->
        exit({:accept_failed, reason})
    end
  end

  defp start_connection(kind, socket, connections, config, counters) do
    case DynamicSupervisor.start_child(connections, {Connection, config}) do
      {:ok, pid} ->
        :counters.add(counters, 1, 1)

        case Ringbus.Socket.controlling_process(kind, socket, pid) do
          :ok -> Connection.hand_over(pid, kind, socket)
          {:error, _} -> Ringbus.Socket.close(kind, socket)
        end

      {:error, :max_children} ->
        :counters.add(counters, 3, 1)
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
