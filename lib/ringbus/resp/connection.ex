defmodule Ringbus.Resp.Connection do
  @moduledoc false
  # The process of one RESP client: it owns the socket, the parser, the
  # output buffer, the deadlines and the timer of a waiting command, and
  # hands every parsed command to `Ringbus.Resp.Session`, which holds the
  # protocol. It reads and writes as `Ringbus.Server.Connection` does:
  #
  # Reads. The socket is in `active: :once` mode with a large user buffer,
  # so one message carries whatever the kernel has; the parser returns every
  # command in it, the session answers them all, the answers go out with one
  # socket write, and the socket is armed again.
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
  # one read that may arrive is held, not parsed, until the wait ends: what
  # queues here stays bounded by one read and one subscription batch.
  #
  # Backlog safety. No selective receive on the path: every message is taken
  # in arrival order by gen_server's loop, the calls the session makes wait
  # on fresh references, and the queue is off the heap.
  #
  # Time limits. A TLS handshake, and when tokens are required AUTH, must be
  # done within `handshake_timeout`; after that each command must be
  # complete within `idle_timeout` of the one before, except while a command
  # waits. Shutdown: it traps exits; the read already taken in is answered,
  # then `-ERR the server is shutting down`, and the socket closes.

  use GenServer, restart: :temporary

  alias Ringbus.Resp.{Parser, Session}
  alias Ringbus.Server.{Config, Transport}

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
      # A read that came while a command waited, and the wait's timer.
      held: nil,
      timer: nil,
      out: [],
      out_bytes: 0
    }

    {:ok, state, config.handshake_timeout}
  end

  ## Messages

  @impl true
  def handle_info({:ringbus_socket, kind, socket}, state) do
    with {:ok, socket} <- Transport.handshake(kind, socket, remaining(state.deadline)),
         :ok <- Ringbus.Socket.activate(kind, socket) do
      state = %{state | kind: kind, socket: socket}
      noreply(if Session.authenticated?(state.session), do: touch(state), else: state)
    else
      _ -> {:stop, :normal, state}
    end
  end

  def handle_info({tag, socket, data}, %{socket: socket} = state) when tag in [:tcp, :ssl] do
    if Session.blocked?(state.session),
      do: noreply(%{state | held: data}),
      else: read(data, state)
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
    if remaining(state.deadline) == 0,
      do: fatal(state, Session.fatal(state.session, :timeout)),
      else: noreply(state)
  end

  def handle_info(:timeout, state), do: state |> flush() |> noreply()

  def handle_info({:inet_reply, _socket, :ok}, state), do: noreply(state)
  def handle_info({:inet_reply, _socket, {:error, _reason}}, state), do: close(state)

  def handle_info({closed, _socket}, state) when closed in [:tcp_closed, :ssl_closed],
    do: close(state)

  def handle_info({error, _socket, _reason}, state) when error in [:tcp_error, :ssl_error],
    do: close(state)

  def handle_info(_unexpected, state), do: noreply(state)

  @impl true
  def terminate(reason, %{socket: socket} = state) when socket != nil do
    with true <- shutdown?(reason),
         {:ok, state} <- answer_queued(state) do
      state |> write(Session.fatal(state.session, :shutting_down)) |> flush() |> close()
    end

    Session.gone(Session.cancel(state.session))
    :ok
  end

  def terminate(_reason, state) do
    Session.gone(state.session)
    :ok
  end

  defp shutdown?(reason), do: reason == :shutdown or match?({:shutdown, _}, reason)

  # What reached the mailbox before the shutdown: one read at most (the
  # socket is `active: :once`). A waiting command's read stays unanswered.
  defp answer_queued(%{session: %{blocked: nil}, socket: socket} = state) do
    receive do
      {tag, ^socket, data} when tag in [:tcp, :ssl] ->
        case Parser.feed(state.parser, data) do
          {:ok, commands, parser} -> run(%{state | parser: parser}, commands)
          {:error, _message, commands} -> run(state, commands)
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
        %{state | parser: parser} |> run(commands) |> after_read(commands != [])

      {:error, message, commands} ->
        with {:ok, state} <- run(state, commands) do
          fatal(state, Session.fatal(state.session, message))
        end
    end
  end

  defp run(state, []), do: {:ok, state}
  defp run(state, commands), do: after_session(state, Session.handle(commands, state.session))

  # Queues what the session wrote, and follows its status: {:ok, state} or
  # the stop after QUIT.
  defp after_session(state, {status, out, session}) do
    state = state |> Map.put(:session, session) |> unlimit() |> write(out)

    case status do
      :ok -> {:ok, cancel_timer(state)}
      {:block, token, timeout} -> {:ok, arm_timer(state, token, timeout)}
      {:close, _reason} -> state |> flush() |> close()
    end
  end

  defp after_read({:ok, state}, got_commands?) do
    state = if got_commands?, do: touch(state), else: state
    state = flush(state)

    case Ringbus.Socket.activate(state.kind, state.socket) do
      :ok -> noreply(state)
      {:error, _} -> close(state)
    end
  end

  defp after_read(stop, _got_commands?), do: stop

  # A wait may have ended: if so, the read held meanwhile runs now.
  defp resumed({:ok, state}) do
    cond do
      Session.blocked?(state.session) -> noreply(state)
      state.held != nil -> read(state.held, %{state | held: nil})
      true -> noreply(touch(state))
    end
  end

  defp resumed(stop), do: stop

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
    # A failed write shows up as the socket's closed message.
    Ringbus.Socket.send(state.kind, state.socket, state.out)
    %{state | out: [], out_bytes: 0}
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
  defp fatal(state, reply), do: state |> write(reply) |> flush() |> close()

  defp close(%{socket: nil} = state), do: {:stop, :normal, state}

  defp close(state) do
    Ringbus.Socket.close(state.kind, state.socket)
    {:stop, :normal, state}
  end

  defp remaining(:infinity), do: :infinity
  defp remaining(deadline), do: max(deadline - now(), 0)

  defp now, do: System.monotonic_time(:millisecond)
end
