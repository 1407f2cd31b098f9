defmodule Ringbus.Socket.TLS do
  @moduledoc false
  # TLS, `:ssl` (see `Ringbus.Socket`).
  #
  # `:ssl.send/2` is a call whose receive matches a fresh reference, which
  # the runtime answers without scanning older messages, so a write waits
  # for the TLS connection process but never scans the owner's mailbox.
  #
  # Writes above 1 MiB go to `:ssl.send/2` in slices of 1 MiB. Given a whole
  # multi-MB frame, ssl encrypts all of it before the first byte leaves, so
  # the receiver idles meanwhile and the ciphertext is fresh memory; in
  # slices, encryption overlaps the transfer and reuses memory.

  @behaviour Ringbus.Socket

  @slice 1024 * 1024

  @impl true
  def name, do: :tls

  @impl true
  def messages, do: {:ssl, :ssl_passive, :ssl_closed, :ssl_error}

  @impl true
  def listen(port, options), do: :ssl.listen(port, options)

  @impl true
  def accept(listen, timeout), do: :ssl.transport_accept(listen, timeout)

  @impl true
  def handshake(socket, timeout), do: :ssl.handshake(socket, timeout)

  @impl true
  def connect(host, port, options, timeout), do: :ssl.connect(host, port, options, timeout)

  @impl true
  def controlling_process(socket, pid), do: :ssl.controlling_process(socket, pid)

  @impl true
  def setopts(socket, options), do: :ssl.setopts(socket, options)

  @impl true
  def send(socket, data) do
    if :erlang.iolist_size(data) > @slice,
      do: send_slices(socket, slice(data, @slice)),
      else: :ssl.send(socket, data)
  end

  defp send_slices(_socket, []), do: :ok

  defp send_slices(socket, [piece | rest]) do
    with :ok <- :ssl.send(socket, piece), do: send_slices(socket, rest)
  end

  @impl true
  def recv(socket, length, timeout), do: :ssl.recv(socket, length, timeout)

  @impl true
  def shutdown(socket, how), do: :ssl.shutdown(socket, how)

  @impl true
  def close(socket), do: :ssl.close(socket)

  @impl true
  def peername(socket), do: :ssl.peername(socket)

  @impl true
  def sockname(socket), do: :ssl.sockname(socket)

  # What the TLS connection process holds is not the owner's to see.
  @impl true
  def queued(_socket), do: 0

  @impl true
  def refuse(socket, _reply), do: :ssl.close(socket)

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
end
