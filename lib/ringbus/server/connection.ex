defmodule Ringbus.Server.Connection do
  @moduledoc false
  # One process per client connection: it reads frames, runs them against the
  # channels, and writes the answers and the deliveries of its subscriptions.
  #
  # Reads. The socket is in `active: :once` mode with a large user buffer, so
  # one message carries whatever the kernel has (up to 1 MiB by default). The
  # decoder returns every frame in it; consecutive pushes to one channel are
  # stored with one `Ringbus.push_many/2`, and all the pushes of one read are
  # answered by one PUSH_ACKS frame, after the other answers of that read.
  #
  # Writes. Answers and deliveries are collected as iodata and written with
  # one socket write after each read, whenever the mailbox is empty, and when
  # 64 KiB have piled up. Never one write per message.
  #
  # Backlog safety. The loop takes messages in arrival order and never does a
  # selective receive: TCP writes go to the port without waiting for its reply
  # (see `Ringbus.Socket`), and the calls it makes (create, delete, subscribe,
  # unsubscribe) wait on a fresh reference, which the runtime matches without
  # scanning older messages. What can queue here is bounded: one read at a
  # time (`active: :once`) and, per subscription, the credit the client gave.
  # The queue is off the heap, so queued deliveries take no part in the
  # process's GCs (on the heap, 160k of them took 189 ms to write instead of
  # 90 ms: `mix ringbus.bench backlog --only connection`).
  #
  # Time limits. HELLO must arrive within `handshake_timeout`, and after it
  # each frame must be complete within `idle_timeout` of the one before; a
  # client that trickles bytes (slowloris) runs into the same deadline.

  alias Ringbus.Server.{Auth, Transport}
  alias Ringbus.Wire.{Decoder, ErrorCode, Frame}

  @hello_max_frame 64 * 1024
  @flush_bytes 64 * 1024
  @read_max 1_000
  @version 1

  @spec child_spec(Ringbus.Server.Config.t()) :: Supervisor.child_spec()
  def child_spec(config) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [config]}, restart: :temporary}
  end

  @spec start_link(Ringbus.Server.Config.t()) :: {:ok, pid()}
  def start_link(config) do
    # Deliveries can queue here; off the heap they take no part in its GCs.
    :proc_lib.start_link(__MODULE__, :init, [self(), config], :infinity,
      message_queue_data: :off_heap
    )
  end

  @doc "Hands an accepted socket to the connection process that now owns it."
  @spec hand_over(pid(), Transport.kind(), Transport.socket()) :: :ok
  def hand_over(pid, kind, socket) do
    send(pid, {:ringbus_socket, kind, socket})
    :ok
  end

  @doc false
  def init(parent, config) do
    :proc_lib.init_ack(parent, {:ok, self()})

    receive do
      {:ringbus_socket, kind, socket} ->
        case Transport.handshake(kind, socket, config.handshake_timeout) do
          {:ok, socket} -> start(config, kind, socket)
          {:error, _reason} -> exit(:normal)
        end
    after
      config.handshake_timeout -> exit(:normal)
    end
  end

  defp start(config, kind, socket) do
    state = %{
      config: config,
      kind: kind,
      socket: socket,
      decoder: Decoder.new(@hello_max_frame),
      stage: :hello,
      grants: nil,
      deadline: now() + config.handshake_timeout,
      out: [],
      out_bytes: 0,
      acks: [],
      ack_count: 0,
      subs: %{},
      refs: %{},
      next_sub: 1
    }

    :ok = Ringbus.Socket.activate(kind, socket)
    loop(state)
  end

  ## Loop

  defp loop(state) do
    receive do
      message -> message |> handle(state) |> drain()
    after
      remaining(state) -> expire(state)
    end
  end

  # Takes what else is queued without blocking; writes once it is all taken.
  defp drain(%{out_bytes: bytes} = state) when bytes >= @flush_bytes, do: drain(flush(state))

  defp drain(state) do
    receive do
      message -> message |> handle(state) |> drain()
    after
      0 -> state |> flush() |> loop()
    end
  end

  defp remaining(%{deadline: :infinity}), do: :infinity
  defp remaining(%{deadline: deadline}), do: max(deadline - now(), 0)

  defp expire(%{stage: :hello} = state),
    do: fatal(state, :handshake_timeout, "no HELLO within the handshake timeout")

  defp expire(state), do: fatal(state, :idle_timeout, "no frame within the idle timeout")

  ## Messages

  defp handle({tag, socket, data}, %{socket: socket} = state) when tag in [:tcp, :ssl] do
    case Decoder.feed(state.decoder, data) do
      {:ok, frames, decoder} ->
        state = run(frames, %{state | decoder: decoder}, nil)
        state = if frames == [], do: state, else: touch(state)
        state = flush(state)
        :ok = activate(state)
        state

      {:error, reason, frames} ->
        state = run(frames, state, nil)
        fatal(state, Decoder.error_code(reason), "cannot decode frame: #{inspect(reason)}")
    end
  end

  defp handle({:ringbus, ref, messages, lost}, state) do
    case state.refs do
      %{^ref => sub_id} -> deliver(state, sub_id, messages, lost)
      # Unsubscribed: deliveries already on their way are dropped.
      _ -> state
    end
  end

  defp handle({:ringbus_closed, ref, _reason}, state) do
    case Map.pop(state.refs, ref) do
      {nil, _} ->
        state

      {sub_id, refs} ->
        %{state | refs: refs, subs: Map.delete(state.subs, sub_id)}
        |> out({:sub_closed, sub_id, :no_channel})
    end
  end

  defp handle({:inet_reply, _socket, :ok}, state), do: state
  defp handle({:inet_reply, _socket, {:error, _reason}}, state), do: close(state)

  defp handle({closed, _socket}, state) when closed in [:tcp_closed, :ssl_closed],
    do: close(state)

  defp handle({error, _socket, _reason}, state) when error in [:tcp_error, :ssl_error],
    do: close(state)

  defp handle(_unexpected, state), do: state

  defp activate(state) do
    case Ringbus.Socket.activate(state.kind, state.socket) do
      :ok -> :ok
      {:error, _} -> close(state)
    end
  end

  defp touch(%{config: config} = state) do
    case config.idle_timeout do
      :infinity -> %{state | deadline: :infinity}
      idle -> %{state | deadline: now() + idle}
    end
  end

  ## Frames

  # Runs the frames of one read in order. Consecutive pushes to one channel
  # collect in `batch` and go in with one push_many before anything else runs.
  defp run([{:push, corr, mode, name, payload} | rest], %{stage: :open} = state, batch) do
    {state, batch} = collect(state, batch, name, {corr, mode, 1, [payload]})
    run(rest, state, batch)
  end

  defp run(
         [{:push_batch, corr, mode, name, count, payloads} | rest],
         %{stage: :open} = state,
         batch
       ) do
    {state, batch} = collect(state, batch, name, {corr, mode, count, payloads})
    run(rest, state, batch)
  end

  defp run([frame | rest], state, batch) do
    state = state |> store(batch) |> request(frame)
    run(rest, state, nil)
  end

  defp run([], state, batch), do: state |> store(batch) |> push_acks()

  defp collect(state, {name, parts}, name, part), do: {state, {name, [part | parts]}}
  defp collect(state, batch, name, part), do: {store(state, batch), {name, [part]}}

  ## Pushes

  defp store(state, nil), do: state

  defp store(state, {name, parts}) do
    parts = :lists.reverse(parts)

    if Auth.allowed?(state.grants, :write, name) do
      # One pass over every payload: sizes checked, bytes counted.
      {parts, count, bytes} = measure(parts, state.config.max_payload_size, [], 0, 0)
      push_parts(state, name, parts, count, bytes)
    else
      ack_all(state, parts, {:error, :forbidden})
    end
  end

  defp push_parts(state, name, parts, count, bytes) do
    if Enum.all?(parts, &match?({_, _, :too_large, _}, &1)) do
      ack_seqs(state, parts, 0)
    else
      case push_many(state, name, concat(parts), count, bytes) do
        {:ok, first} ->
          ack_seqs(state, parts, first)

        # A rejecting channel: each frame goes in whole or not at all.
        {:error, :full} when tl(parts) != [] ->
          Enum.reduce(parts, state, &push_part(&2, name, &1))

        {:error, reason} ->
          ack_all(state, parts, {:error, reason})
      end
    end
  end

  defp push_part(state, name, {_, _, n, payloads} = part) do
    bytes = if n == :too_large, do: 0, else: payload_bytes(payloads, :infinity, 0)
    push_parts(state, name, [part], if(n == :too_large, do: 0, else: n), bytes)
  end

  # Marks the frames holding a payload over max_payload_size; counts the rest.
  defp measure([{corr, mode, n, payloads} | rest], max, acc, count, bytes) do
    case payload_bytes(payloads, max, 0) do
      :too_large -> measure(rest, max, [{corr, mode, :too_large, []} | acc], count, bytes)
      size -> measure(rest, max, [{corr, mode, n, payloads} | acc], count + n, bytes + size)
    end
  end

  defp measure([], _max, acc, count, bytes), do: {:lists.reverse(acc), count, bytes}

  defp payload_bytes([p | _], max, _bytes) when byte_size(p) > max, do: :too_large
  defp payload_bytes([p | rest], max, bytes), do: payload_bytes(rest, max, bytes + byte_size(p))
  defp payload_bytes([], _max, bytes), do: bytes

  defp concat([{_, _, _, payloads}]), do: payloads
  defp concat(parts), do: Enum.flat_map(parts, fn {_, _, _, payloads} -> payloads end)

  defp push_many(state, name, payloads, count, bytes) do
    case Ringbus.push_measured(name, payloads, count, bytes) do
      {:error, :no_channel} = error ->
        if state.config.auto_create do
          Ringbus.create(name, state.config.auto_create)
          Ringbus.push_measured(name, payloads, count, bytes)
        else
          error
        end

      result ->
        result
    end
  end

  defp ack_seqs(state, [{corr, mode, :too_large, _} | rest], seq),
    do: state |> ack(mode, corr, {:error, :too_large}) |> ack_seqs(rest, seq)

  defp ack_seqs(state, [{corr, mode, count, _} | rest], seq),
    do: state |> ack(mode, corr, {:ok, seq}) |> ack_seqs(rest, seq + count)

  defp ack_seqs(state, [], _seq), do: state

  defp ack_all(state, parts, result),
    do:
      Enum.reduce(parts, state, fn {corr, mode, _, _}, state -> ack(state, mode, corr, result) end)

  defp ack(state, :no_ack, _corr, _result), do: state

  defp ack(state, :ack, corr, result),
    do: %{state | acks: [{corr, result} | state.acks], ack_count: state.ack_count + 1}

  # One PUSH_ACKS frame for the pushes of one read.
  defp push_acks(%{ack_count: 0} = state), do: state

  defp push_acks(state) do
    frame = {:push_acks, state.ack_count, :lists.reverse(state.acks)}
    out(%{state | acks: [], ack_count: 0}, frame)
  end

  ## Requests

  defp request(%{stage: :hello} = state, {:hello, corr, version, _flags, token}) do
    cond do
      version != @version ->
        fatal(state, :bad_version, "this server speaks protocol version #{@version}", corr)

      true ->
        case Auth.authenticate(state.config.tokens, token) do
          {:ok, grants} ->
            decoder = Decoder.put_max_frame_size(state.decoder, state.config.max_frame_size)
            state = %{state | stage: :open, grants: grants, decoder: decoder}
            out(state, {:hello_ok, corr, @version, limits(state.config)})

          :error ->
            fatal(state, :auth_failed, "the token is missing or not accepted", corr)
        end
    end
  end

  defp request(%{stage: :hello} = state, _frame),
    do: fatal(state, :not_hello_first, "the first frame must be HELLO")

  defp request(state, {:hello, corr, _, _, _}),
    do: fatal(state, :bad_frame, "HELLO was sent twice", corr)

  defp request(state, {:ping, corr}), do: out(state, {:pong, corr})

  defp request(state, {:create, corr, name, capacity, overflow}) do
    guard(state, corr, :write, name, fn ->
      cond do
        capacity == 0 ->
          {:error, :bad_argument, "capacity must be positive"}

        true ->
          case Ringbus.create(name, capacity: capacity, overflow: overflow) do
            :ok -> {:ok, corr}
            {:error, :exists} -> {:error, :exists}
          end
      end
    end)
  end

  defp request(state, {:delete, corr, name}) do
    guard(state, corr, :write, name, fn ->
      with :ok <- Ringbus.delete(name), do: {:ok, corr}
    end)
  end

  defp request(state, {:pull, corr, name}) do
    guard(state, corr, :read, name, fn ->
      case Ringbus.pull(name) do
        {:ok, seq, payload} -> {:pull_ok, corr, seq, payload}
        :empty -> {:empty, corr}
        error -> error
      end
    end)
  end

  defp request(state, {:read, corr, name, from, max}) do
    guard(state, corr, :read, name, fn ->
      with {:ok, messages, lost} <- Ringbus.read(name, from, min(max, @read_max)) do
        {count, messages, _rest} = fit(messages, state.config.max_payload_size, 0, 0, [])
        {:read_ok, corr, lost, count, messages}
      end
    end)
  end

  defp request(state, {:len, corr, name}) do
    guard(state, corr, :read, name, fn ->
      with len when is_integer(len) <- Ringbus.len(name), do: {:len_ok, corr, len}
    end)
  end

  defp request(state, {:info, corr, name}) do
    guard(state, corr, :read, name, fn ->
      with {:ok, info} <- Ringbus.info(name), do: {:info_ok, corr, info}
    end)
  end

  defp request(state, {:subscribe, corr, name, from, credit, max_batch}) do
    guard(state, corr, :read, name, fn ->
      cond do
        map_size(state.subs) >= state.config.max_subscriptions ->
          {:error, :too_many_subscriptions}

        credit == 0 or max_batch == 0 ->
          {:error, :bad_argument, "credit and max_batch must be positive"}

        true ->
          max_credit = state.config.max_credit
          opts = [from: from, max_in_flight: max_credit, credit: min(credit, max_credit)]

          with {:ok, ref} <- Ringbus.subscribe(name, [max_batch: max_batch] ++ opts) do
            {:subscribed, corr, ref}
          end
      end
    end)
  end

  defp request(state, {:credit, corr, sub_id, credit}) do
    case state.subs do
      %{^sub_id => ref} when credit > 0 ->
        Ringbus.ack(ref, credit)
        state

      %{^sub_id => _} ->
        error(state, corr, :bad_argument, "credit must be positive")

      _ ->
        error(state, corr, :no_subscription, "no subscription #{sub_id} on this connection")
    end
  end

  defp request(state, {:unsubscribe, corr, sub_id}) do
    case Map.pop(state.subs, sub_id) do
      {nil, _} ->
        error(state, corr, :no_subscription, "no subscription #{sub_id} on this connection")

      {ref, subs} ->
        Ringbus.unsubscribe(ref)
        out(%{state | subs: subs, refs: Map.delete(state.refs, ref)}, {:ok, corr})
    end
  end

  defp request(state, frame),
    do: fatal(state, :unknown_opcode, "not a request: #{elem(frame, 0)}")

  # Checks the grant, runs the operation and writes its answer.
  defp guard(state, corr, access, name, fun) do
    if Auth.allowed?(state.grants, access, name) do
      case fun.() do
        {:subscribed, corr, ref} ->
          sub_id = state.next_sub
          subs = Map.put(state.subs, sub_id, ref)

          state = %{
            state
            | subs: subs,
              refs: Map.put(state.refs, ref, sub_id),
              next_sub: sub_id + 1
          }

          out(state, {:subscribed, corr, sub_id})

        {:error, reason, message} ->
          error(state, corr, reason, message)

        {:error, reason} ->
          error(state, corr, reason, describe(reason))

        frame ->
          out(state, frame)
      end
    else
      error(state, corr, :forbidden, "the token does not allow #{access} on #{inspect(name)}")
    end
  end

  ## Deliveries

  # One DELIVER frame per batch, split where a frame would pass the limit.
  defp deliver(state, sub_id, messages, lost) do
    case fit(messages, state.config.max_payload_size, 0, 0, []) do
      {count, fitted, []} ->
        out(state, {:deliver, sub_id, lost, count, fitted})

      {count, fitted, rest} ->
        state = out(state, {:deliver, sub_id, lost, count, fitted})
        deliver(state, sub_id, rest, 0)
    end
  end

  # Takes messages while their payloads fit in one frame (at least one);
  # returns them, their count, and the rest.
  defp fit([{_, payload} = message | rest], max, count, bytes, acc)
       when count == 0 or bytes + byte_size(payload) + 12 <= max,
       do: fit(rest, max, count + 1, bytes + byte_size(payload) + 12, [message | acc])

  defp fit(rest, _max, count, _bytes, acc), do: {count, :lists.reverse(acc), rest}

  ## Output

  defp out(state, frame) do
    data = Frame.encode(frame)
    %{state | out: [state.out | data], out_bytes: state.out_bytes + IO.iodata_length(data)}
  end

  defp error(state, corr, reason, message), do: out(state, {:error, corr, reason, message})

  defp flush(%{out_bytes: 0} = state), do: state

  defp flush(state) do
    case Ringbus.Socket.send(state.kind, state.socket, state.out) do
      :ok -> %{state | out: [], out_bytes: 0}
      {:error, _} -> close(state)
    end
  end

  # A connection error: say why, write what is pending, and close.
  defp fatal(state, reason, message, corr \\ 0) do
    state |> error(corr, reason, message) |> flush() |> close()
  end

  defp close(state) do
    Ringbus.Socket.close(state.kind, state.socket)
    exit(:normal)
  end

  defp limits(config) do
    %{
      max_frame_size: config.max_frame_size,
      max_payload_size: config.max_payload_size,
      max_subscriptions: config.max_subscriptions,
      max_credit: config.max_credit,
      idle_timeout: config.idle_timeout
    }
  end

  defp describe(reason) do
    case List.keyfind(ErrorCode.all(), reason, 0) do
      {_, _, text} -> text
      nil -> inspect(reason)
    end
  end

  defp now, do: System.monotonic_time(:millisecond)
end
