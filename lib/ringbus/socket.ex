defmodule Ringbus.Socket do
  @moduledoc false
  # The socket calls the server's connections and the client share, for plain
  # TCP (`:gen_tcp`) and TLS (`:ssl`), on a socket in `active: :once` mode.
  #
  # Writes on TCP go straight to the port with `:erlang.port_command/2`; the
  # port's `{:inet_reply, socket, status}` comes back as an ordinary message
  # that the owner handles in its loop. `:gen_tcp.send/2` would instead wait
  # for that reply with a receive that scans the whole mailbox, which on OTP 25
  # turns a backlog of N messages into O(N²) work. When the port is busy (its
  # queue above the high watermark) `port_command/2` suspends the writer: the
  # back-pressure a writer wants. `:ssl.send/2` is a call whose receive matches
  # a fresh reference, which the runtime answers without scanning older
  # messages.

  @type kind :: :tcp | :tls
  @type socket :: :gen_tcp.socket() | :ssl.sslsocket()

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
end
