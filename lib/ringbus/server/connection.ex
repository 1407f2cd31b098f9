defmodule Ringbus.Server.Connection do
  @moduledoc false
  # The process of one client connection, whatever its protocol: it owns the
  # socket, the reads, the output buffer, the deadlines and the figures, and
  # hands bytes and messages to its protocol module (`Ringbus.Server.Protocol`:
  # the binary protocol's or RESP's), which holds the rest.
  #
  # It is a GenServer, so `:sys.get_state/1` and `:sys.suspend/1` work on it,
  # and gen_server's loop takes every message in arrival order. Its state's
  # `session` is the protocol's session.
  #
  # Reads. The socket delivers reads as messages, a number at a time: many
  # while reads are small, few once they fill the buffer (see
  # `Ringbus.Socket.reads/2`), each carrying whatever the kernel has, up to
  # the large user buffer. The protocol decodes every item of a read and
  # answers them all; the socket is armed again when it says it has gone
  # passive. A read that comes while more messages wait behind it is queued,
  # and the queued reads are decoded and answered as one once the mailbox
  # has emptied (64 KiB of them at most): a connection that falls behind
  # pays one run of its protocol and one write per turn of its mailbox, not
  # one per read, as a server that reads all a socket holds when it gets to
  # it. While the protocol waits (a blocked XREAD), reads are held, not
  # decoded, and the socket stays armed so that a hang-up is noticed; it is
  # armed again only once the held reads have run, so what queues here stays
  # bounded by the reads of one arming.
  #
  # Writes. Output collects as iodata and goes out with one socket write
  # when the mailbox is empty (gen_server's timeout of 0 fires only then),
  # after a read that nothing waits behind, and whenever 64 KiB have piled
  # up. Never one write per message.
  #
  # Backlog safety. No selective receive: TCP writes go to the port without
  # waiting for its reply (see `Ringbus.Socket.TCP`), and the calls a session
  # makes (create, delete, subscribe, unsubscribe) wait on a fresh reference,
  # which the runtime matches without scanning older messages. What can queue
  # here is bounded: the reads the socket delivers before it must be
  # armed again and, per subscription, the credit the client gave. The queue
  # is off the heap, so queued deliveries take no part in the process's
  # garbage collections. A write that waits past `:send_timeout` on a client
  # that does not read closes the connection.
  #
  # Time limits. The TLS handshake and the protocol's own (HELLO, AUTH) must
  # be done within `handshake_timeout`, and after it each read that holds
  # an item must come within `idle_timeout` of the one before; a client that
  # trickles bytes runs into the same deadline. No deadline while the
  # protocol waits.
  #
  # Shutdown. It traps exits, so when the server stops, its supervisor's
  # shutdown reaches `terminate/2`: the reads already taken in are answered
  # (unless the protocol waits), deliveries already here are written, then
  # the protocol's last words (`fatal(:shutting_down, session)`), and the
  # socket closes once the client has read it all (see
  # `Ringbus.Server.Transport.close_gracefully/3`). The server's
  # `:shutdown_timeout` bounds all of it.
  #
  # Figures and logs. `Ringbus.Server.Stats` counts every read and write in
  # the listener's counters and keeps this connection's tally, which it logs
  # in one line when the connection closes, with the reason `close/2` gave.

  use GenServer, restart: :temporary

  alias Ringbus.Server.{Protocol, Stats, Transport}

  @flush_bytes 64 * 1024
  @queued_bytes 64 * 1024
  # A frame larger than this, which came in several reads, is followed by a
  # garbage collection (see `collected/2`).
  @collect_after 1024 * 1024

  @spec start_link(Protocol.t()) :: GenServer.on_start()
  def start_link(%Protocol{} = protocol) do
    GenServer.start_link(__MODULE__, protocol, spawn_opt: [message_queue_data: :off_heap])
  end

  @doc "Hands an accepted socket to the connection process that now owns it."
  @spec hand_over(pid(), Ringbus.Socket.t(), Ringbus.Socket.socket()) :: :ok
  def hand_over(pid, transport, socket) do
    send(pid, {:ringbus_socket, transport, socket})
    :ok
  end

  ## Init

  @impl true
  def init(%Protocol{name: name, module: module, config: config, arg: arg}) do
    Process.flag(:trap_exit, true)
    {codec, session} = module.init(config, arg)

    state = %{
      config: config,
      protocol: name,
      module: module,
      # The socket's transport (`Ringbus.Socket`) and the tags of its messages.
      transport: nil,
      messages: nil,
      socket: nil,
      codec: codec,
      session: session,
      deadline: now() + config.handshake_timeout,
      # While the protocol waits: the reads held, newest first. Whether the
      # socket went passive and waits to be armed again.
      waiting?: false,
      held: [],
      passive?: false,
      # Reads that came while more messages waited, newest first, to run as
      # one once the mailbox empties (see `later?/2`).
      queued: [],
      queued_bytes: 0,
      out: [],
      out_bytes: 0,
      stats: nil,
      busy?: false,
      # The largest read since the socket was last armed (`Ringbus.Socket.reads/2`).
      largest_read: 0,
      # Bytes of the reads since the last one that completed an item: the
      # part of a frame that spans reads.
      partial: 0,
      collect?: false
    }

    {:ok, state, config.handshake_timeout}
  end

  ## Messages

  @impl true
  def handle_continue(:collect, state) do
    :erlang.garbage_collect()
    noreply(state)
  end

  @impl true
  def handle_info({:ringbus_socket, transport, socket}, state) do
    with {:ok, socket} <- transport.handshake(socket, remaining(state.deadline)),
         :ok <- transport.setopts(socket, active: first_reads(state)) do
      stats = Stats.opened(state.config.counters, state.protocol, transport, socket)
      messages = transport.messages()

      state =
        opened(%{state | transport: transport, messages: messages, socket: socket, stats: stats})

      noreply(if state.module.open?(state.session), do: touch(state), else: state)
    else
      _ -> {:stop, :normal, state}
    end
  end

  def handle_info({tag, socket, data}, %{socket: socket, messages: {tag, _, _, _}} = state) do
    state = %{state | largest_read: max(state.largest_read, byte_size(data))}

    cond do
      state.waiting? -> noreply(%{state | held: [data | state.held]})
      later?(state, data) -> noreply(queue(state, data))
      true -> state |> queue(data) |> run_queued() |> continue()
    end
  end

  # The mailbox is empty: the reads queued meanwhile run, as one.
  def handle_info(:timeout, %{queued: [_ | _]} = state), do: state |> run_queued() |> continue()

  def handle_info({:inet_reply, _socket, :ok}, state), do: noreply(state)

  # Any other message comes after the reads queued before it.
  def handle_info(message, %{queued: [_ | _]} = state) do
    case run_queued(state) do
      {:ok, state} -> handle_info(message, state)
      stop -> stop
    end
  end

  # The reads asked for have come: ask for more, unless reads are held
  # behind a waiting command.
  def handle_info({passive, socket}, %{socket: socket, messages: {_, passive, _, _}} = state) do
    if state.held == [], do: rearm(state), else: noreply(%{state | passive?: true})
  end

  # No socket came within the handshake timeout.
  def handle_info(:timeout, %{socket: nil} = state), do: {:stop, :normal, state}

  def handle_info(:timeout, %{out_bytes: 0} = state) do
    if remaining(state.deadline) == 0,
      do: fatal(state, :timeout),
      else: noreply(state)
  end

  def handle_info(:timeout, state), do: state |> flush() |> noreply()

  def handle_info({:inet_reply, _socket, {:error, :timeout}}, state),
    do: close(state, :send_timeout)

  def handle_info({:inet_reply, _socket, {:error, _reason}}, state),
    do: close(state, :socket_error)

  def handle_info({closed, _socket}, %{messages: {_, _, closed, _}} = state),
    do: close(state, :peer_closed)

  def handle_info({error, _socket, _reason}, %{messages: {_, _, _, error}} = state),
    do: close(state, :socket_error)

  # Subscription batches, closed subscriptions, the protocol's timers.
  def handle_info(message, state) do
    state
    |> after_session(state.module.handle_message(message, state.session))
    |> resumed(state.waiting?)
  end

  @impl true
  def terminate(reason, %{socket: socket} = state) when socket != nil do
    # Before the supervisor's kill, with a margin.
    deadline = now() + state.config.shutdown_timeout - 100

    state =
      with true <- shutdown?(reason),
           {:ok, state} <- answer_queued(state) do
        {_reason, out} = state.module.fatal(:shutting_down, state.session)
        state = state |> write(out) |> flush()
        # The client may still be sending: a plain close would reset the
        # connection and could lose the last answers.
        Transport.close_gracefully(state.transport, state.socket, remaining(deadline))
        %{state | stats: Stats.closing(state.stats, :shutting_down)}
      else
        false -> state
        {:stop, _normal, state} -> state
      end

    state.module.terminate(state.session)
    # Every stop but a crash has given its reason to close/2 already.
    Stats.closed(state.stats, :crashed)
  end

  def terminate(_reason, state), do: state.module.terminate(state.session)

  defp shutdown?(reason), do: reason == :shutdown or match?({:shutdown, _}, reason)

  # What reached the mailbox before the shutdown: the reads the socket
  # delivers before it must be armed again, and deliveries within the credit
  # given. A waiting command's reads stay unanswered.
  # {:ok, state}, or the stop of a session that closed the connection itself.
  defp answer_queued(%{waiting?: true} = state), do: {:ok, state}

  defp answer_queued(%{queued: [_ | _]} = state) do
    with {:ok, state} <- run_queued(state), do: answer_queued(state)
  end

  defp answer_queued(%{socket: socket, messages: {tag, _, _, _}} = state) do
    receive do
      {^tag, ^socket, data} ->
        case decode(state, data, System.monotonic_time()) do
          {:ok, items, state} -> with {:ok, state} <- run(state, items), do: answer_queued(state)
          {:error, _reason, items, state} -> run(state, items)
        end

      {:ringbus, _sub, _messages, _lost} = delivery ->
        with {:ok, state} <-
               after_session(state, state.module.handle_message(delivery, state.session)),
             do: answer_queued(state)
    after
      0 -> {:ok, state}
    end
  end

  ## Reads

  # Whether this read waits in the queue: more messages wait behind it, and
  # the queue holds less than `@queued_bytes` with it (see "Reads" above).
  defp later?(state, data) do
    state.queued_bytes + byte_size(data) < @queued_bytes and
      Process.info(self(), :message_queue_len) != {:message_queue_len, 0}
  end

  defp queue(state, data),
    do: %{
      state
      | queued: [data | state.queued],
        queued_bytes: state.queued_bytes + byte_size(data)
    }

  defp run_queued(%{queued: queued} = state) do
    data =
      if match?([_], queued), do: hd(queued), else: IO.iodata_to_binary(:lists.reverse(queued))

    %{state | queued: [], queued_bytes: 0} |> busy(data) |> read(data)
  end

  # {:ok, state} with the answers written, or the stop.
  defp read(state, data) do
    # Acks are timed from here (ringbus_server_push_ack_seconds).
    arrived = System.monotonic_time()

    case decode(state, data, arrived) do
      {:ok, [], state} ->
        after_read({:ok, %{state | partial: state.partial + byte_size(data)}}, false)

      {:ok, items, state} ->
        state |> run(items) |> after_read(true) |> collected(state.partial)

      {:error, reason, items, state} ->
        with {:ok, state} <- run(state, items), do: fatal(state, reason)
    end
  end

  # Decodes a read and counts it with its items.
  defp decode(%{module: module} = state, data, arrived) do
    counted = fn items, codec ->
      stats = Stats.read(state.stats, items, byte_size(data), arrived)
      %{state | codec: codec, stats: module.count(items, stats)}
    end

    case module.decode(data, state.codec, state.session) do
      {:ok, items, codec} -> {:ok, items, counted.(items, codec)}
      {:error, reason, items, codec} -> {:error, reason, items, counted.(items, codec)}
    end
  end

  defp run(state, []), do: {:ok, state}

  defp run(state, items),
    do: after_session(state, state.module.handle_items(items, state.session))

  # Queues what the session wrote and follows its answer: {:ok, state}, or
  # the stop after it closed the connection.
  defp after_session(state, {action, out, session}) do
    state = %{state | session: session} |> opened() |> write(out)

    case action do
      :continue -> {:ok, %{state | waiting?: false}}
      :wait -> {:ok, %{state | waiting?: true}}
      {:close, reason} -> state |> flush() |> close(reason)
    end
  end

  # The handshake is done: the connection counts as open.
  defp opened(state) do
    if state.module.open?(state.session),
      do: %{state | stats: Stats.open(state.stats)},
      else: state
  end

  defp after_read({:ok, state}, got_items?) do
    state = if got_items?, do: touch(state), else: state
    {:ok, flush_unless_queued(state)}
  end

  defp after_read(stop, _got_items?), do: stop

  # Answers go out at once unless messages wait here: then they go with
  # what those add, once the mailbox has emptied (`noreply/1`'s timeout of 0).
  defp flush_unless_queued(state) do
    case Process.info(self(), :message_queue_len) do
      {:message_queue_len, 0} -> flush(state)
      _queued -> state
    end
  end

  # A frame that spanned reads of `partial` bytes is handled: its reads, the
  # binary they were joined into and what it took to handle it are garbage
  # now, but a heap that rarely collects would keep them (and the binaries
  # it references) for as long as the connection lives. The collection runs
  # once the callback has returned (`handle_continue/2`): until then
  # gen_server holds the state the read came to, and its reads with it.
  defp collected({:ok, state}, partial) when partial >= @collect_after,
    do: {:ok, %{state | partial: 0, collect?: true}}

  defp collected({:ok, state}, _partial), do: {:ok, %{state | partial: 0}}
  defp collected(stop, _partial), do: stop

  # After a message: if it ended a wait, the reads held meanwhile run now,
  # oldest first, and the socket is armed again if it went passive.
  defp resumed({:ok, %{waiting?: true} = state}, _was_waiting?), do: noreply(state)
  defp resumed({:ok, state}, false), do: noreply(state)

  defp resumed({:ok, %{held: []} = state}, true) do
    state = touch(state)
    if state.passive?, do: rearm(state), else: noreply(state)
  end

  defp resumed({:ok, state}, true), do: run_held(:lists.reverse(state.held), %{state | held: []})
  defp resumed(stop, _was_waiting?), do: stop

  defp run_held([data | rest], state) do
    case read(state, data) do
      {:ok, %{waiting?: true} = state} -> noreply(%{state | held: :lists.reverse(rest)})
      {:ok, state} when rest != [] -> run_held(rest, state)
      {:ok, %{passive?: true} = state} -> rearm(state)
      {:ok, state} -> noreply(state)
      stop -> stop
    end
  end

  defp continue({:ok, state}), do: noreply(state)
  defp continue(stop), do: stop

  defp first_reads(state), do: Ringbus.Socket.reads(0, state.config.buffer_size)

  defp rearm(state) do
    reads = Ringbus.Socket.reads(state.largest_read, state.config.buffer_size)

    case state.transport.setopts(state.socket, active: reads) do
      :ok -> noreply(%{state | passive?: false, largest_read: 0})
      {:error, :closed} -> close(state, :peer_closed)
      {:error, _} -> close(state, :socket_error)
    end
  end

  # A client that fills reads is a busy producer: its connection keeps a
  # heap of a word for every byte of a read from then on, room for the
  # items of a full read, so handling one takes no garbage collection (with
  # the default small heap, the collections a read set off cost about as much
  # as the read itself). Other connections keep the default heap.
  defp busy(%{busy?: false, config: %{buffer_size: size}} = state, data)
       when byte_size(data) * 2 >= size do
    Process.flag(:min_heap_size, size)
    %{state | busy?: true}
  end

  defp busy(state, _data), do: state

  # An item came: the next must be complete within the idle timeout.
  defp touch(%{config: %{idle_timeout: :infinity}} = state), do: %{state | deadline: :infinity}

  defp touch(%{config: %{idle_timeout: idle}} = state) do
    if state.module.open?(state.session),
      do: %{state | deadline: now() + idle},
      else: state
  end

  ## Output

  defp write(state, []), do: state

  defp write(state, out) do
    {data, bytes, stats} = state.module.encode(out, state.stats)
    state = %{state | out: [state.out | data], out_bytes: state.out_bytes + bytes, stats: stats}

    if state.out_bytes >= @flush_bytes,
      do: flush(state),
      else: %{state | stats: Stats.pending(state.stats, state.out_bytes)}
  end

  defp flush(%{out_bytes: 0} = state), do: state

  defp flush(state) do
    # A failed write shows up as the socket's closed message; a TLS write
    # that timed out also says why here.
    stats =
      case state.transport.send(state.socket, state.out) do
        {:error, :timeout} -> Stats.closing(state.stats, :send_timeout)
        _ -> Stats.flushed(state.stats, state.out_bytes)
      end

    %{state | out: [], out_bytes: 0, stats: stats}
  end

  # Output waiting: come back when the mailbox is empty. A waiting command
  # has no deadline; otherwise sleep until the deadline.
  defp noreply(%{collect?: true} = state),
    do: {:noreply, %{state | collect?: false}, {:continue, :collect}}

  defp noreply(%{queued: [_ | _]} = state), do: {:noreply, state, 0}

  defp noreply(%{out_bytes: 0, waiting?: true} = state), do: {:noreply, state}
  defp noreply(%{out_bytes: 0} = state), do: {:noreply, state, remaining(state.deadline)}
  defp noreply(state), do: {:noreply, state, 0}

  # A connection error (a decoding error, a deadline): say why, write what
  # is pending, and close.
  defp fatal(state, reason) do
    {close_reason, out} = state.module.fatal(reason, state.session)
    state |> write(out) |> flush() |> close(close_reason)
  end

  # `reason` is why, for the figures and the log line (`Ringbus.Server.Stats`).
  defp close(%{socket: nil} = state, _reason), do: {:stop, :normal, state}

  defp close(state, reason) do
    state.transport.close(state.socket)
    {:stop, :normal, %{state | stats: Stats.closing(state.stats, reason)}}
  end

  defp remaining(:infinity), do: :infinity
  defp remaining(deadline), do: max(deadline - now(), 0)

  defp now, do: System.monotonic_time(:millisecond)
end
