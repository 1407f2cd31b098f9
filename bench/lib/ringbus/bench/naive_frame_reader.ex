defmodule Ringbus.Bench.NaiveFrameReader do
  @moduledoc """
  The anti-pattern that `mix ringbus.bench frames` measures Ringbus against:
  a receiver that appends every socket read to one growing binary. It is kept
  only as the contrast for `Ringbus.Bench.Frames`; nothing else may use it.

  It speaks just enough of the protocol for the bench: `HELLO` is answered
  with `HELLO_OK`, and each `PUSH` is decoded with `Ringbus.Wire.Frame`,
  stored with `Ringbus.push/2` and acknowledged with a `PUSH_ACKS` frame of
  one entry. Its sockets take the options `Ringbus.Server` gives its own
  (`:buffer_size` for the kernel and user buffers, `nodelay`, `active: :once`),
  so the only difference from the server is how a frame is put together.

  ## The pattern

  Like the field report's receiver (Fred Hébert, "On the hunt for a bug with a
  hump and a long tail", 2023), every read goes through

      {frames, incomplete} = unwrap_all(<<buffer::binary, data::binary>>, [])

  where `unwrap_all/2` matches `<<length::32, frame::binary-size(length),
  rest::binary>>` on the accumulated buffer and, while the frame is not
  complete, hands the whole buffer back as the new one.

  Why every read then copies the whole buffer: the runtime can append to a
  binary in place, with room to grow, when the binary was itself built by an
  append and nothing else has looked at it. Matching it (the header match
  above, on every read) turns it into an ordinary binary that is referenced by
  the match and shrunk to its size, and the next append must allocate a new
  binary and copy all of it (see "Constructing binaries" in the Erlang
  Efficiency Guide). A frame of `n` bytes that arrives in reads of `r` bytes
  costs about `n² / 2r` bytes of copying and as many large allocations,
  outside the process heap: the process's memory stays flat while the
  transfer slows as the frame grows. Dropping the match (checking only
  `byte_size/1`) would hide the pathology; this module keeps it on purpose.

  `Ringbus.Wire.Decoder` instead keeps the reads of an incomplete frame in a
  list with a running byte count and joins them once, when the length prefix
  says the frame is complete.
  """

  alias Ringbus.Wire.Frame

  @typedoc """
  Options of `start_link/1`:

    * `:tls` - `:ssl` server options (`:cert`/`:key` or `:certfile`/`:keyfile`)
      to accept TLS instead of plain TCP. Default `nil`.
    * `:buffer_size` - socket buffer sizes, in bytes, as `Ringbus.Server`'s
      option of the same name. Default 1 MiB.
    * `:max_frame_size` - the limit announced in `HELLO_OK`; the reader itself
      does not check it. Default 16 MiB.
    * `:notify` - a pid that gets `{Ringbus.Bench.NaiveFrameReader, :frame,
      reads, busy}` after each push is acknowledged: how many socket reads the
      frame took, and the time in native units from its first read to its
      store, the receiver's own clock of its work on it. Default `nil`.
  """
  @type options :: [
          tls: [:ssl.tls_server_option()] | nil,
          buffer_size: pos_integer(),
          max_frame_size: pos_integer(),
          notify: pid() | nil
        ]

  @defaults [tls: nil, buffer_size: 1024 * 1024, max_frame_size: 16 * 1024 * 1024, notify: nil]

  @doc """
  Starts a reader listening on a free port of 127.0.0.1, linked to the
  caller, and returns its pid and port. Each accepted connection gets a
  process of its own.
  """
  @spec start_link(options()) :: {:ok, pid(), :inet.port_number()} | {:error, term()}
  def start_link(opts \\ []) do
    opts = Keyword.validate!(opts, @defaults)
    parent = self()
    ref = make_ref()
    pid = spawn_link(fn -> listen(parent, ref, opts) end)

    receive do
      {^ref, {:ok, port}} -> {:ok, pid, port}
      {^ref, {:error, reason}} -> {:error, reason}
    after
      5_000 -> {:error, :timeout}
    end
  end

  @doc "Stops the reader and every connection it accepted."
  @spec stop(pid()) :: :ok
  def stop(pid) do
    Process.unlink(pid)
    ref = Process.monitor(pid)
    Process.exit(pid, :shutdown)

    receive do
      {:DOWN, ^ref, :process, ^pid, _reason} -> :ok
    end
  end

  ## Listener

  defp listen(parent, ref, opts) do
    size = opts[:buffer_size]

    sock_opts = [
      :binary,
      packet: :raw,
      active: false,
      reuseaddr: true,
      nodelay: true,
      ip: {127, 0, 0, 1},
      recbuf: size,
      sndbuf: size,
      buffer: size
    ]

    result =
      case opts[:tls] do
        nil -> with {:ok, l} <- :gen_tcp.listen(0, sock_opts), do: {:ok, {:tcp, l}}
        tls -> with {:ok, l} <- :ssl.listen(0, sock_opts ++ tls), do: {:ok, {:tls, l}}
      end

    case result do
      {:ok, listen} ->
        send(parent, {ref, {:ok, port(listen)}})
        accept(listen, opts)

      {:error, reason} ->
        send(parent, {ref, {:error, reason}})
    end
  end

  defp port({:tcp, l}), do: l |> :inet.port() |> elem(1)
  defp port({:tls, l}), do: l |> :ssl.sockname() |> elem(1) |> elem(1)

  defp accept({:tcp, l} = listen, opts) do
    {:ok, socket} = :gen_tcp.accept(l)
    pid = spawn_link(fn -> receive(do: (:go -> start(:tcp, socket, opts))) end)
    :ok = :gen_tcp.controlling_process(socket, pid)
    send(pid, :go)
    accept(listen, opts)
  end

  defp accept({:tls, l} = listen, opts) do
    {:ok, socket} = :ssl.transport_accept(l)
    pid = spawn_link(fn -> receive(do: (:go -> handshake(socket, opts))) end)
    :ok = :ssl.controlling_process(socket, pid)
    send(pid, :go)
    accept(listen, opts)
  end

  defp handshake(socket, opts) do
    case :ssl.handshake(socket, 5_000) do
      {:ok, socket} -> start(:tls, socket, opts)
      {:error, _reason} -> :ok
    end
  end

  ## Connection

  defp start(kind, socket, opts) do
    conn = %{kind: kind, socket: socket, opts: opts, buffer: <<>>, reads: 0, first_read: nil}
    activate(conn)
    loop(conn)
  end

  defp loop(conn) do
    receive do
      {tag, _socket, data} when tag in [:tcp, :ssl] ->
        # The anti-pattern: one growing binary, matched on every read.
        conn = %{conn | first_read: conn.first_read || System.monotonic_time()}
        {frames, incomplete} = unwrap_all(<<conn.buffer::binary, data::binary>>, [])
        conn = %{conn | buffer: incomplete, reads: conn.reads + 1}
        conn = Enum.reduce(frames, conn, &handle_frame/2)
        activate(conn)
        loop(conn)

      {closed, _socket} when closed in [:tcp_closed, :ssl_closed] ->
        :ok

      {error, _socket, _reason} when error in [:tcp_error, :ssl_error] ->
        :ok
    end
  end

  defp unwrap_all(buffer, frames) do
    case buffer do
      <<length::32, frame::binary-size(length), rest::binary>> ->
        unwrap_all(rest, [frame | frames])

      incomplete ->
        {:lists.reverse(frames), incomplete}
    end
  end

  defp handle_frame(bytes, conn) do
    case Frame.decode_body(bytes) do
      {:ok, {:hello, corr, _version, _flags, _token}} ->
        max = conn.opts[:max_frame_size]

        limits = %{
          max_frame_size: max,
          max_payload_size: max - 64,
          max_subscriptions: 0,
          max_credit: 1,
          idle_timeout: :infinity
        }

        %{write(conn, {:hello_ok, corr, Frame.version(), limits}) | reads: 0, first_read: nil}

      {:ok, {:push, corr, _mode, name, payload}} ->
        stored = Ringbus.push(name, payload)
        busy = System.monotonic_time() - conn.first_read
        write(conn, {:push_acks, 1, [{corr, stored}]})
        if pid = conn.opts[:notify], do: send(pid, {__MODULE__, :frame, conn.reads, busy})
        %{conn | reads: 0, first_read: nil}
    end
  end

  defp write(conn, frame) do
    :ok = send_bytes(conn, Frame.encode(frame))
    conn
  end

  defp send_bytes(%{kind: :tcp, socket: socket}, data), do: :gen_tcp.send(socket, data)
  defp send_bytes(%{kind: :tls, socket: socket}, data), do: :ssl.send(socket, data)

  defp activate(%{kind: :tcp, socket: socket}), do: :inet.setopts(socket, active: :once)
  defp activate(%{kind: :tls, socket: socket}), do: :ssl.setopts(socket, active: :once)
end
