defmodule Ringbus.Server.TransportTest do
  # Closing a connection whose client still sends: the client must still
  # read every byte written before the close.
  use ExUnit.Case, async: true

  alias Ringbus.Server.Transport

  test "a graceful close lets the client read all output, though it still sends" do
    {:ok, listen} =
      :gen_tcp.listen(0, [:binary, active: false, reuseaddr: true, ip: {127, 0, 0, 1}])

    {:ok, port} = :inet.port(listen)
    {:ok, client} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false])
    {:ok, server} = :gen_tcp.accept(listen)

    # Input the server never reads, and more output than the buffers hold.
    :ok = :gen_tcp.send(client, :binary.copy("x", 256 * 1024))
    last = :binary.copy("y", 8 * 1024 * 1024)

    closer =
      Task.async(fn ->
        receive do
          :yours -> :ok
        end

        :ok = Ringbus.Socket.TCP.send(server, last)
        Transport.close_gracefully(Ringbus.Socket.TCP, server, 10_000)
      end)

    :ok = :gen_tcp.controlling_process(server, closer.pid)
    send(closer.pid, :yours)

    assert read_all(client, 0) == byte_size(last)
    :ok = :gen_tcp.close(client)
    assert :ok = Task.await(closer, 15_000)
  end

  defp read_all(socket, bytes) do
    case :gen_tcp.recv(socket, 0, 10_000) do
      {:ok, data} -> read_all(socket, bytes + byte_size(data))
      {:error, :closed} -> bytes
    end
  end
end
