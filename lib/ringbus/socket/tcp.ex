defmodule Ringbus.Socket.TCP do
  @moduledoc false
  # Plain TCP, `:gen_tcp` (see `Ringbus.Socket`).
  #
  # Writes go straight to the port with `:erlang.port_command/2`; the port's
  # `{:inet_reply, socket, status}` comes back as an ordinary message that
  # the owner handles in its loop. `:gen_tcp.send/2` would instead wait for
  # that reply with a receive that scans the whole mailbox, which on OTP 25
  # turns a backlog of N messages into O(N²) work. When the port is busy
  # (its queue above the high watermark) `port_command/2` suspends the
  # writer: the back-pressure a writer wants.

  @behaviour Ringbus.Socket

  @impl true
  def name, do: :tcp

  @impl true
  def messages, do: {:tcp, :tcp_passive, :tcp_closed, :tcp_error}

  @impl true
  def listen(port, options), do: :gen_tcp.listen(port, options)

  @impl true
  def accept(listen, timeout), do: :gen_tcp.accept(listen, timeout)

  @impl true
  def handshake(socket, _timeout), do: {:ok, socket}

  @impl true
  def connect(host, port, options, timeout), do: :gen_tcp.connect(host, port, options, timeout)

  @impl true
  def controlling_process(socket, pid), do: :gen_tcp.controlling_process(socket, pid)

  @impl true
  def setopts(socket, options), do: :inet.setopts(socket, options)

  @impl true
  def send(socket, data) do
    :erlang.port_command(socket, data)
    :ok
  rescue
    ArgumentError -> {:error, :closed}
  end

  @impl true
  def recv(socket, length, timeout), do: :gen_tcp.recv(socket, length, timeout)

  @impl true
  def shutdown(socket, how), do: :gen_tcp.shutdown(socket, how)

  @impl true
  def close(socket), do: :gen_tcp.close(socket)

  @impl true
  def peername(socket), do: :inet.peername(socket)

  @impl true
  def sockname(socket), do: :inet.sockname(socket)

  # The port's queue: output the kernel has not taken yet.
  @impl true
  def queued(socket) do
    case :erlang.port_info(socket, :queue_size) do
      {:queue_size, n} -> n
      _closed -> 0
    end
  end

  @impl true
  def refuse(socket, reply) do
    _ = :gen_tcp.send(socket, reply)
    :gen_tcp.close(socket)
  end
end
