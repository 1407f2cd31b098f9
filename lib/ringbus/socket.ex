defmodule Ringbus.Socket do
  @moduledoc false
  # The socket calls the server's connections and the client share, for plain
  # TCP (`:gen_tcp`) and TLS (`:ssl`), on a socket that delivers reads as messages, a number at a time.
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

  # Reads delivered as messages before the socket goes passive and must be
  # armed again. Each arming costs a synchronous call into the port and a
  # turn of the poller before the next read comes, so a reader of many small
  # reads that arms every few reads spends more on arming than on the reads.
  # What can queue is bounded by the reads of one arming: many while reads
  # are small, few once they fill the buffer (see `reads/2`).
  @min_reads 4
  @max_reads 64
  # The bytes one arming may queue, in buffers, judged by the reads so far.
  @budget_buffers 4

  @doc """
  How many reads to ask for at the next arming, given the largest read since
  the last one and the socket's user buffer (the most one read carries):
  enough to fill #{@budget_buffers} buffers at that size, from #{@min_reads}
  to #{@max_reads}. So at most #{@max_reads} reads queue, and once reads fill
  the buffer, #{@min_reads}.

      iex> Ringbus.Socket.reads(200, 256 * 1024)
      64
      iex> Ringbus.Socket.reads(256 * 1024, 256 * 1024)
      4
      iex> Ringbus.Socket.reads(0, 1024)
      4
  """
  @spec reads(non_neg_integer(), pos_integer()) :: pos_integer()
  def reads(0, _buffer), do: @min_reads

  def reads(largest, buffer),
    do: (@budget_buffers * buffer) |> div(largest) |> max(@min_reads) |> min(@max_reads)

  @doc """
  Asks for the next `reads` reads as messages, `{:tcp | :ssl, socket,
  bytes}`; then comes `{:tcp_passive | :ssl_passive, socket}`, and the owner
  calls this again.
  """
  @spec activate(kind(), socket(), pos_integer()) :: :ok | {:error, term()}
  def activate(kind, socket, reads \\ @min_reads)
  def activate(:tcp, socket, reads), do: :inet.setopts(socket, active: reads)
  def activate(:tls, socket, reads), do: :ssl.setopts(socket, active: reads)

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
