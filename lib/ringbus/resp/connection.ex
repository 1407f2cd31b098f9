defmodule Ringbus.Resp.Connection do
  @moduledoc false
  # The process of one RESP client: it owns the socket, the parser, the
  # output buffer, the deadlines and the timer of a waiting command, and
  # hands every parsed command to `Ringbus.Resp.Session`, which holds the
  # protocol. It reads and writes as `Ringbus.Server.Connection` does:
  #
  # Reads. The socket delivers a few reads at a time as messages (see
  # `Ringbus.Socket.activate/2`), each carrying whatever the kernel has; the
  # parser returns every command in a read, the session answers them all,
  # and the answers go out with one socket write. The socket is armed again
  # when it says it has gone passive.
  #
  # Writes. Replies and the answers of commands that waited collect as
  # iodata and go out with one write after each read, when the mailbox is
  # empty (gen_server's timeout of 0), or when 64 KiB have piled up. TCP
  # writes go to the port without waiting (see `Ringbus.Socket`).
  #
  # Waiting commands (XREAD BLOCK). The session subscribes to the streams
  # and says how long to wait; batches arrive as `{:ringbus, sub, messages,
  # lost}` messages like any other, and a timer ends the wait. Meanwhile the
  # socket stays armed, so that a client that hangs up is noticed, but the
  # reads that arrive are held, not parsed, until the wait ends; the socket
  # is armed again only once they have run, so what queues here stays
  # bounded by the reads of one arming and one subscription batch.
  #
  # Backlog safety. No selective receive on the path: every message is taken
  # in arrival order by gen_server's loop, the calls the session makes wait
  # on fresh references, and the queue is off the heap.
  #
  # Time limits. A TLS handshake, and when tokens are required AUTH, must be
  # done within `handshake_timeout`; after that each command must be
  # complete within `idle_timeout` of the one before, except while a command
  # waits. Shutdown: it traps exits; the reads already taken in are
  # answered, then `-ERR the server is shutting down`, and the socket closes
  # gracefully (`Ringbus.Server.Transport.close_gracefully/3`).
  #
  # Figures and logs go through `Ringbus.Server.Stats`, as for the binary
  # protocol: a command counts as a frame in, a reply as a frame out.

  use GenServer, restart: :temporary

  alias Ringbus.Resp.{Parser, Session}
  alias Ringbus.Server.{Config, Stats, Transport}

  @flush_bytes 64 * 1024
  # Before AUTH, when tokens are required: the limits Redis puts on
  # unauthenticated clients.
  @anonymous_args 16
  @anonymous_bulk 16 * 1024
  @max_args 1_048_576

  @spec start_link({Config.t(), Session.context()}) :: GenServer.on_start()
  def start_link(arg) do
    GenServer.start_link(__MODULE__, arg, spawn_opt: [message_queue_data: :off_heap])
  end

  @doc "Hands an accepted socket to the connection process that now owns it."
  @spec hand_over(pid(), Transport.kind(), Transport.socket()) :: :ok
  def hand_over(pid, kind, socket) do
    send(pid, {:ringbus_socket, kind, socket})
    :ok
  end

  ## Init

  @impl true
  def init({%Config{} = config, context}) do
    Process.flag(:trap_exit, true)
    session = Session.new(config, context)
    max = config.max_frame_size

    parser =
      if Session.authenticated?(session),
        do: Parser.new(@max_args, max, max),
        else: Parser.new(@anonymous_args, @anonymous_bulk, max)

    state = %{
      config: config,
      kind: nil,
      socket: nil,
      parser: parser,
      session: session,
      deadline: now() + config.handshake_timeout,
      # Reads that came while a command waited, newest first; whether the
      # socket went passive meanwhile; the wait's timer.
      held: [],
      passive: false,
      timer: nil,
      out: [],
      out_bytes: 0,
      stats: nil
    }

    {:ok, state, config.handshake_timeout}
  end

  ## Messages

  @impl true
  def handle_info({:ringbus_socket, kind, socket}, state) do
    with {:ok, socket} <- Transport.handshake(kind, socket, remaining(state.deadline)),
         :ok <- Ringbus.Socket.activate(kind, socket) do
      stats = Stats.opened(state.config.counters, :resp, kind, socket)
      state = opened(%{state | kind: kind, socket: socket, stats: stats})
      noreply(if Session.authenticated?(state.session), do: touch(state), else: state)
    else
      _ -> {:stop, :normal, state}
    end
  end

  def handle_info({tag, socket, data}, %{socket: socket} = state) when tag in [:tcp, :ssl] do
    if Session.blocked?(state.session),
      do: noreply(%{state | held: [data | state.held]}),
      else: read(data, state)
  end

  # The reads asked for have come: ask for more, unless reads are held
  # behind a waiting command.
  def handle_info({passive, socket}, %{socket: socket} = state)
      when passive in [:tcp_passive, :ssl_passive] do
    if state.held == [], do: rearm(state), else: noreply(%{state | passive: true})
  end

  def handle_info({:ringbus, sub, messages, lost}, state),
    do: state |> after_session(Session.deliver(state.session, sub, messages, lost)) |> resumed()

  def handle_info({:ringbus_closed, sub, reason}, state),
    do: state |> after_session(Session.closed(state.session, sub, reason)) |> resumed()

  def handle_info({:resp_timeout, token}, state),
    do: state |> after_session(Session.timeout(state.session, token)) |> resumed()

  # No socket came within the handshake timeout.
  def handle_info(:timeout, %{socket: nil} = state), do: {:stop, :normal, state}

  def handle_info(:timeout, %{out_bytes: 0} = state) do
    reason = if Session.authenticated?(state.session), do: :idle_timeout, else: :handshake_timeout

    if remaining(state.deadline) == 0,
      do: fatal(state, Session.fatal(state.session, :timeout), reason),
      else: noreply(state)
  end

  def handle_info(:timeout, state), do: state |> flush() |> noreply()

  def handle_info({:inet_reply, _socket, :ok}, state), do: noreply(state)

  def handle_info({:inet_reply, _socket, {:error, reason}}, state),
    do: close(state, if(reason == :timeout, do: :send_timeout, else: :socket_error))

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
        state = state |> write(Session.fatal(state.session, :shutting_down)) |> flush()
        # The client may still be sending: a plain close would reset the
        # connection and could lose the last replies.
        Transport.close_gracefully(state.kind, state.socket, remaining(deadline))
        %{state | stats: Stats.closing(state.stats, :shutting_down)}
      else
        false -> state
        {:stop, _normal, state} -> state
      end

    Session.gone(Session.cancel(state.session))
    # Every stop but a crash has given its reason to close/2 already.
    Stats.closed(state.stats, :crashed)
  end

  def terminate(_reason, state) do
    Session.gone(state.session)
    :ok
  end

  defp shutdown?(reason), do: reason == :shutdown or match?({:shutdown, _}, reason)

  # What reached the mailbox before the shutdown: the few reads the socket
  # delivers before it must be armed again. A waiting command's reads stay
  # unanswered.
  defp answer_queued(%{session: %{blocked: nil}, socket: socket} = state) do
    receive do
      {tag, ^socket, data} when tag in [:tcp, :ssl] ->
        case Parser.feed(state.parser, data) do
          {:ok, commands, parser} ->
            state = %{state | parser: parser} |> counted(commands, data)
            with {:ok, state} <- run(state, commands), do: answer_queued(state)

          {:error, _message, commands} ->
            state |> counted(commands, data) |> run(commands)
        end
    after
      0 -> {:ok, state}
    end
  end

  defp answer_queued(state), do: {:ok, state}

  ## Reads

  defp read(data, state) do
    case Parser.feed(state.parser, data) do
      {:ok, commands, parser} ->
        %{state | parser: parser}
        |> counted(commands, data)
        |> run(commands)
        |> after_read(commands != [])

      {:error, message, commands} ->
        with {:ok, state} <- state |> counted(commands, data) |> run(commands) do
          fatal(state, Session.fatal(state.session, message), :bad_frame)
        end
    end
  end

  # The commands of a read count in, and their replies out.
  defp counted(state, commands, data) do
    stats = Stats.read(state.stats, commands, byte_size(data))
    %{state | stats: Stats.replied(stats, stats.frames_in - state.stats.frames_in)}
  end

  defp run(state, []), do: {:ok, state}
  defp run(state, commands), do: after_session(state, Session.handle(commands, state.session))

  # Queues what the session wrote, and follows its status: {:ok, state} or
  # the stop after QUIT.
  defp after_session(state, {status, out, session}) do
    state = state |> Map.put(:session, session) |> opened() |> unlimit() |> write(out)

    case status do
      :ok -> {:ok, cancel_timer(state)}
      {:block, token, timeout} -> {:ok, arm_timer(state, token, timeout)}
      {:close, _quit} -> state |> flush() |> close(:peer_closed)
    end
  end

  # Authenticated (or needing not): the connection counts as open.
  defp opened(state) do
    if Session.authenticated?(state.session),
      do: %{state | stats: Stats.open(state.stats)},
      else: state
  end

  defp after_read({:ok, state}, got_commands?) do
    state = if got_commands?, do: touch(state), else: state
    state |> flush() |> noreply()
  end

  defp after_read(stop, _got_commands?), do: stop

  # A wait may have ended: if so, the reads held meanwhile run now, oldest
  # first, and the socket is armed again if it went passive.
  defp resumed({:ok, state}) do
    cond do
      Session.blocked?(state.session) -> noreply(state)
      state.held != [] -> run_held(:lists.reverse(state.held), %{state | held: []})
      state.passive -> rearm(touch(state))
      true -> noreply(touch(state))
    end
  end

  defp resumed(stop), do: stop

  defp run_held([data | rest], state) do
    case read(data, state) do
      {:noreply, state, _timeout} when rest != [] ->
        if Session.blocked?(state.session),
          do: noreply(%{state | held: :lists.reverse(rest)}),
          else: run_held(rest, state)

      {:noreply, state, _timeout} ->
        if state.passive and not Session.blocked?(state.session),
          do: rearm(state),
          else: noreply(state)

      stop ->
        stop
    end
  end

  defp rearm(state) do
    case Ringbus.Socket.activate(state.kind, state.socket) do
      :ok -> noreply(%{state | passive: false})
      {:error, :closed} -> close(state, :peer_closed)
      {:error, _} -> close(state, :socket_error)
    end
  end

  # Authenticated: the parser takes the server's full limits from now on.
  defp unlimit(%{parser: %{max_args: @anonymous_args} = parser} = state) do
    if Session.authenticated?(state.session) do
      max = state.config.max_frame_size
      %{state | parser: Parser.limit(parser, @max_args, max)}
    else
      state
    end
  end

  defp unlimit(state), do: state

  defp arm_timer(%{timer: {token, _}} = state, token, _timeout), do: state

  defp arm_timer(state, token, timeout) do
    state = cancel_timer(state)

    ref =
      if timeout == :infinity,
        do: nil,
        else: Process.send_after(self(), {:resp_timeout, token}, timeout)

    %{state | timer: {token, ref}}
  end

  defp cancel_timer(%{timer: nil} = state), do: state

  defp cancel_timer(%{timer: {_token, ref}} = state) do
    if ref, do: Process.cancel_timer(ref)
    %{state | timer: nil}
  end

  # A command came: the next must be complete within the idle timeout.
  defp touch(%{config: %{idle_timeout: :infinity}} = state), do: %{state | deadline: :infinity}

  defp touch(%{config: %{idle_timeout: idle}} = state) do
    if Session.authenticated?(state.session), do: %{state | deadline: now() + idle}, else: state
  end

  ## Output

  defp write(state, []), do: state

  defp write(state, data) do
    state = %{
      state
      | out: [state.out | data],
        out_bytes: state.out_bytes + IO.iodata_length(data)
    }

    if state.out_bytes >= @flush_bytes, do: flush(state), else: state
  end

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

  # Output waiting: come back when the mailbox is empty. A waiting command
  # has no deadline; otherwise sleep until the deadline.
  defp noreply(%{out_bytes: 0} = state) do
    if Session.blocked?(state.session),
      do: {:noreply, state},
      else: {:noreply, state, remaining(state.deadline)}
  end

  defp noreply(state), do: {:noreply, state, 0}

  # A connection error: say why, write what is pending, and close.
  defp fatal(state, reply, reason), do: state |> write(reply) |> flush() |> close(reason)

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
