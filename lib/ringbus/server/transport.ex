defmodule Ringbus.Server.Transport do
  @moduledoc false
  # The socket calls only the server makes, for plain TCP (`:gen_tcp`) and
  # TLS (`:ssl`): listening, accepting and the handshake. Reads, writes and
  # closing are `Ringbus.Socket`'s, shared with the client (see there why
  # writes never wait for the port).

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

  @spec close_listener({kind(), term()}) :: :ok
  def close_listener({kind, listen}), do: Ringbus.Socket.close(kind, listen)
end
