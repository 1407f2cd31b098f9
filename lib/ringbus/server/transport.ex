defmodule Ringbus.Server.Transport do
  @moduledoc false
  # The socket calls only the server makes, on its transport
  # (`Ringbus.Socket`): choosing it (TLS when the server has `:tls`
  # options, else TCP), listening, and closing a connection gracefully.
  # Accepting, the handshake and everything else are the transport's own
  # calls.

  alias Ringbus.Socket.{TCP, TLS}

  # How long a closing connection waits for more input before it closes.
  @quiet_ms 500

  @type listener :: {Ringbus.Socket.t(), Ringbus.Socket.listen_socket()}

  @spec listen(Ringbus.Server.Config.t(), :inet.port_number()) ::
          {:ok, listener()} | {:error, term()}
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

    {transport, own} = if config.tls, do: {TLS, config.tls}, else: {TCP, []}
    with {:ok, listen} <- transport.listen(port, opts ++ own), do: {:ok, {transport, listen}}
  end

  @doc "The port a listener is bound to."
  @spec port(listener()) :: :inet.port_number()
  def port({transport, listen}) do
    {:ok, {_ip, port}} = transport.sockname(listen)
    port
  end

  @doc """
  Closes a connection so that the peer reads everything written first:
  half-closes the write side, which sends FIN once the queued output is out,
  then reads and drops what the peer still sends until it closes, stays
  quiet for #{@quiet_ms} ms, or `timeout` ms pass; then closes. A plain close
  with unread input resets the connection, and the reset discards output the
  kernel has not sent yet: a client pipelining pushes would lose its last
  acks and the ERROR frame. (Web servers call this a lingering close.)
  """
  @spec close_gracefully(Ringbus.Socket.t(), Ringbus.Socket.socket(), non_neg_integer()) :: :ok
  def close_gracefully(transport, socket, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    with :ok <- transport.shutdown(socket, :write),
         :ok <- transport.setopts(socket, active: false) do
      drain(transport, socket, deadline)
    end

    transport.close(socket)
  end

  defp drain(transport, socket, deadline) do
    wait = min(max(deadline - System.monotonic_time(:millisecond), 0), @quiet_ms)

    case transport.recv(socket, 0, wait) do
      {:ok, _data} when wait > 0 -> drain(transport, socket, deadline)
      _closed_quiet_or_late -> :ok
    end
  end

  @spec close_listener(listener()) :: :ok
  def close_listener({transport, listen}), do: transport.close(listen)
end
