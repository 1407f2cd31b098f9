defmodule Ringbus.Client.Socket do
  @moduledoc false
  # The few socket calls the client makes, for plain TCP (`:gen_tcp`) and TLS
  # (`:ssl`). Connecting and the HELLO exchange run in the caller of
  # `Ringbus.Client.connect/1` with the socket passive; the connection process
  # then owns the socket and takes its reads as messages, a few at a time. Reads, writes
  # and closing are `Ringbus.Socket`'s, shared with the server (see there why
  # writes never wait for the port).

  @type kind :: Ringbus.Socket.kind()
  @type socket :: Ringbus.Socket.socket()

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
end
