defmodule Ringbus.Server.Transport do
  @moduledoc false
  # The socket calls only the server makes, for plain TCP (`:gen_tcp`) and
  # TLS (`:ssl`): listening, accepting and the handshake. Reads, writes and
  # closing are `Ringbus.Socket`'s, shared with the client (see there why
  # writes never wait for the port).

  # How long a closing connection waits for more input before it closes.
  @quiet_ms 500

  @type kind :: Ringbus.Socket.kind()
  @type socket :: Ringbus.Socket.socket()

  @spec listen(Ringbus.Server.Config.t(), :inet.port_number()) ::
          {:ok, {kind(), term()}} | {:error, term()}
  def listen(config, port) do
    opts = [
      :binary,
      packet: :raw,
      active: false,
      reuseaddr: true,
      backlog: 1024,
      nodelay: true,
      ip: config.host,
      recbuf: config.buffer_size,
      sndbuf: config.buffer_size,
      buffer: config.buffer_size,
      high_watermark: config.max_out_bytes,
      low_watermark: div(config.max_out_bytes, 2),
      send_timeout: config.send_timeout,
      send_timeout_close: true
    ]

    case config.tls do
      nil -> with {:ok, l} <- :gen_tcp.listen(port, opts), do: {:ok, {:tcp, l}}
      tls -> with {:ok, l} <- :ssl.listen(port, opts ++ tls), do: {:ok, {:tls, l}}
    end
  end

  @doc "Accepts a connection, waiting `timeout` ms at most (then `{:error, :timeout}`)."
  @spec accept({kind(), term()}, timeout()) :: {:ok, socket()} | {:error, term()}
  def accept({:tcp, listen}, timeout), do: :gen_tcp.accept(listen, timeout)
  def accept({:tls, listen}, timeout), do: :ssl.transport_accept(listen, timeout)

  @doc "Completes the TLS handshake; a no-op for TCP."
  @spec handshake(kind(), socket(), timeout()) :: {:ok, socket()} | {:error, term()}
  def handshake(:tcp, socket, _timeout), do: {:ok, socket}
  def handshake(:tls, socket, timeout), do: :ssl.handshake(socket, timeout)

  @spec port({kind(), term()}) :: :inet.port_number()
  def port({:tcp, listen}), do: listen |> :inet.port() |> elem(1)
  def port({:tls, listen}), do: listen |> :ssl.sockname() |> elem(1) |> elem(1)

  @doc """
  Closes a connection so that the peer reads everything written first:
  half-closes the write side, which sends FIN once the queued output is out,
  then reads and drops what the peer still sends until it closes, stays
  quiet for #{@quiet_ms} ms, or `timeout` ms pass; then closes. A plain close
  with unread input resets the connection, and the reset discards output the
  kernel has not sent yet: a client pipelining pushes would lose its last
  acks and the ERROR frame. (Web servers call this a lingering close.)
  """
  @spec close_gracefully(kind(), socket(), non_neg_integer()) :: :ok
  def close_gracefully(kind, socket, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    with :ok <- shutdown_write(kind, socket),
         :ok <- passive(kind, socket) do
      drain(kind, socket, deadline)
    end

    Ringbus.Socket.close(kind, socket)
  end

  defp shutdown_write(:tcp, socket), do: :gen_tcp.shutdown(socket, :write)
  defp shutdown_write(:tls, socket), do: :ssl.shutdown(socket, :write)

  defp passive(:tcp, socket), do: :inet.setopts(socket, active: false)
  defp passive(:tls, socket), do: :ssl.setopts(socket, active: false)

  defp drain(kind, socket, deadline) do
    wait = min(max(deadline - System.monotonic_time(:millisecond), 0), @quiet_ms)
    result = if kind == :tls, do: :ssl.recv(socket, 0, wait), else: :gen_tcp.recv(socket, 0, wait)

    case result do
      {:ok, _data} when wait > 0 -> drain(kind, socket, deadline)
      _closed_quiet_or_late -> :ok
    end
  end

  @spec close_listener({kind(), term()}) :: :ok
  def close_listener({kind, listen}), do: Ringbus.Socket.close(kind, listen)
end
