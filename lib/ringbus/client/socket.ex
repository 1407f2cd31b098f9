defmodule Ringbus.Client.Socket do
  @moduledoc false
  # How a client connects: the transport its `:transport` option names
  # (`Ringbus.Socket.TCP` or `Ringbus.Socket.TLS`, chosen here and nowhere
  # else) and the socket options it connects with. Connecting and the HELLO
  # exchange run in the caller of `Ringbus.Client.connect/1` with the socket
  # passive; the connection process then owns the socket and takes its reads
  # as messages, a few at a time, through the same transport.

  alias Ringbus.Socket.{TCP, TLS}

  # Each value of `:transport`: its module, and the option that holds the
  # socket options only it takes.
  @transports [tcp: {TCP, nil}, tls: {TLS, :tls}]

  @doc "The values of the client's `:transport` option."
  @spec transports() :: [atom()]
  def transports, do: Keyword.keys(@transports)

  @doc """
  Connects as `opts` say (`:transport`, `:tls`, `:buffer_size`,
  `:send_timeout`, `:timeout`): the transport and its socket.
  """
  @spec connect(:inet.hostname() | :inet.ip_address(), :inet.port_number(), keyword()) ::
          {:ok, Ringbus.Socket.t(), Ringbus.Socket.socket()} | {:error, term()}
  def connect(host, port, opts) do
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

    {transport, own} = Keyword.fetch!(@transports, Keyword.fetch!(opts, :transport))
    own = if own, do: Keyword.fetch!(opts, own), else: []

    with {:ok, socket} <-
           transport.connect(host, port, sock_opts ++ own, Keyword.fetch!(opts, :timeout)),
         do: {:ok, transport, socket}
  end
end
