defmodule Ringbus.Socket do
  @moduledoc false
  # The socket calls the server's connections and the client share, for plain
  # TCP (`:gen_tcp`) and TLS (`:ssl`), on a socket that delivers a few reads at a time as messages.
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
  #
  # TLS writes above 1 MiB go to `:ssl.send/2` in slices of 1 MiB. Given a
  # whole multi-MB frame, ssl encrypts all of it before the first byte leaves,
  # so the receiver idles meanwhile and the ciphertext is fresh memory; in
  # slices, encryption overlaps the transfer and reuses memory.

  @tls_slice 1024 * 1024

  @type kind :: :tcp | :tls
  @type socket :: :gen_tcp.socket() | :ssl.sslsocket()

  @spec controlling_process(kind(), socket(), pid()) :: :ok | {:error, term()}
  def controlling_process(:tcp, socket, pid), do: :gen_tcp.controlling_process(socket, pid)
  def controlling_process(:tls, socket, pid), do: :ssl.controlling_process(socket, pid)

  # Reads delivered as messages before the socket goes passive again and
  # must be re-armed: each re-arm is a synchronous call into the port, which
  # waits while the port is busy writing, so arming once per read costs a
  # reader that takes many small reads more than the reads themselves. It
  # also bounds what can queue: this many reads of `:buffer_size` bytes.
  @reads 4

  @doc """
  Asks for the next reads as messages, `{:tcp | :ssl, socket, bytes}`, up to
  a few; then comes `{:tcp_passive | :ssl_passive, socket}`, and the owner
  calls this again.
  """
  @spec activate(kind(), socket()) :: :ok | {:error, term()}
  def activate(:tcp, socket), do: :inet.setopts(socket, active: @reads)
  def activate(:tls, socket), do: :ssl.setopts(socket, active: @reads)

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

  def send(:tls, socket, data) do
    if :erlang.iolist_size(data) > @tls_slice,
      do: send_slices(socket, slice(data, @tls_slice)),
      else: :ssl.send(socket, data)
  end

  defp send_slices(_socket, []), do: :ok

  defp send_slices(socket, [piece | rest]) do
    with :ok <- :ssl.send(socket, piece), do: send_slices(socket, rest)
  end

  @doc """
  Splits `data` into pieces of at most `limit` bytes, in order, without
  copying: a binary that straddles a boundary is split into sub-binaries.
  """
  @spec slice(iodata(), pos_integer()) :: [iodata()]
  def slice(data, limit) when is_integer(limit) and limit > 0,
    do: slice([data], limit, limit, [], [])

  # `piece` is the slice being filled, reversed, with `room` bytes left in it.
  defp slice([], _limit, _room, piece, pieces), do: Enum.reverse(finish(piece, pieces))

  defp slice([empty | rest], limit, room, piece, pieces) when empty in [[], ""],
    do: slice(rest, limit, room, piece, pieces)

  defp slice(data, limit, 0, piece, pieces),
    do: slice(data, limit, limit, [], finish(piece, pieces))

  defp slice([[head | tail] | rest], limit, room, piece, pieces),
    do: slice([head, tail | rest], limit, room, piece, pieces)

  defp slice([byte | rest], limit, room, piece, pieces) when is_integer(byte),
    do: slice([<<byte>> | rest], limit, room, piece, pieces)

  defp slice([bin | rest], limit, room, piece, pieces) when byte_size(bin) <= room,
    do: slice(rest, limit, room - byte_size(bin), [bin | piece], pieces)

  defp slice([bin | rest], limit, room, piece, pieces) do
    <<head::binary-size(room), tail::binary>> = bin
    slice([tail | rest], limit, limit, [], finish([head | piece], pieces))
  end

  defp finish([], pieces), do: pieces
  defp finish(piece, pieces), do: [Enum.reverse(piece) | pieces]

  @spec close(kind(), socket()) :: :ok
  def close(:tcp, socket), do: :gen_tcp.close(socket)

  def close(:tls, socket), do: :ssl.close(socket)

  @doc """
  Shuts the socket down both ways, from any process: its owner then gets
  the socket's closed message and ends as when the peer closes.
  """
  @spec shutdown(:tcp | :tls, term()) :: :ok | {:error, term()}
  def shutdown(:tcp, socket), do: :gen_tcp.shutdown(socket, :read_write)
  def shutdown(:tls, socket), do: :ssl.shutdown(socket, :read_write)
end
