defmodule Ringbus.Client.Connection do
  @moduledoc false
  # The process behind a `Ringbus.Client`: it owns the socket, writes the
  # requests that callers have encoded, and carries out what
  # `Ringbus.Client.Session` says about each frame the server sends back.
  # See `lib/ringbus/client/README.md` for the process model.
  #
  # Reads. The socket delivers reads as messages, a number at a time (see
  # `Ringbus.Socket.reads/2`); every frame of a read is
  # decoded with `Ringbus.Wire.Decoder` and routed before the socket is armed
  # again.
  #
  # Writes. Callers encode their frames and send the iodata here. It is
  # collected and written with one socket write when the mailbox is empty (a
  # receive with `after 0` in the loop) or when `@flush_bytes` have piled up.
  # Never one write per request.
  #
  # Coalescing. With the client's `:linger`, single async pushes come as
  # payloads, gathered per channel and sent as one PUSH_BATCH (one PUSH when
  # alone) once `:batch_bytes` have gathered, when the mailbox is empty
  # (linger 0) or when the linger timer fires; every other frame first sends
  # what has gathered, so the connection writes frames in the order callers
  # sent them.
  #
  # The loop takes messages in arrival order and never receives selectively:
  # TCP writes go to the port and their `:inet_reply` is an ordinary message.

  alias Ringbus.Client.{Counters, Session}
  alias Ringbus.Wire.{Decoder, Frame}

  @flush_bytes 256 * 1024

  # How long a closing connection waits for pushes whose room was reserved.
  @close_wait 1_000

  # A PUSH_BATCH's bytes besides its name and entries, length prefix
  # included, and each entry's besides its payload.
  @batch_overhead Frame.length_prefix_size() + Frame.push_overhead()
  @entry_overhead Frame.push_batch_entry_overhead()

  @doc """
  Starts the process, unlinked. Requests reach it through `GenServer.call/3`
  (`{:request, corr, data, bytes, action}` and `:close`); it answers them as
  a gen_server would, and `:sys` works on it.
  """
  @spec start(map()) :: {:ok, pid()}
  def start(args) do
    parent = self()

    {:ok, :proc_lib.spawn_opt(__MODULE__, :init, [parent, args], message_queue_data: :off_heap)}
  end

  @doc "Stops a process that never got its socket."
  @spec stop(pid()) :: :ok
  def stop(pid) do
    Process.exit(pid, :kill)
    :ok
  end

  ## Init

  @doc false
  def init(parent, args) do
    %{client: client, transport: transport, socket: socket, owner: owner, limits: limits} = args

    state = %{
      parent: parent,
      session: Session.new(%{client | pid: self()}),
      counters: client.counters,
      # The socket's transport (`Ringbus.Socket`) and the tags of its messages.
      transport: transport,
      messages: transport.messages(),
      socket: socket,
      decoder: Decoder.new(limits.max_frame_size, accept: :responses),
      owner: owner,
      owner_ref: Process.monitor(owner),
      out: [],
      out_bytes: 0,
      # No-ack pushes count as pending until they are written.
      out_no_ack: 0,
      ping_interval: ping_interval(limits.idle_timeout),
      linger: client.linger,
      # Payloads gathered per channel: name => {count, entries, corrs}, the
      # entries encoded for the batch in order, the ids newest first.
      gathered: %{},
      gathered_cap: min(Map.get(args, :batch_bytes, 65_536), limits.max_frame_size),
      buffer_size: Map.get(args, :buffer_size, 1024 * 1024),
      # The largest read since the socket was last armed.
      largest_read: 0,
      linger_timer: nil
    }

    loop(state)
  end

  # The server closes a connection from which no frame came within its idle
  # timeout; pinging at a third of it keeps a quiet client connected.
  defp ping_interval(:infinity), do: nil
  defp ping_interval(idle) when is_integer(idle), do: max(div(idle, 3), 1)

  ## The loop

  # A plain receive loop rather than a gen_server: a coalesced push is one
  # message a payload, and the gen_server's dispatch around each one cost
  # more than gathering it. Messages are taken in arrival order, never
  # selectively. While output waits, a receive with `after 0` writes it once
  # the mailbox is empty.
  defp loop(state) do
    if idle?(state) do
      receive do
        message -> message |> handle(state) |> loop()
      end
    else
      receive do
        message -> message |> handle(state) |> loop()
      after
        0 -> settle(state)
      end
    end
  end

  # The mailbox is empty. Gathered pushes wait one turn of the run queue
  # (a yield) for the callers to add to them before they go out.
  defp settle(%{linger: 0, gathered: gathered} = state) when map_size(gathered) > 0 do
    :erlang.yield()

    receive do
      message -> message |> handle(state) |> loop()
    after
      0 -> state |> drained() |> loop()
    end
  end

  defp settle(state), do: state |> drained() |> loop()

  defp idle?(%{out_bytes: 0, linger: 0, gathered: gathered}), do: map_size(gathered) == 0
  defp idle?(%{out_bytes: bytes}), do: bytes == 0

  # The mailbox is empty: what has gathered (linger 0) and the output go out.
  defp drained(%{linger: 0} = state), do: state |> send_gathered() |> flush()
  defp drained(state), do: flush(state)

  ## Messages

  defp handle({:ringbus_coalesce, channel, payload, corr}, state),
    do: gather(state, channel, payload, corr)

  defp handle({:ringbus_push, data, bytes, corr, count, mode}, state) do
    state =
      case mode do
        :no_ack -> %{state | out_no_ack: state.out_no_ack + count}
        :ack -> %{state | session: Session.async(state.session, corr, count)}
      end

    out(state, data, bytes)
  end

  defp handle({:ringbus_write, data, bytes}, state), do: out(state, data, bytes)

  defp handle({tag, socket, data}, %{socket: socket, messages: {tag, _, _, _}} = state) do
    state = %{state | largest_read: max(state.largest_read, byte_size(data))}

    case Decoder.feed(state.decoder, data) do
      {:ok, frames, decoder} ->
        route(frames, %{state | decoder: decoder})

      {:error, reason, frames} ->
        state = route(frames, state)
        state.transport.close(state.socket)
        down(state, {:bad_frame, reason})
    end
  end

  defp handle({:"$gen_call", from, {:request, corr, data, bytes, action}}, state) do
    state = %{state | session: Session.await(state.session, corr, from, action)}
    out(state, data, bytes)
  end

  defp handle({:"$gen_call", from, :close}, state) do
    state = state |> send_gathered() |> flush()
    state.transport.close(state.socket)
    finish(state, false)
    GenServer.reply(from, :ok)
    exit(:normal)
  end

  defp handle(:linger, state),
    do: %{state | linger_timer: nil} |> send_gathered() |> flush()

  defp handle({:ringbus_activate, socket}, %{socket: socket} = state) do
    if state.ping_interval, do: Process.send_after(self(), :ping, state.ping_interval)
    activate(state)
  end

  # The reads asked for have come: ask for more.
  defp handle({passive, socket}, %{socket: socket, messages: {_, passive, _, _}} = state),
    do: activate(state)

  defp handle(:ping, state) do
    Process.send_after(self(), :ping, state.ping_interval)
    data = Frame.encode({:ping, Counters.next_corr(state.counters)})
    out(state, data, IO.iodata_length(data))
  end

  defp handle({:inet_reply, _socket, :ok}, state), do: state
  defp handle({:inet_reply, _socket, {:error, reason}}, state), do: down(state, reason)

  defp handle({closed, socket}, %{socket: socket, messages: {_, _, closed, _}} = state),
    do: down(state, Session.closing(state.session))

  defp handle({error, socket, reason}, %{socket: socket, messages: {_, _, _, error}} = state),
    do: down(state, reason)

  defp handle({:DOWN, ref, :process, _, _}, %{owner_ref: ref} = state) do
    state.transport.close(state.socket)
    finish(state, false)
    exit(:normal)
  end

  defp handle({:system, from, request}, state),
    do: :sys.handle_system_msg(request, from, state.parent, __MODULE__, [], state)

  defp handle(_unexpected, state), do: state

  defp activate(state) do
    reads = Ringbus.Socket.reads(state.largest_read, state.buffer_size)

    case state.transport.setopts(state.socket, active: reads) do
      :ok -> %{state | largest_read: 0}
      {:error, reason} -> down(state, reason)
    end
  end

  ## :sys

  @doc false
  def system_continue(_parent, _debug, state), do: loop(state)

  @doc false
  def system_terminate(reason, _parent, _debug, state) do
    state.transport.close(state.socket)
    down(state, reason)
  end

  @doc false
  def system_get_state(state), do: {:ok, state}

  @doc false
  def system_replace_state(fun, state) do
    state = fun.(state)
    {:ok, state, state}
  end

  @doc false
  def system_code_change(state, _module, _old, _extra), do: {:ok, state}

  ## Frames from the server

  defp route([], state), do: state

  defp route(frames, state) do
    {effects, released, session} = Session.handle(frames, state.session)
    Counters.release(state.counters, released)
    Enum.each(effects, &effect(&1, state.owner))
    %{state | session: session}
  end

  defp effect({:reply, from, result}, _owner), do: GenServer.reply(from, result)
  defp effect({:owner, message}, owner), do: send(owner, message)

  ## Coalescing

  # The channel's batch is taken out of the map and extended with this
  # payload and every coalesced push of the same channel that follows it in
  # the mailbox, in local variables; the first other message puts the batch
  # back and is handled as usual. A receive whose last clause takes any
  # message is never selective.
  defp gather(state, channel, payload, corr) do
    room = state.gathered_cap - @batch_overhead - byte_size(channel)

    case Map.pop(state.gathered, channel) do
      {nil, _} ->
        add(state, channel, room, payload, corr, {0, <<>>, []})

      {batch, gathered} ->
        add(%{state | gathered: gathered}, channel, room, payload, corr, batch)
    end
  end

  # The entries' size is the batch's bytes: each payload with its length.
  defp add(state, channel, room, payload, corr, {count, entries, corrs} = batch) do
    size = byte_size(entries) + byte_size(payload) + @entry_overhead

    cond do
      count > 0 and size > room ->
        state |> send_batch(channel, batch) |> add(channel, room, payload, corr, {0, <<>>, []})

      size >= room ->
        state
        |> send_batch(channel, {count + 1, Frame.batch_entry(entries, payload), [corr | corrs]})
        |> take(channel, room, {0, <<>>, []})

      true ->
        take(
          state,
          channel,
          room,
          {count + 1, Frame.batch_entry(entries, payload), [corr | corrs]}
        )
    end
  end

  defp take(state, channel, room, batch) do
    receive do
      {:ringbus_coalesce, ^channel, payload, corr} ->
        add(state, channel, room, payload, corr, batch)

      message ->
        state |> keep(channel, batch) |> then(&handle(message, &1))
    after
      0 -> keep(state, channel, batch)
    end
  end

  defp keep(state, _channel, {0, _, _}), do: state

  defp keep(state, channel, batch),
    do: arm_linger(%{state | gathered: Map.put(state.gathered, channel, batch)})

  defp arm_linger(%{linger: linger, linger_timer: nil} = state) when linger > 0,
    do: %{state | linger_timer: Process.send_after(self(), :linger, linger)}

  defp arm_linger(state), do: state

  defp send_gathered(%{gathered: gathered} = state) when map_size(gathered) == 0, do: state

  defp send_gathered(state),
    do: Enum.reduce(Map.keys(state.gathered), state, &send_channel(&2, &1))

  defp send_channel(state, channel) do
    {batch, gathered} = Map.pop(state.gathered, channel)
    send_batch(%{state | gathered: gathered}, channel, batch)
  end

  defp send_batch(state, channel, batch) do
    case batch do
      {1, entries, [corr]} ->
        payload = Frame.batch_entry_payload(entries)
        {data, bytes} = Frame.encode_push(corr, :ack, channel, payload)
        state = %{state | session: Session.async(state.session, corr, 1)}
        write(state, data, bytes)

      {count, entries, corrs} ->
        batch = Counters.next_corr(state.counters)
        {data, bytes} = Frame.encode_push_batch(batch, :ack, channel, count, entries)
        session = Session.coalesced(state.session, batch, :lists.reverse(corrs), count)
        write(%{state | session: session}, data, bytes)
    end
  end

  ## Output

  # Whatever has gathered goes first, so frames leave in the order they came.
  defp out(state, data, bytes), do: state |> send_gathered() |> write(data, bytes)

  defp write(state, data, bytes) do
    state = %{state | out: [state.out | data], out_bytes: state.out_bytes + bytes}
    if state.out_bytes >= @flush_bytes, do: flush(state), else: state
  end

  defp flush(%{out_bytes: 0} = state), do: state

  defp flush(state) do
    # A failed write shows up as the socket's closed message, which ends
    # the connection. No-ack pushes are never answered, written or not.
    _ = state.transport.send(state.socket, state.out)
    Counters.release(state.counters, state.out_no_ack)

    %{state | out: [], out_bytes: 0, out_no_ack: 0}
  end

  ## Closing

  # The connection is lost: waiting callers get {:error, :closed}, and the
  # owner learns that its subscriptions and the connection are gone.
  defp down(state, reason) do
    finish(state, true)
    send(state.owner, {:ringbus_down, state.session.client, reason})
    exit({:shutdown, reason})
  end

  defp finish(state, notify_owner?) do
    Counters.close(state.counters)
    session = Enum.reduce(state.gathered, state.session, &gathered_in_flight/2)
    held = Session.messages_in_flight(session) + state.out_no_ack
    deadline = System.monotonic_time(:millisecond) + @close_wait
    session = take_pushes(session, state.counters, held, deadline)
    Enum.each(Session.down(session, notify_owner?), &effect(&1, state.owner))
  end

  defp gathered_in_flight({_channel, {_, _, corrs}}, session),
    do: corrs |> :lists.reverse() |> Enum.reduce(session, &Session.async(&2, &1, 1))

  # Async pushes reserved before the client was marked closed: they count as
  # in flight, so the owner hears of each, and the connection waits for
  # those still being sent (`Ringbus.Client.Counters`), for `@close_wait`
  # at most, in case their caller was killed in between. Once, at the end,
  # so the selective receive is no hot path.
  defp take_pushes(session, counters, held, deadline) do
    receive do
      {:ringbus_push, _data, _bytes, corr, count, :ack} ->
        take_pushes(Session.async(session, corr, count), counters, held + count, deadline)

      {:ringbus_push, _data, _bytes, _corr, count, :no_ack} ->
        Counters.release(counters, count)
        take_pushes(session, counters, held, deadline)

      {:ringbus_coalesce, _channel, _payload, corr} ->
        take_pushes(Session.async(session, corr, 1), counters, held + 1, deadline)
    after
      0 ->
        if Counters.pending(counters) <= held or System.monotonic_time(:millisecond) > deadline do
          session
        else
          :erlang.yield()
          take_pushes(session, counters, held, deadline)
        end
    end
  end
end
