defmodule Ringbus.Client.Socket do
  @moduledoc false
  # The few socket calls the client makes, for plain TCP (`:gen_tcp`) and TLS
  # (`:ssl`). Connecting and the HELLO exchange run in the caller of
  # `Ringbus.Client.connect/1` with the socket passive; the connection process
  # then owns the socket and reads it in `active: :once` mode.
  #
  # Writes on TCP go straight to the port with `:erlang.port_command/2`, whose
  # `{:inet_reply, socket, status}` comes back as an ordinary message: the
  # connection handles it in its loop instead of waiting for it with a
  # selective receive, as `:gen_tcp.send/2` would. When the port is busy (its
  # queue above the high watermark), `port_command/2` suspends the writer,
  # which is the back-pressure the connection wants.

  @type kind :: :tcp | :tls
  @type socket :: :gen_tcp.socket() | :ssl.sslsocket()

  @spec connect(kind(), :inet.hostname() | :inet.ip_address(), :inet.port_number(), keyword()) ::
          {:ok, socket()} | {:error, term()}
  def connect(kind, host, port, opts) do
    buffer = Keyword.fetch!(opts, :buffer_size)

    sock_opts = [
      :binary,
      packet: :raw,
      active: false,
      nodelay: true,
      recbuf: buffer,
      sndbuf: buffer,
      buffer: buffer,
      high_watermark: buffer * 4,
      low_watermark: buffer * 2,
      send_timeout: Keyword.fetch!(opts, :send_timeout),
      send_timeout_close: true
    ]

    timeout = Keyword.fetch!(opts, :timeout)

    case kind do
      :tcp -> :gen_tcp.connect(host, port, sock_opts, timeout)
      :tls -> :ssl.connect(host, port, sock_opts ++ Keyword.fetch!(opts, :tls), timeout)
    end
  end

  @spec recv(kind(), socket(), timeout()) :: {:ok, binary()} | {:error, term()}
  def recv(:tcp, socket, timeout), do: :gen_tcp.recv(socket, 0, timeout)
  def recv(:tls, socket, timeout), do: :ssl.recv(socket, 0, timeout)

  @spec controlling_process(kind(), socket(), pid()) :: :ok | {:error, term()}
  def controlling_process(:tcp, socket, pid), do: :gen_tcp.controlling_process(socket, pid)
  def controlling_process(:tls, socket, pid), do: :ssl.controlling_process(socket, pid)

  @doc "Asks for the next read as one message."
  @spec activate(kind(), socket()) :: :ok | {:error, term()}
  def activate(:tcp, socket), do: :inet.setopts(socket, active: :once)
  def activate(:tls, socket), do: :ssl.setopts(socket, active: :once)

  @doc """
  Writes `data`. On TCP the outcome arrives later as
  `{:inet_reply, socket, :ok | {:error, reason}}`.
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
end
