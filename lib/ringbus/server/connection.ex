defmodule Ringbus.Server.Connection do
  @moduledoc false
  # The process of one client connection: it owns the socket, the decoder,
  # the output buffer and the deadlines, and hands every decoded frame to
  # `Ringbus.Server.Session`, which holds the protocol.
  #
  # It is a GenServer, so `:sys.get_state/1` and `:sys.suspend/1` work on it,
  # and gen_server's loop takes every message in arrival order.
  #
  # Reads. The socket delivers a few reads as messages at a time (see
  # `Ringbus.Socket.activate/2`), each carrying whatever the kernel has, up
  # to the large user buffer. The decoder returns every frame of a read and
  # the session answers them all; the socket is armed again when it says it
  # has gone passive.
  # The first frame is decoded with the pre-HELLO limit and every later byte
  # with `max_frame_size`, however TCP splits them.
  #
  # Writes. Answers and deliveries collect as iodata and go out with one
  # socket write when the mailbox is empty (gen_server's timeout of 0 fires
  # only then), after each read, and whenever 64 KiB have piled up. Never one
  # write per message.
  #
  # Backlog safety. No selective receive: TCP writes go to the port without
  # waiting for its reply (see `Ringbus.Socket`), and the calls the session
  # makes (create, delete, subscribe, unsubscribe) wait on a fresh reference,
  # which the runtime matches without scanning older messages. What can queue
  # here is bounded: the few reads the socket delivers before it must be
  # armed again and, per subscription, the credit the client gave. The queue is off the heap, so
  # queued deliveries take no part in the process's garbage collections.
  #
  # Time limits. HELLO must arrive within `handshake_timeout`, and after it
  # each frame must be complete within `idle_timeout` of the one before; a
  # client that trickles bytes runs into the same deadline.
  #
  # Shutdown. It traps exits, so when the server stops, its supervisor's
  # shutdown reaches `terminate/2`: the read already taken in is answered,
  # deliveries already here are written, then SUB_CLOSED shutting_down for
  # each subscription and ERROR shutting_down, and the
  # socket closes once the client has read it all (see
  # `Ringbus.Server.Transport.close_gracefully/3`). The server's
  # `:shutdown_timeout` bounds all of it.
  #
  # Figures and logs. `Ringbus.Server.Stats` counts every read and write in
  # the server's counters and keeps this connection's tally, which it logs
  # in one line when the connection closes, with the reason `close/2` gave.

  use GenServer, restart: :temporary

  alias Ringbus.Server.{Config, Session, Stats, Transport}
  alias Ringbus.Wire.{Decoder, Frame}

  @flush_bytes 64 * 1024

  @spec start_link(Config.t()) :: GenServer.on_start()
  def start_link(config) do
    GenServer.start_link(__MODULE__, config, spawn_opt: [message_queue_data: :off_heap])
  end

  @doc "Hands an accepted socket to the connection process that now owns it."
  @spec hand_over(pid(), Transport.kind(), Transport.socket()) :: :ok
  def hand_over(pid, kind, socket) do
    send(pid, {:ringbus_socket, kind, socket})
    :ok
  end

  ## Init

  @impl true
  def init(%Config{} = config) do
    Process.flag(:trap_exit, true)

    state = %{
      config: config,
      kind: nil,
      socket: nil,
      decoder:
        Decoder.new(config.max_frame_size,
          first: Frame.max_hello_frame_size(),
          accept: :requests,
          group_pushes: config.max_payload_size
        ),
      session: Session.new(config),
      deadline: now() + config.handshake_timeout,
      out: [],
      out_bytes: 0,
      stats: nil,
      busy?: false
    }

    {:ok, state, config.handshake_timeout}
  end

  ## Messages

  @impl true
  def handle_info({:ringbus_socket, kind, socket}, state) do
    left = remaining(state.deadline)

    with {:ok, socket} <- Transport.handshake(kind, socket, left),
         :ok <- Ringbus.Socket.activate(kind, socket) do
      stats = Stats.opened(state.config.counters, :binary, kind, socket)
      noreply(%{state | kind: kind, socket: socket, stats: stats})
    else
      _ -> {:stop, :normal, state}
    end
  end

  def handle_info({tag, socket, data}, %{socket: socket} = state) when tag in [:tcp, :ssl] do
    # Acks are timed from here (ringbus_server_push_ack_seconds).
    arrived = System.monotonic_time()
    state = busy(state, data)

    case Decoder.feed(state.decoder, data) do
      {:ok, frames, decoder} ->
        state = %{
          state
          | decoder: decoder,
            stats: Stats.read(state.stats, frames, byte_size(data), arrived)
        }

        frames |> run(state) |> after_read(frames != [])

      {:error, reason, frames} ->
        state = %{state | stats: Stats.read(state.stats, frames, byte_size(data))}

        with {:ok, state} <- run(frames, state) do
          fatal(state, Session.fatal_frame(state.session, reason))
        end
    end
  end

  # The reads asked for have come: ask for more.
  def handle_info({passive, socket}, %{socket: socket} = state)
      when passive in [:tcp_passive, :ssl_passive] do
    case Ringbus.Socket.activate(state.kind, socket) do
      :ok -> noreply(state)
      {:error, :closed} -> close(state, :peer_closed)
      {:error, _} -> close(state, :socket_error)
    end
  end

  def handle_info({:ringbus, sub, messages, lost}, state),
    do: state |> write(Session.deliver(state.session, sub, messages, lost)) |> noreply()

  def handle_info({:ringbus_closed, sub, reason}, state) do
    {frames, session} = Session.closed(state.session, sub, reason)
    %{state | session: session} |> write(frames) |> noreply()
  end

  # No socket came within the handshake timeout.
  def handle_info(:timeout, %{socket: nil} = state), do: {:stop, :normal, state}

  def handle_info(:timeout, %{out_bytes: 0} = state) do
    if remaining(state.deadline) == 0,
      do: fatal(state, Session.fatal_frame(state.session, :timeout)),
      else: noreply(state)
  end

  def handle_info(:timeout, state), do: state |> flush() |> noreply()

  def handle_info({:inet_reply, _socket, :ok}, state), do: noreply(state)

  def handle_info({:inet_reply, _socket, {:error, :timeout}}, state),
    do: close(state, :send_timeout)

  def handle_info({:inet_reply, _socket, {:error, _reason}}, state),
    do: close(state, :socket_error)

  def handle_info({closed, _socket}, state) when closed in [:tcp_closed, :ssl_closed],
    do: close(state, :peer_closed)

  def handle_info({error, _socket, _reason}, state) when error in [:tcp_error, :ssl_error],
    do: close(state, :socket_error)

  def handle_info(_unexpected, state), do: noreply(state)

  @impl true
  def terminate(reason, %{socket: socket} = state) when socket != nil do
    # Before the supervisor's kill, with a margin.
    deadline = now() + state.config.shutdown_timeout - 100

    state =
      with true <- shutdown?(reason),
           {:ok, state} <- answer_queued(state) do
        state = state |> write(Session.shutdown_frames(state.session)) |> flush()
        # The client may still be sending: a plain close would reset the
        # connection and could lose the acks and the ERROR frame.
        Transport.close_gracefully(state.kind, state.socket, remaining(deadline))
        %{state | stats: Stats.closing(state.stats, :shutting_down)}
      else
        false -> state
        {:stop, _normal, state} -> state
      end

    # Every stop but a crash has given its reason to close/2 already.
    Stats.closed(state.stats, :crashed)
  end

  def terminate(_reason, _state), do: :ok

  defp shutdown?(reason), do: reason == :shutdown or match?({:shutdown, _}, reason)

  # What reached the mailbox before the shutdown: the few reads the socket
  # delivers before it must be armed again, and deliveries within the credit
  # given.
  # {:ok, state}, or the stop of a session that closed the connection itself.
  defp answer_queued(%{socket: socket} = state) do
    receive do
      {tag, ^socket, data} when tag in [:tcp, :ssl] ->
        case Decoder.feed(state.decoder, data) do
          {:ok, frames, decoder} -> answer(frames, %{state | decoder: decoder})
          {:error, _reason, frames} -> answer(frames, state)
        end

      {:ringbus, sub, messages, lost} ->
        answer_queued(write(state, Session.deliver(state.session, sub, messages, lost)))
    after
      0 -> {:ok, state}
    end
  end

  defp answer(frames, state) do
    with {:ok, state} <- run(frames, state), do: answer_queued(state)
  end

  ## Reads

  # Runs the frames of one read through the session and queues its answers:
  # {:ok, state}, or the stop after a connection error.
  defp run([], state), do: {:ok, state}

  defp run(frames, state) do
    {status, out, session} = Session.handle(frames, state.session)
    stats = if Session.open?(session), do: Stats.open(state.stats), else: state.stats
    state = write(%{state | session: session, stats: stats}, out)

    case status do
      :ok -> {:ok, state}
      {:close, reason} -> state |> flush() |> close(reason)
    end
  end

  # A client that fills reads is a busy producer: its connection keeps a
  # heap of a word for every byte of a read from then on, room for the
  # frames of a full read, so handling one takes no garbage collection (with
  # the default small heap, the collections a read set off cost about as much
  # as the read itself). Other connections keep the default heap.
  defp busy(%{busy?: false, config: %{buffer_size: size}} = state, data)
       when byte_size(data) * 2 >= size do
    Process.flag(:min_heap_size, size)
    %{state | busy?: true}
  end

  defp busy(state, _data), do: state

  defp after_read({:ok, state}, got_frames?) do
    state = if got_frames?, do: touch(state), else: state
    state |> flush() |> noreply()
  end

  defp after_read(stop, _got_frames?), do: stop

  # A frame came: the next must be complete within the idle timeout.
  defp touch(%{config: %{idle_timeout: :infinity}} = state), do: %{state | deadline: :infinity}

  defp touch(%{config: %{idle_timeout: idle}} = state) do
    if Session.open?(state.session), do: %{state | deadline: now() + idle}, else: state
  end

  ## Output

  defp write(state, []), do: state

  defp write(state, frames) do
    {data, bytes} = encode(frames, [], 0)
    stats = Stats.wrote(state.stats, frames)
    state = %{state | out: [state.out | data], out_bytes: state.out_bytes + bytes, stats: stats}

    if state.out_bytes >= @flush_bytes,
      do: flush(state),
      else: %{state | stats: Stats.pending(state.stats, state.out_bytes)}
  end

  defp encode([frame | rest], acc, bytes) do
    data = Frame.encode(frame)
    encode(rest, [acc | data], bytes + IO.iodata_length(data))
  end

  defp encode([], acc, bytes), do: {acc, bytes}

  defp flush(%{out_bytes: 0} = state), do: state

  defp flush(state) do
    # A failed write shows up as the socket's closed message; a TLS write
    # that timed out also says why here.
    stats =
      case Ringbus.Socket.send(state.kind, state.socket, state.out) do
        {:error, :timeout} -> Stats.closing(state.stats, :send_timeout)
        _ -> Stats.flushed(state.stats, state.out_bytes)
      end

    %{state | out: [], out_bytes: 0, stats: stats}
  end

  # Output waiting: come back when the mailbox is empty. Otherwise sleep
  # until the deadline.
  defp noreply(%{out_bytes: 0} = state), do: {:noreply, state, remaining(state.deadline)}
  defp noreply(state), do: {:noreply, state, 0}

  # A connection error: say why, write what is pending, and close.
  defp fatal(state, {reason, frame}), do: state |> write([frame]) |> flush() |> close(reason)

  # `reason` is why, for the figures and the log line (`Ringbus.Server.Stats`).
  defp close(%{socket: nil} = state, _reason), do: {:stop, :normal, state}

  defp close(state, reason) do
    Ringbus.Socket.close(state.kind, state.socket)
    {:stop, :normal, %{state | stats: Stats.closing(state.stats, reason)}}
  end

  defp remaining(:infinity), do: :infinity
  defp remaining(deadline), do: max(deadline - now(), 0)

  defp now, do: System.monotonic_time(:millisecond)
end
