defmodule Ringbus.Client.Connection do
  @moduledoc false
  # The process behind a `Ringbus.Client`: it owns the socket, writes the
  # requests that callers have encoded, and carries out what
  # `Ringbus.Client.Session` says about each frame the server sends back.
  # See `lib/ringbus/client/README.md` for the process model.
  #
  # Reads. The socket delivers a few reads at a time as messages (see
  # `Ringbus.Socket.activate/2`); every frame of a read is
  # decoded with `Ringbus.Wire.Decoder` and routed before the socket is armed
  # again.
  #
  # Writes. Callers encode their frames and send the iodata here. It is
  # collected and written with one socket write when the mailbox is empty (the
  # GenServer timeout of 0 fires only then) or when `@flush_bytes` have piled
  # up. Never one write per request.
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

  use GenServer

  alias Ringbus.Client.{Counters, Session}
  alias Ringbus.Socket
  alias Ringbus.Wire.{Decoder, Frame}

  @flush_bytes 256 * 1024

  # A PUSH_BATCH's bytes besides its name and payloads (each payload also
  # takes a u32 length).
  @batch_overhead 16

  @spec start(map()) :: GenServer.on_start()
  def start(args),
    do: GenServer.start(__MODULE__, args, spawn_opt: [message_queue_data: :off_heap])

  ## Init

  @impl true
  def init(args) do
    %{client: client, kind: kind, socket: socket, owner: owner, limits: limits} = args

    state = %{
      session: Session.new(%{client | pid: self()}),
      counters: client.counters,
      kind: kind,
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
      # Payloads gathered per channel: name => {count, bytes, payloads, corrs},
      # newest first.
      gathered: %{},
      gathered_cap: min(Map.get(args, :batch_bytes, 65_536), limits.max_frame_size),
      linger_timer: nil
    }

    {:ok, state}
  end

  # The server closes a connection from which no frame came within its idle
  # timeout; pinging at a third of it keeps a quiet client connected.
  defp ping_interval(:infinity), do: nil
  defp ping_interval(idle) when is_integer(idle), do: max(div(idle, 3), 1)

  ## Requests

  @impl true
  def handle_call({:request, corr, data, bytes, action}, from, state) do
    state = %{state | session: Session.await(state.session, corr, from, action)}
    state |> out(data, bytes) |> noreply()
  end

  def handle_call(:close, _from, state) do
    state = state |> send_gathered() |> flush()
    Socket.close(state.kind, state.socket)
    finish(state, false)
    {:stop, :normal, :ok, state}
  end

  @impl true
  def handle_info({:ringbus_push, data, bytes, corr, count, mode}, state) do
    state =
      case mode do
        :no_ack -> %{state | out_no_ack: state.out_no_ack + count}
        :ack -> %{state | session: Session.async(state.session, corr, count)}
      end

    state |> out(data, bytes) |> noreply()
  end

  def handle_info({:ringbus_coalesce, channel, payload, corr}, state),
    do: state |> gather(channel, payload, corr) |> noreply()

  def handle_info({:ringbus_write, data, bytes}, state),
    do: state |> out(data, bytes) |> noreply()

  def handle_info(:timeout, %{linger: 0} = state),
    do: state |> send_gathered() |> flush() |> noreply()

  def handle_info(:timeout, state), do: state |> flush() |> noreply()

  def handle_info(:linger, state),
    do: %{state | linger_timer: nil} |> send_gathered() |> flush() |> noreply()

  def handle_info({tag, socket, data}, %{socket: socket} = state) when tag in [:tcp, :ssl] do
    case Decoder.feed(state.decoder, data) do
      {:ok, frames, decoder} ->
        state |> Map.put(:decoder, decoder) |> then(&route(frames, &1)) |> noreply()

      {:error, reason, frames} ->
        state = route(frames, state)
        Socket.close(state.kind, state.socket)
        down(state, {:bad_frame, reason})
    end
  end

  def handle_info({:ringbus_activate, socket}, %{socket: socket} = state) do
    if state.ping_interval, do: Process.send_after(self(), :ping, state.ping_interval)

    case Socket.activate(state.kind, socket) do
      :ok -> noreply(state)
      {:error, reason} -> down(state, reason)
    end
  end

  # The reads asked for have come: ask for more.
  def handle_info({passive, socket}, %{socket: socket} = state)
      when passive in [:tcp_passive, :ssl_passive] do
    case Socket.activate(state.kind, socket) do
      :ok -> noreply(state)
      {:error, reason} -> down(state, reason)
    end
  end

  def handle_info(:ping, state) do
    Process.send_after(self(), :ping, state.ping_interval)
    data = Frame.encode({:ping, Counters.next_corr(state.counters)})
    state |> out(data, IO.iodata_length(data)) |> noreply()
  end

  def handle_info({:inet_reply, _socket, :ok}, state), do: noreply(state)
  def handle_info({:inet_reply, _socket, {:error, reason}}, state), do: down(state, reason)

  def handle_info({closed, socket}, %{socket: socket} = state)
      when closed in [:tcp_closed, :ssl_closed],
      do: down(state, Session.closing(state.session))

  def handle_info({error, socket, reason}, %{socket: socket} = state)
      when error in [:tcp_error, :ssl_error],
      do: down(state, reason)

  def handle_info({:DOWN, ref, :process, _, _}, %{owner_ref: ref} = state) do
    Socket.close(state.kind, state.socket)
    finish(state, false)
    {:stop, :normal, state}
  end

  def handle_info(_unexpected, state), do: noreply(state)

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

  defp gather(state, channel, payload, corr) do
    size = byte_size(payload) + 4
    room = state.gathered_cap - @batch_overhead - byte_size(channel)

    case state.gathered do
      %{^channel => {count, bytes, payloads, corrs}} when bytes + size <= room ->
        entry = {count + 1, bytes + size, [payload | payloads], [corr | corrs]}
        state = %{state | gathered: %{state.gathered | channel => entry}}
        if bytes + size == room, do: send_channel(state, channel), else: state

      %{^channel => _} ->
        state |> send_channel(channel) |> gather(channel, payload, corr)

      _ ->
        gathered = Map.put(state.gathered, channel, {1, size, [payload], [corr]})
        state = arm_linger(%{state | gathered: gathered})
        if size >= room, do: send_channel(state, channel), else: state
    end
  end

  defp arm_linger(%{linger: linger, linger_timer: nil} = state) when linger > 0,
    do: %{state | linger_timer: Process.send_after(self(), :linger, linger)}

  defp arm_linger(state), do: state

  defp send_gathered(%{gathered: gathered} = state) when map_size(gathered) == 0, do: state

  defp send_gathered(state),
    do: Enum.reduce(Map.keys(state.gathered), state, &send_channel(&2, &1))

  defp send_channel(state, channel) do
    {entry, gathered} = Map.pop(state.gathered, channel)
    state = %{state | gathered: gathered}

    case entry do
      {1, _bytes, [payload], [corr]} ->
        data = Frame.encode_push(corr, :ack, channel, payload)
        state = %{state | session: Session.async(state.session, corr, 1)}
        write(state, data, IO.iodata_length(data))

      {count, _bytes, payloads, corrs} ->
        batch = Counters.next_corr(state.counters)
        frame = {:push_batch, batch, :ack, channel, count, :lists.reverse(payloads)}
        data = Frame.encode(frame)
        session = Session.coalesced(state.session, batch, :lists.reverse(corrs), count)
        write(%{state | session: session}, data, IO.iodata_length(data))
    end
  end

  ## Output

  # Whatever has gathered goes first, so frames leave in the order they came.
  defp out(state, data, bytes), do: state |> send_gathered() |> write(data, bytes)

  defp write(state, data, bytes) do
    state = %{state | out: [state.out | data], out_bytes: state.out_bytes + bytes}
    if state.out_bytes >= @flush_bytes, do: flush(state), else: state
  end

  # Every callback returns through here: a return without the timeout while
  # output waits would leave it unwritten until some other message came.
  defp noreply(%{out_bytes: 0, linger: 0, gathered: gathered} = state)
       when map_size(gathered) > 0,
       do: {:noreply, state, 0}

  defp noreply(%{out_bytes: 0} = state), do: {:noreply, state}
  defp noreply(state), do: {:noreply, state, 0}

  defp flush(%{out_bytes: 0} = state), do: state

  defp flush(state) do
    # A failed write shows up as the socket's closed message, which ends
    # the connection.
    if Socket.send(state.kind, state.socket, state.out) == :ok,
      do: Counters.release(state.counters, state.out_no_ack)

    %{state | out: [], out_bytes: 0, out_no_ack: 0}
  end

  ## Closing

  # The connection is lost: waiting callers get {:error, :closed}, and the
  # owner learns that its subscriptions and the connection are gone.
  defp down(state, reason) do
    finish(state, true)
    send(state.owner, {:ringbus_down, state.session.client, reason})
    {:stop, {:shutdown, reason}, state}
  end

  defp finish(state, notify_owner?) do
    Counters.close(state.counters)
    session = Enum.reduce(state.gathered, state.session, &gathered_in_flight/2)
    session = take_pushes(session)
    Enum.each(Session.down(session, notify_owner?), &effect(&1, state.owner))
  end

  defp gathered_in_flight({_channel, {_, _, _, corrs}}, session),
    do: corrs |> :lists.reverse() |> Enum.reduce(session, &Session.async(&2, &1, 1))

  # Async pushes sent before the client was marked closed and not yet
  # handled: they count as in flight, so the owner hears of each. Once,
  # at the end, so the selective receive is no hot path.
  defp take_pushes(session) do
    receive do
      {:ringbus_push, _data, _bytes, corr, count, :ack} ->
        take_pushes(Session.async(session, corr, count))

      {:ringbus_coalesce, _channel, _payload, corr} ->
        take_pushes(Session.async(session, corr, 1))
    after
      0 -> session
    end
  end
end
