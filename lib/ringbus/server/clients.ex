defmodule Ringbus.Server.Clients do
  @moduledoc false
  # The connections of every listener of this node, for
  # `Ringbus.Server.clients/0` and `close_client/1` and for the front ends
  # (RESP's CLIENT LIST and KILL), which must not call `Ringbus.Server`,
  # the supervisor that starts them.

  alias Ringbus.Server.{Directory, Stats}

  @doc "Every connection's figures, oldest first (see `Ringbus.Server.clients/0`)."
  @spec list() :: [map()]
  def list do
    # The registry drops an entry a moment after its process exits.
    for({pid, info} <- Directory.connections(), Process.alive?(pid), do: {pid, info})
    |> Enum.map(fn {pid, info} -> Stats.connection(pid, info) end)
    |> Enum.sort_by(& &1.id)
  end

  @doc "Shuts the socket of the connection `pid` down (see `Ringbus.Server.close_client/1`)."
  @spec close(pid()) :: :ok | {:error, :no_client}
  def close(pid) do
    case for({^pid, info} <- Directory.connections(), do: info) do
      [%{transport: transport, socket: socket} | _] ->
        _ = transport.shutdown(socket, :read_write)
        :ok

      [] ->
        {:error, :no_client}
    end
  end
end
