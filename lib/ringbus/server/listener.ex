defmodule Ringbus.Server.Listener do
  @moduledoc false
  # Opens the listening socket and owns it; acceptors share it. If this
  # process dies the socket closes, and the supervisor (rest_for_one) restarts
  # the acceptors after a new listener.

  use GenServer

  alias Ringbus.Server.Transport

  def start_link(config), do: GenServer.start_link(__MODULE__, config)

  @doc "The listening socket and the port it is bound to."
  @spec socket(pid()) :: {{Transport.kind(), term()}, :inet.port_number()}
  def socket(pid), do: GenServer.call(pid, :socket)

  @impl true
  def init(config) do
    case Transport.listen(config) do
      {:ok, listen} -> {:ok, {listen, Transport.port(listen)}}
      {:error, reason} -> {:stop, {:listen_failed, reason}}
    end
  end

  @impl true
  def handle_call(:socket, _from, state), do: {:reply, state, state}

  @impl true
  def terminate(_reason, {listen, _port}), do: Transport.close_listener(listen)
end
