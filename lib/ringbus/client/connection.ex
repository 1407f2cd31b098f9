defmodule Ringbus.Client.Connection do
  @moduledoc false
  # The process behind a `Ringbus.Client`: it owns the socket, writes the
  # requests that callers have encoded, and routes what the server sends back.
  # See `lib/ringbus/client/README.md` for the process model.
  #
  # Reads. The socket is in `active: :once` mode with 1 MiB buffers; every
  # frame of a read is decoded with `Ringbus.Wire.Decoder` and handled in
  # order before the socket is armed again.
  #
  # Writes. Callers encode their frames and send the iodata here. It is
  # collected and written with one socket write when the mailbox is empty (the
  # GenServer timeout of 0 fires only then) or when `@flush_bytes` have piled
  # up. Never one write per request.
  #
  # The loop takes messages in arrival order and never receives selectively:
  # TCP writes go to the port and their `:inet_reply` is an ordinary message.

  use GenServer

  alias Ringbus.Client
  alias Ringbus.Socket
  alias Ringbus.Wire.{Decoder, ErrorCode}

  @flush_bytes 256 * 1024

  # Slots of the client's `:atomics` array; see `Ringbus.Client`.
  @pending 2
  @closed 3

  @spec start(map()) :: GenServer.on_start()
  def start(args), do: GenServer.start(__MODULE__, args)

  ## Init

  @impl true
  def init(args) do
    %{client: client, kind: kind, socket: socket, owner: owner, limits: limits} = args
    owner_ref = Process.monitor(owner)

    state = %{
      # Sent to the owner with acks, so that it can match on its client.
      client: %{client | pid: self()},
      counters: client.counters,
      kind: kind,
      socket: socket,
      decoder: Decoder.new(limits.max_frame_size),
      owner: owner,
      owner_ref: owner_ref,
      out: [],
      out_bytes: 0,
      out_no_ack: 0,
      # Sync requests waiting for an answer: corr => {from, action}.
      pending: %{},
      # Async pushes of other than one message: corr => message count.
      batches: %{},
      # Live subscriptions: sub_id => true.
      subs: %{},
      ping_interval: ping_interval(limits.idle_timeout),
      closing: :closed
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
    state = %{state | pending: Map.put(state.pending, corr, {from, action})}
    state |> out(data, bytes) |> noreply()
  end

  def handle_call(:close, _from, state) do
    state = flush(state)
    Socket.close(state.kind, state.socket)
    finish(state, false)
    {:stop, :normal, :ok, state}
  end

  @impl true
  def handle_info({:ringbus_push, data, bytes, corr, count, mode}, state) do
    state =
      case mode do
        :no_ack -> %{state | out_no_ack: state.out_no_ack + count}
        :ack when count == 1 -> state
        :ack -> %{state | batches: Map.put(state.batches, corr, count)}
      end

    state |> out(data, bytes) |> noreply()
  end

  def handle_info({:ringbus_write, data, bytes}, state),
    do: state |> out(data, bytes) |> noreply()

  def handle_info(:timeout, state), do: state |> flush() |> noreply()

  def handle_info({tag, socket, data}, %{socket: socket} = state) when tag in [:tcp, :ssl] do
    case Decoder.feed(state.decoder, data) do
      {:ok, frames, decoder} ->
        state = handle_frames(frames, %{state | decoder: decoder})

        case Socket.activate(state.kind, state.socket) do
          :ok -> noreply(state)
          {:error, reason} -> down(state, reason)
        end

      {:error, reason, frames} ->
        state = handle_frames(frames, state)
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

  def handle_info(:ping, state) do
    Process.send_after(self(), :ping, state.ping_interval)
    corr = Client.next_corr(state.counters)
    data = Ringbus.Wire.Frame.encode({:ping, corr})
    state |> out(data, 9) |> noreply()
  end

  def handle_info({:inet_reply, _socket, :ok}, state), do: noreply(state)
  def handle_info({:inet_reply, _socket, {:error, reason}}, state), do: down(state, reason)

  def handle_info({closed, socket}, %{socket: socket} = state)
      when closed in [:tcp_closed, :ssl_closed],
      do: down(state, state.closing)

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

  defp handle_frames([frame | rest], state), do: handle_frames(rest, handle_frame(frame, state))
  defp handle_frames([], state), do: state

  defp handle_frame({:push_acks, count, acks}, state) do
    if map_size(state.pending) == 0 and map_size(state.batches) == 0 do
      # Only single async pushes in flight: every entry is the owner's.
      :atomics.sub(state.counters, @pending, count)
      send(state.owner, {:ringbus_acks, state.client, acks})
      state
    else
      route_acks(acks, state, [], 0)
    end
  end

  defp handle_frame({:deliver, sub_id, lost, _count, messages}, state) do
    if Map.has_key?(state.subs, sub_id), do: send(state.owner, {:ringbus, sub_id, messages, lost})
    state
  end

  defp handle_frame({:sub_closed, sub_id, reason}, state) do
    case Map.pop(state.subs, sub_id) do
      {nil, _} ->
        state

      {_, subs} ->
        send(state.owner, {:ringbus_closed, sub_id, reason})
        %{state | subs: subs}
    end
  end

  # A connection error (code below 100) is followed by the server closing the
  # socket; it becomes the reason the owner is told.
  defp handle_frame({:error, corr, reason, _message}, state) do
    state = if ErrorCode.closes_connection?(reason), do: %{state | closing: reason}, else: state

    reply(state, corr, {:error, reason})
  end

  defp handle_frame({:subscribed, corr, sub_id}, state) do
    case Map.pop(state.pending, corr) do
      {nil, _} ->
        state

      {{from, _action}, pending} ->
        GenServer.reply(from, {:ok, sub_id})
        %{state | pending: pending, subs: Map.put(state.subs, sub_id, true)}
    end
  end

  defp handle_frame({:ok, corr}, state) do
    case Map.pop(state.pending, corr) do
      {nil, _} ->
        state

      {{from, action}, pending} ->
        GenServer.reply(from, :ok)

        case action do
          {:unsubscribe, sub_id} ->
            %{state | pending: pending, subs: Map.delete(state.subs, sub_id)}

          nil ->
            %{state | pending: pending}
        end
    end
  end

  defp handle_frame({:pong, corr}, state), do: reply(state, corr, :ok)
  defp handle_frame({:empty, corr}, state), do: reply(state, corr, :empty)
  defp handle_frame({:len_ok, corr, len}, state), do: reply(state, corr, {:ok, len})
  defp handle_frame({:info_ok, corr, info}, state), do: reply(state, corr, {:ok, info})

  defp handle_frame({:pull_ok, corr, seq, payload}, state),
    do: reply(state, corr, {:ok, seq, payload})

  defp handle_frame({:read_ok, corr, lost, _count, messages}, state),
    do: reply(state, corr, {:ok, messages, lost})

  defp handle_frame(_other, state), do: state

  # Answers a sync request; an answer nobody waits for (the caller timed out,
  # or it is a PONG to a keep-alive ping) is dropped.
  defp reply(state, corr, result) do
    case Map.pop(state.pending, corr) do
      {nil, _} ->
        state

      {{from, _action}, pending} ->
        GenServer.reply(from, result)
        %{state | pending: pending}
    end
  end

  # Entries of sync pushes go to their callers; the rest to the owner, in one
  # message per PUSH_ACKS frame.
  defp route_acks([{corr, result} = ack | rest], state, owners, released) do
    case Map.pop(state.pending, corr) do
      {{from, _action}, pending} ->
        GenServer.reply(from, result)
        route_acks(rest, %{state | pending: pending}, owners, released)

      {nil, _} ->
        case Map.pop(state.batches, corr) do
          {nil, _} ->
            route_acks(rest, state, [ack | owners], released + 1)

          {count, batches} ->
            route_acks(rest, %{state | batches: batches}, [ack | owners], released + count)
        end
    end
  end

  defp route_acks([], state, owners, released) do
    if released > 0, do: :atomics.sub(state.counters, @pending, released)
    if owners != [], do: send(state.owner, {:ringbus_acks, state.client, :lists.reverse(owners)})
    state
  end

  ## Output

  defp out(state, data, bytes) do
    state = %{state | out: [state.out | data], out_bytes: state.out_bytes + bytes}
    if state.out_bytes >= @flush_bytes, do: flush(state), else: state
  end

  # Every callback returns through here: a return without the timeout while
  # output waits would leave it unwritten until some other message came.
  defp noreply(%{out_bytes: 0} = state), do: {:noreply, state}
  defp noreply(state), do: {:noreply, state, 0}

  defp flush(%{out_bytes: 0} = state), do: state

  defp flush(state) do
    case Socket.send(state.kind, state.socket, state.out) do
      :ok ->
        # No-ack pushes count as pending until they are written.
        if state.out_no_ack > 0, do: :atomics.sub(state.counters, @pending, state.out_no_ack)
        %{state | out: [], out_bytes: 0, out_no_ack: 0}

      {:error, _reason} ->
        # The socket is gone; its closed message ends the connection.
        %{state | out: [], out_bytes: 0, out_no_ack: 0}
    end
  end

  ## Closing

  # The connection is lost: waiting callers get {:error, :closed}, and the
  # owner learns that its subscriptions and the connection are gone.
  defp down(state, reason) do
    finish(state, true)
    send(state.owner, {:ringbus_down, state.client, reason})
    {:stop, {:shutdown, reason}, state}
  end

  defp finish(state, notify_owner?) do
    :atomics.put(state.counters, @closed, 1)

    Enum.each(state.pending, fn {_corr, {from, _action}} ->
      GenServer.reply(from, {:error, :closed})
    end)

    if notify_owner? do
      Enum.each(state.subs, fn {sub_id, _} ->
        send(state.owner, {:ringbus_closed, sub_id, :closed})
      end)
    end

    :ok
  end
end
