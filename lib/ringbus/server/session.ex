defmodule Ringbus.Server.Session do
  @moduledoc false
  # The protocol of one server connection, as functions of data: the frames
  # of a read and the session state in, the frames to write and the new state
  # out. It runs requests against `Ringbus` (which may start a subscription
  # for the calling process) but never touches a socket, a timer or the
  # mailbox: `Ringbus.Server.Connection` does those.
  #
  #   handle(frames, session)            -> {status, out, session}
  #   deliver(session, ref, msgs, lost)  -> out
  #   closed(session, ref, reason)       -> {out, session}
  #
  # `out` is a list of frames in the order they are to be written; `status`
  # is `:ok`, or `{:close, reason}` after a connection error, whose ERROR
  # frame ends `out` and after which no frame of the read is handled.
  #
  # Pushes. Consecutive pushes to one channel within a read are stored with
  # one push of the whole run, and the acked pushes of one read are answered
  # by one PUSH_ACKS frame after the other answers of that read (more than
  # one only when one would pass `max_frame_size`).

  alias Ringbus.Server.{Auth, Config}
  alias Ringbus.Wire.{Decoder, ErrorCode, Frame}

  @read_max 1_000

  # A PUSH_ACKS frame: its opcode and count, then 14 bytes an entry.
  @acks_overhead 1 + 4
  @ack_entry 14
  # A message in READ_OK or DELIVER: seq and payload length, then the payload.
  @message_overhead 12

  defstruct [
    :config,
    stage: :hello,
    grants: nil,
    # sub_id => subscription handle, and handle => sub_id
    subs: %{},
    refs: %{},
    next_sub: 1
  ]

  @type t :: %__MODULE__{config: Config.t()}
  @type status :: :ok | {:close, ErrorCode.reason()}

  @spec new(Config.t()) :: t()
  def new(%Config{} = config), do: %__MODULE__{config: config}

  @doc "Whether HELLO has been answered with HELLO_OK."
  @spec open?(t()) :: boolean()
  def open?(%__MODULE__{stage: stage}), do: stage == :open

  @doc "Handles the frames of one read, in order."
  @spec handle([Frame.t()], t()) :: {status(), [Frame.t()], t()}
  def handle(frames, %__MODULE__{} = session) do
    {status, out, acks, session} = run(frames, session, nil, [], [])
    {status, :lists.reverse(out, push_acks(session.config, acks)), session}
  end

  @doc """
  The ERROR frame that closes a connection for `reason`: a decoding error
  (`t:Ringbus.Wire.Frame.decode_error/0`), `:timeout` or `:shutting_down`.
  """
  @spec fatal_frame(t(), Frame.decode_error() | :timeout | :shutting_down) ::
          {ErrorCode.reason(), Frame.t()}
  def fatal_frame(%__MODULE__{stage: :hello}, :timeout),
    do: fatal(:handshake_timeout, "no HELLO within the handshake timeout")

  def fatal_frame(_session, :timeout),
    do: fatal(:idle_timeout, "no frame within the idle timeout")

  def fatal_frame(_session, :shutting_down),
    do: fatal(:shutting_down, "the server is stopping")

  def fatal_frame(_session, decode_error) do
    reason = Decoder.error_code(decode_error)
    fatal(reason, "cannot decode frame: #{inspect(decode_error)}")
  end

  defp fatal(reason, message), do: {reason, {:error, 0, reason, message}}

  ## Frames

  # `batch` collects consecutive pushes to one channel; it is stored before
  # any other frame runs. `out` and `acks` are in reverse.
  defp run([{:push, corr, mode, name, payload} | rest], %{stage: :open} = s, batch, out, acks) do
    {batch, acks} = collect(s, batch, name, {corr, mode, 1, [payload]}, acks)
    run(rest, s, batch, out, acks)
  end

  defp run([{:push_batch, corr, mode, name, n, payloads} | rest], %{stage: :open} = s, b, o, a) do
    {b, a} = collect(s, b, name, {corr, mode, n, payloads}, a)
    run(rest, s, b, o, a)
  end

  defp run([frame | rest], session, batch, out, acks) do
    acks = store(session, batch, acks)

    case request(session, frame) do
      {:ok, frames, session} -> run(rest, session, nil, :lists.reverse(frames, out), acks)
      {:close, reason, frame} -> {{:close, reason}, [frame | out], acks, session}
    end
  end

  defp run([], session, batch, out, acks), do: {:ok, out, store(session, batch, acks), session}

  defp collect(_s, {name, parts}, name, part, acks), do: {{name, [part | parts]}, acks}
  defp collect(s, batch, name, part, acks), do: {{name, [part]}, store(s, batch, acks)}

  ## Pushes

  defp store(_session, nil, acks), do: acks

  defp store(session, {name, parts}, acks) do
    parts = :lists.reverse(parts)

    if Auth.allowed?(session.grants, :write, name) do
      # One pass over every payload: sizes checked, bytes counted.
      {parts, count, bytes} = measure(parts, session.config.max_payload_size, [], 0, 0)
      push_parts(session.config, name, parts, count, bytes, acks)
    else
      ack_all(parts, {:error, :forbidden}, acks)
    end
  end

  defp push_parts(config, name, parts, count, bytes, acks) do
    if Enum.all?(parts, &match?({_, _, :too_large, _}, &1)) do
      ack_seqs(parts, 0, acks)
    else
      case push_many(config, name, concat(parts), count, bytes) do
        {:ok, first} ->
          ack_seqs(parts, first, acks)

        # A rejecting channel: each frame goes in whole or not at all.
        {:error, :full} when tl(parts) != [] ->
          Enum.reduce(parts, acks, &push_part(config, name, &1, &2))

        {:error, reason} ->
          ack_all(parts, {:error, reason}, acks)
      end
    end
  end

  defp push_part(config, name, {_, _, n, payloads} = part, acks) do
    bytes = if n == :too_large, do: 0, else: payload_bytes(payloads, :infinity, 0)
    push_parts(config, name, [part], if(n == :too_large, do: 0, else: n), bytes, acks)
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

  defp push_many(config, name, payloads, count, bytes) do
    case Ringbus.push_measured(name, payloads, count, bytes) do
      {:error, :no_channel} = error ->
        if config.auto_create do
          Ringbus.create(name, config.auto_create)
          Ringbus.push_measured(name, payloads, count, bytes)
        else
          error
        end

      result ->
        result
    end
  end

  defp ack_seqs([{corr, mode, :too_large, _} | rest], seq, acks),
    do: ack_seqs(rest, seq, ack(mode, corr, {:error, :too_large}, acks))

  defp ack_seqs([{corr, mode, count, _} | rest], seq, acks),
    do: ack_seqs(rest, seq + count, ack(mode, corr, {:ok, seq}, acks))

  defp ack_seqs([], _seq, acks), do: acks

  defp ack_all(parts, result, acks),
    do: Enum.reduce(parts, acks, fn {corr, mode, _, _}, acks -> ack(mode, corr, result, acks) end)

  defp ack(:no_ack, _corr, _result, acks), do: acks
  defp ack(:ack, corr, result, acks), do: [{corr, result} | acks]

  # The acks of one read (in reverse) as PUSH_ACKS frames in order, each
  # within `max_frame_size`.
  defp push_acks(_config, []), do: []

  defp push_acks(config, acks) do
    per_frame = div(config.max_frame_size - @acks_overhead, @ack_entry)
    split_acks(acks, per_frame, 0, [], [])
  end

  # Walks the reversed acks once, cutting a frame every `per_frame` entries;
  # the frames come out in order.
  defp split_acks([], _per, n, entries, frames), do: [{:push_acks, n, entries} | frames]

  defp split_acks(acks, per, per, entries, frames),
    do: split_acks(acks, per, 0, [], [{:push_acks, per, entries} | frames])

  defp split_acks([ack | rest], per, n, entries, frames),
    do: split_acks(rest, per, n + 1, [ack | entries], frames)

  ## Requests
  #
  # Each returns {:ok, frames, session} or {:close, reason, error_frame}.

  defp request(%{stage: :hello} = session, {:hello, corr, version, _flags, token}) do
    cond do
      version != Frame.version() ->
        close(:bad_version, "this server speaks protocol version #{Frame.version()}", corr)

      true ->
        case Auth.authenticate(session.config.tokens, token) do
          {:ok, grants} ->
            limits = limits(session.config)

            reply(
              %{session | stage: :open, grants: grants},
              {:hello_ok, corr, Frame.version(), limits}
            )

          :error ->
            close(:auth_failed, "the token is missing or not accepted", corr)
        end
    end
  end

  defp request(%{stage: :hello}, _frame),
    do: close(:not_hello_first, "the first frame must be HELLO", 0)

  defp request(_session, {:hello, corr, _, _, _}),
    do: close(:bad_frame, "HELLO was sent twice", corr)

  defp request(session, {:ping, corr}), do: reply(session, {:pong, corr})

  defp request(session, {:create, corr, name, capacity, overflow}) do
    guarded(session, corr, :write, name, fn ->
      cond do
        capacity == 0 ->
          {:error, :bad_argument, "capacity must be positive"}

        true ->
          with :ok <- Ringbus.create(name, capacity: capacity, overflow: overflow),
               do: {:ok, corr}
      end
    end)
  end

  defp request(session, {:delete, corr, name}) do
    guarded(session, corr, :write, name, fn ->
      with :ok <- Ringbus.delete(name), do: {:ok, corr}
    end)
  end

  defp request(session, {:pull, corr, name}) do
    guarded(session, corr, :read, name, fn ->
      case Ringbus.pull(name) do
        {:ok, seq, payload} -> {:pull_ok, corr, seq, payload}
        :empty -> {:empty, corr}
        error -> error
      end
    end)
  end

  defp request(session, {:read, corr, name, from, max}) do
    guarded(session, corr, :read, name, fn ->
      with {:ok, messages, lost} <- Ringbus.read(name, from, min(max, @read_max)) do
        {count, messages, _rest} = fit(messages, session.config.max_payload_size)
        {:read_ok, corr, lost, count, messages}
      end
    end)
  end

  defp request(session, {:len, corr, name}) do
    guarded(session, corr, :read, name, fn ->
      with len when is_integer(len) <- Ringbus.len(name), do: {:len_ok, corr, len}
    end)
  end

  defp request(session, {:info, corr, name}) do
    guarded(session, corr, :read, name, fn ->
      with {:ok, info} <- Ringbus.info(name), do: {:info_ok, corr, info}
    end)
  end

  defp request(session, {:subscribe, corr, name, from, credit, max_batch}) do
    if Auth.allowed?(session.grants, :read, name) do
      subscribe(session, corr, name, from, credit, max_batch)
    else
      forbidden(session, corr, :read, name)
    end
  end

  defp request(session, {:credit, corr, sub_id, credit}) do
    case session.subs do
      %{^sub_id => sub} when credit > 0 ->
        Ringbus.ack(sub, credit)
        {:ok, [], session}

      %{^sub_id => _} ->
        error(session, corr, :bad_argument, "credit must be positive")

      _ ->
        error(session, corr, :no_subscription, "no subscription #{sub_id} on this connection")
    end
  end

  defp request(session, {:unsubscribe, corr, sub_id}) do
    case Map.pop(session.subs, sub_id) do
      {nil, _} ->
        error(session, corr, :no_subscription, "no subscription #{sub_id} on this connection")

      {sub, subs} ->
        Ringbus.unsubscribe(sub)
        reply(%{session | subs: subs, refs: Map.delete(session.refs, sub)}, {:ok, corr})
    end
  end

  defp request(_session, frame),
    do: close(:unknown_opcode, "not a request: #{elem(frame, 0)}", 0)

  defp subscribe(session, corr, name, from, credit, max_batch) do
    max_credit = session.config.max_credit

    cond do
      map_size(session.subs) >= session.config.max_subscriptions ->
        error(session, corr, :too_many_subscriptions)

      credit == 0 or max_batch == 0 ->
        error(session, corr, :bad_argument, "credit and max_batch must be positive")

      true ->
        opts = [from: from, max_credit: max_credit, credit: min(credit, max_credit)]

        case Ringbus.subscribe(name, [max_batch: max_batch] ++ opts) do
          {:ok, sub} ->
            id = session.next_sub

            session = %{
              session
              | subs: Map.put(session.subs, id, sub),
                refs: Map.put(session.refs, sub, id),
                next_sub: id + 1
            }

            reply(session, {:subscribed, corr, id})

          {:error, reason} ->
            error(session, corr, reason)
        end
    end
  end

  # Checks the grant, runs the operation and answers with what it returns:
  # a frame, or an error with or without a message of its own.
  defp guarded(session, corr, access, name, fun) do
    if Auth.allowed?(session.grants, access, name) do
      case fun.() do
        {:error, reason, message} -> error(session, corr, reason, message)
        {:error, reason} -> error(session, corr, reason)
        frame -> reply(session, frame)
      end
    else
      forbidden(session, corr, access, name)
    end
  end

  defp forbidden(session, corr, access, name),
    do: error(session, corr, :forbidden, "the token does not allow #{access} on #{inspect(name)}")

  defp reply(session, frame), do: {:ok, [frame], session}

  defp error(session, corr, reason, message \\ nil),
    do: reply(session, {:error, corr, reason, message || ErrorCode.describe(reason)})

  defp close(reason, message, corr), do: {:close, reason, {:error, corr, reason, message}}

  defp limits(config) do
    %{
      max_frame_size: config.max_frame_size,
      max_payload_size: config.max_payload_size,
      max_subscriptions: config.max_subscriptions,
      max_credit: config.max_credit,
      idle_timeout: config.idle_timeout
    }
  end

  ## Subscriptions

  @doc """
  The DELIVER frames for a batch of subscription `sub`, split where a frame
  would pass the limit; none when the subscription has ended here already.
  """
  @spec deliver(t(), term(), [{Ringbus.seq(), binary()}], non_neg_integer()) :: [Frame.t()]
  def deliver(%__MODULE__{refs: refs, config: config}, sub, messages, lost) do
    case refs do
      %{^sub => id} -> deliveries(id, messages, lost, config.max_payload_size, [])
      # Unsubscribed: deliveries already on their way are dropped.
      _ -> []
    end
  end

  defp deliveries(id, messages, lost, max, frames) do
    case fit(messages, max) do
      {count, fitted, []} ->
        :lists.reverse(frames, [{:deliver, id, lost, count, fitted}])

      {count, fitted, rest} ->
        deliveries(id, rest, 0, max, [{:deliver, id, lost, count, fitted} | frames])
    end
  end

  @doc """
  Subscription `sub` has ended for `reason` (as `Ringbus.subscribe/2` gives
  it): the SUB_CLOSED frame for it, if it was live here.
  """
  @spec closed(t(), term(), term()) :: {[Frame.t()], t()}
  def closed(%__MODULE__{} = session, sub, reason) do
    case Map.pop(session.refs, sub) do
      {nil, _} ->
        {[], session}

      {id, refs} ->
        session = %{session | refs: refs, subs: Map.delete(session.subs, id)}
        {[{:sub_closed, id, closed_code(reason)}], session}
    end
  end

  # The channel was deleted; its home node (in a cluster) went down;
  # Ringbus is stopping; its channel's anchor died of something else (the
  # subscription could not go on).
  defp closed_code(:channel_deleted), do: :no_channel
  defp closed_code(:node_down), do: :node_down
  defp closed_code(:shutdown), do: :shutting_down
  defp closed_code(_other), do: :internal

  # Takes messages while their payloads fit in one frame (at least one);
  # returns them, their count, and the rest.
  defp fit(messages, max), do: fit(messages, max, 0, 0, [])

  defp fit([{_, payload} = message | rest], max, count, bytes, acc)
       when count == 0 or bytes + byte_size(payload) + @message_overhead <= max,
       do:
         fit(rest, max, count + 1, bytes + byte_size(payload) + @message_overhead, [message | acc])

  defp fit(rest, _max, count, _bytes, acc), do: {count, :lists.reverse(acc), rest}
end
