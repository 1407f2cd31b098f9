defmodule Ringbus.Server.Transport do
  @moduledoc false
  # The few socket calls the server makes, for plain TCP (`:gen_tcp`) and TLS
  # (`:ssl`).
  #
  # Writes on TCP go straight to the port with `:erlang.port_command/2`; the
  # port's `{:inet_reply, socket, status}` comes back as an ordinary message
  # that the connection handles in its loop. `:gen_tcp.send/2` would instead
  # wait for that reply with a receive that scans the whole mailbox, which on
  # OTP 25 turns a backlog of N messages into O(N²) work. `:ssl.send/2` is a
  # call whose receive matches a fresh reference, which the runtime answers
  # without scanning older messages.

  @type kind :: :tcp | :tls
  @type socket :: :gen_tcp.socket() | :ssl.sslsocket()

  @spec listen(Ringbus.Server.Config.t()) :: {:ok, {kind(), term()}} | {:error, term()}
  def listen(config) do
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
      nil -> with {:ok, l} <- :gen_tcp.listen(config.port, opts), do: {:ok, {:tcp, l}}
      tls -> with {:ok, l} <- :ssl.listen(config.port, opts ++ tls), do: {:ok, {:tls, l}}
    end
  end

  @spec accept({kind(), term()}) :: {:ok, socket()} | {:error, term()}
  def accept({:tcp, listen}), do: :gen_tcp.accept(listen)
  def accept({:tls, listen}), do: :ssl.transport_accept(listen)

  @doc "Completes the TLS handshake; a no-op for TCP."
  @spec handshake(kind(), socket(), timeout()) :: {:ok, socket()} | {:error, term()}
  def handshake(:tcp, socket, _timeout), do: {:ok, socket}
  def handshake(:tls, socket, timeout), do: :ssl.handshake(socket, timeout)

  @spec port({kind(), term()}) :: :inet.port_number()
  def port({:tcp, listen}), do: listen |> :inet.port() |> elem(1)
  def port({:tls, listen}), do: listen |> :ssl.sockname() |> elem(1) |> elem(1)

  @spec controlling_process(kind(), socket(), pid()) :: :ok | {:error, term()}
  def controlling_process(:tcp, socket, pid), do: :gen_tcp.controlling_process(socket, pid)
  def controlling_process(:tls, socket, pid), do: :ssl.controlling_process(socket, pid)

  @doc "Asks for the next read as one message."
  @spec activate(kind(), socket()) :: :ok | {:error, term()}
  def activate(:tcp, socket), do: :inet.setopts(socket, active: :once)
  def activate(:tls, socket), do: :ssl.setopts(socket, active: :once)

  @doc """
  Writes `data` without waiting for the socket: on TCP the outcome arrives
  later as `{:inet_reply, socket, :ok | {:error, reason}}`.
  """
  @spec send(kind(), socket(), iodata()) :: :ok | {:error, term()}
  def send(:tcp, socket, data) do
    :erlang.port_command(socket, data)
    :ok
  rescue
    ArgumentError -> {:error, :closed}
  end

  def send(:tls, socket, data), do: :ssl.send(socket, data)

  @spec close(kind(), socket()) :: :ok
  def close(:tcp, socket), do: :gen_tcp.close(socket)
  def close(:tls, socket), do: :ssl.close(socket)

  @spec close_listener({kind(), term()}) :: :ok
  def close_listener({kind, listen}), do: close(kind, listen)
end
