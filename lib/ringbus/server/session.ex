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

  alias Ringbus.Server.{Auth, Config, Fetches, Fit, GroupRequests, PushRun}
  alias Ringbus.Wire.{Decoder, Entries, ErrorCode, Frame, GroupFrame, InfoFrame}

  # Version 5's consumer-group requests (`Ringbus.Server.GroupRequests`).
  @group_requests Keyword.keys(GroupFrame.requests())

  # What INFO_OK carries of `Ringbus.info/1` (which has more: a replicated
  # channel's Raft figures); version 4 adds `:replicas` and `:nodes` (`info/2`).
  @info_fields InfoFrame.keys(3)
  @time_fields InfoFrame.keys(6) -- InfoFrame.keys(4)

  @read_max 1_000

  # Every incarnation is drawn non-zero: a READ or SUBSCRIBE stating 0 names
  # none that can exist (docs/PROTOCOL.md, section 5, "Incarnations").
  @zero_incarnation "a stated incarnation must not be 0"

  defstruct [
    :config,
    # The protocol version HELLO chose.
    version: nil,
    stage: :hello,
    grants: nil,
    # sub_id => subscription handle, and handle => sub_id
    subs: %{},
    refs: %{},
    next_sub: 1,
    # sub_id => {channel, group, consumer} of a group subscription (version 7)
    groups: %{},
    # GROUP_FETCHes that wait (`Ringbus.Server.Fetches`).
    fetches: Fetches.new()
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
    {status, :lists.reverse(out, PushRun.push_acks(session.config, acks)), session}
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

  # A version 3 or 4 connection has no group frames, nor one before version
  # 7 GROUP_SUBSCRIBE: a malformed one is an unknown opcode to it.
  def fatal_frame(%__MODULE__{version: v}, decode_error)
      when is_tuple(decode_error) and
             ((v in [3, 4] and elem(decode_error, 1) in @group_requests) or
                (v < 7 and elem(decode_error, 1) == :group_subscribe)) do
    unknown_opcode(elem(decode_error, 1))
  end

  def fatal_frame(_session, decode_error) do
    reason = Decoder.error_code(decode_error)
    fatal(reason, "cannot decode frame: #{inspect(decode_error)}")
  end

  defp fatal(reason, message), do: {reason, {:error, 0, reason, message}}

  defp unknown_opcode(type) do
    message = "cannot decode frame: #{inspect({:unknown_opcode, Frame.opcode(type)})}"
    fatal(:unknown_opcode, message)
  end

  @doc """
  What a stopping server writes last: `SUB_CLOSED shutting_down` for each
  live subscription, in the order they were made, then `ERROR shutting_down`.
  """
  @spec shutdown_frames(t()) :: [Frame.t()]
  def shutdown_frames(%__MODULE__{} = session) do
    {_reason, error} = fatal_frame(session, :shutting_down)
    ids = session.subs |> Map.keys() |> Enum.sort()
    for(id <- ids, do: {:sub_closed, id, :shutting_down}) ++ [error]
  end

  ## Frames

  # `run` collects consecutive pushes to one channel; they are stored before
  # any other frame runs. `out` and `acks` are in reverse.
  defp run([{:push, _, _, _, _} | _] = frames, %{stage: :open} = s, run, out, acks) do
    {frames, run, acks} = PushRun.pushes(frames, s, run, acks)
    run(frames, s, run, out, acks)
  end

  # Acked PUSHes the decoder grouped (`Ringbus.Wire.Decoder`'s
  # `:group_pushes`): corrs and payloads newest first, as a run keeps them.
  defp run([{:pushes, name, n, bytes, corrs, ps} | rest], %{stage: :open} = s, run, out, acks) do
    {run, acks} =
      case run do
        {^name, parts, payloads, count, run_bytes} ->
          {{name, corrs ++ parts, ps ++ payloads, count + n, run_bytes + bytes}, acks}

        _ ->
          {{name, corrs, ps, n, bytes}, PushRun.store(s, run, acks)}
      end

    run(rest, s, run, out, acks)
  end

  # A batch the decoder kept packed goes alone, after the run before it.
  defp run(
         [{:push_batch, corr, mode, name, _n, %Entries{} = ps} | rest],
         %{stage: :open} = s,
         run,
         out,
         acks
       ) do
    acks = PushRun.store(s, run, acks)
    acks = PushRun.ack(mode, corr, PushRun.packed(s, name, nil, ps), acks)
    run(rest, s, nil, out, acks)
  end

  defp run([{:push_batch, corr, mode, name, n, ps} | rest], %{stage: :open} = s, run, out, acks) do
    {run, acks} = PushRun.collect(s, run, name, {corr, mode, n, ps}, acks)
    run(rest, s, run, out, acks)
  end

  # A tagged push goes alone, after the run before it is stored (so first):
  # `Ringbus.push/3` checks its tag at the channel's home.
  defp run([{:tagged_push, corr, mode, name, tag, p} | rest], %{stage: :open} = s, run, out, acks) do
    acks = PushRun.store(s, run, acks)
    acks = PushRun.ack(mode, corr, PushRun.tagged(s, name, tag, [p]), acks)
    run(rest, s, nil, out, acks)
  end

  defp run(
         [{:tagged_push_batch, corr, mode, name, tag, _n, ps} | rest],
         %{stage: :open} = s,
         run,
         out,
         acks
       ) do
    acks = PushRun.store(s, run, acks)

    result =
      case ps do
        %Entries{} -> PushRun.packed(s, name, tag, ps)
        _list -> PushRun.tagged(s, name, tag, ps)
      end

    acks = PushRun.ack(mode, corr, result, acks)
    run(rest, s, nil, out, acks)
  end

  defp run([frame | rest], session, run, out, acks) do
    acks = PushRun.store(session, run, acks)

    case request(session, frame) do
      {:ok, frames, session} -> run(rest, session, nil, :lists.reverse(frames, out), acks)
      {:close, reason, frame} -> {{:close, reason}, [frame | out], acks, session}
    end
  end

  defp run([], session, run, out, acks),
    do: {:ok, out, PushRun.store(session, run, acks), session}

  ## Requests
  #
  # Each returns {:ok, frames, session} or {:close, reason, error_frame}.

  defp request(%{stage: :hello} = session, {:hello, corr, version, _flags, token}) do
    cond do
      version not in Frame.versions() ->
        close(:bad_version, "this server speaks protocol versions #{versions()}", corr)

      true ->
        case Auth.authenticate(session.config.tokens, token) do
          {:ok, grants} ->
            limits = limits(session.config)

            reply(
              %{session | stage: :open, grants: grants, version: version},
              {:hello_ok, corr, version, limits}
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

  defp request(%{version: v}, {:group_subscribe, _, _, _, _, _, _, _}) when v < 7,
    do: close(:unknown_opcode, "not a request: group_subscribe (protocol version 7)", 0)

  # Version 6's forms on an older connection, whose decoder never knew them;
  # a version 6 CREATE ends with max_age.
  defp request(%{version: v}, frame) when v < 6 and tuple_size(frame) == 8,
    do: close(:bad_frame, "#{elem(frame, 0)} with time needs protocol version 6", 0)

  defp request(%{version: v}, {:read, _, _, _, _, _, _}) when v < 6,
    do: close(:bad_frame, "read with time needs protocol version 6", 0)

  defp request(%{version: v}, {:group_create, _, _, _, {:time, _}, _, _, _, _}) when v < 6,
    do: close(:bad_frame, "group_create with time needs protocol version 6", 0)

  defp request(%{version: v}, {:group_fetch_timed, _, _, _, _, _, _} = frame) when v < 6,
    do: close(:unknown_opcode, "not a request: #{elem(frame, 0)}", 0)

  defp request(%{version: v}, {:create, _, _, _, _, _, _}) when v >= 6,
    do: close(:bad_frame, "a version 6 CREATE ends with max_age", 0)

  defp request(session, {:create, corr, name, capacity, overflow, max_bytes, replicas}),
    do: create(session, {corr, name}, {capacity, overflow, max_bytes, replicas, nil})

  defp request(session, {:create, corr, name, capacity, overflow, max_bytes, replicas, age}),
    do: create(session, {corr, name}, {capacity, overflow, max_bytes, replicas, age})

  defp request(session, {:delete, corr, name}) do
    guarded(session, corr, :manage, name, fn ->
      with :ok <- Ringbus.delete(name), do: {:ok, corr}
    end)
  end

  # A pull removes what it takes: it needs the right to write.
  defp request(session, {:pull, corr, name}) do
    guarded(session, corr, :write, name, fn ->
      case Ringbus.pull(name) do
        {:ok, seq, payload} -> {:pull_ok, corr, seq, payload}
        :empty -> {:empty, corr}
        error -> error
      end
    end)
  end

  defp request(session, {:read, corr, name, from, max}),
    do: read(session, corr, name, {from, max}, nil, false)

  defp request(session, {:read, corr, name, from, max, incarnation}),
    do: read(session, corr, name, {from, max}, incarnation, false)

  defp request(session, {:read, corr, name, from, max, incarnation, times?}),
    do: read(session, corr, name, {from, max}, incarnation, times?)

  defp request(session, {:len, corr, name}) do
    guarded(session, corr, :read, name, fn ->
      with len when is_integer(len) <- Ringbus.len(name), do: {:len_ok, corr, len}
    end)
  end

  defp request(session, {:info, corr, name}) do
    guarded(session, corr, :read, name, fn ->
      with {:ok, info} <- Ringbus.info(name), do: {:info_ok, corr, info(session, info)}
    end)
  end

  defp request(session, {:subscribe, corr, name, from, credit, max_batch}),
    do: subscribe(session, {corr, name, from, credit, max_batch}, nil, false)

  defp request(session, {:subscribe, corr, name, from, credit, max_batch, incarnation}),
    do: subscribe(session, {corr, name, from, credit, max_batch}, incarnation, false)

  defp request(session, {:subscribe, corr, name, from, credit, max_batch, incarnation, times?}),
    do: subscribe(session, {corr, name, from, credit, max_batch}, incarnation, times?)

  defp request(session, {:group_subscribe, corr, name, group, consumer, credit, max_batch, t?}) do
    if Auth.allowed?(session.grants, :write, name) do
      key = {name, group, consumer}
      start = &GroupRequests.subscribe(key, &1, max_batch, t?)
      add_sub(session, corr, {credit, max_batch, nil}, key, start)
    else
      forbidden(session, corr, :write, name)
    end
  end

  defp request(session, {:credit, corr, sub_id, credit}) do
    case session.subs do
      %{^sub_id => _} when is_map_key(session.groups, sub_id) ->
        error(session, corr, :bad_argument, "a group subscription's credit comes with GROUP_ACK")

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
        {group, groups} = Map.pop(session.groups, sub_id)
        if group, do: GroupRequests.unsubscribed(group)
        session = %{session | subs: subs, refs: Map.delete(session.refs, sub), groups: groups}
        reply(session, {:ok, corr})
    end
  end

  defp request(%{version: version}, frame)
       when elem(frame, 0) in @group_requests and version in [3, 4] do
    {reason, error} = unknown_opcode(elem(frame, 0))
    {:close, reason, error}
  end

  defp request(session, frame) when elem(frame, 0) in @group_requests do
    {access, channel} = GroupRequests.access(frame)
    corr = elem(frame, 1)
    guarded(session, corr, access, channel, fn -> GroupRequests.run(frame, session.config) end)
  end

  defp request(_session, frame),
    do: close(:unknown_opcode, "not a request: #{elem(frame, 0)}", 0)

  defp create(session, {corr, name}, {capacity, overflow, max_bytes, replicas, age}) do
    guarded(session, corr, :manage, name, fn ->
      opts = [capacity: capacity, overflow: overflow, max_bytes: max_bytes, replicas: replicas]
      opts = if age, do: opts ++ [max_age: age], else: opts

      case capacity > 0 and Ringbus.create(name, opts) do
        false -> {:error, :bad_argument, "capacity must be positive"}
        :ok -> {:ok, corr}
        {:error, :node_down} when replicas != nil -> {:error, :node_down, needs(replicas)}
        error -> error
      end
    end)
  end

  # READ_OK names the incarnation its seqs are of: the one stated, or the
  # channel's, which the read answers with its messages (one request).
  defp read(session, corr, name, {from, max}, incarnation, times?) do
    read = {:read, from, min(max, @read_max), incarnation}
    read = if times?, do: Tuple.append(read, :times), else: read

    guarded(session, corr, :read, name, fn ->
      case incarnation != 0 and Ringbus.run(name, {:stamped, read}) do
        {:ok, inc, {:ok, messages, lost}} ->
          {count, messages, _rest} = fit(messages, session.config.max_payload_size)
          {if(times?, do: :read_timed_ok, else: :read_ok), corr, inc, lost, count, messages}

        false ->
          {:error, :bad_argument, @zero_incarnation}

        {:ok, _inc, error} ->
          error

        error ->
          error
      end
    end)
  end

  # SUBSCRIBED names the incarnation its seqs are of: without one stated,
  # the channel's is looked up and stated, and looked up again when the
  # channel was created anew in between.
  defp at_incarnation(name, incarnation, fun, tries \\ 3)

  defp at_incarnation(name, nil, fun, tries) do
    with {:ok, inc} <- Ringbus.incarnation(name) do
      case fun.(inc) do
        {:error, :new_incarnation} when tries > 1 -> at_incarnation(name, nil, fun, tries - 1)
        answer -> answer
      end
    end
  end

  defp at_incarnation(_name, incarnation, fun, _tries), do: fun.(incarnation)

  defp subscribe(session, {corr, name, from, credit, max_batch}, incarnation, times?) do
    if Auth.allowed?(session.grants, :read, name) do
      subscribe(session, corr, name, {from, incarnation, times?}, credit, max_batch)
    else
      forbidden(session, corr, :read, name)
    end
  end

  defp subscribe(session, corr, name, {from, incarnation, times?}, credit, max_batch) do
    start = fn credit ->
      opts = [from: from, max_credit: session.config.max_credit, credit: credit, via: :binary]
      opts = if times?, do: [times: true] ++ opts, else: opts

      at_incarnation(name, incarnation, fn inc ->
        with {:ok, sub} <-
               Ringbus.subscribe(name, [max_batch: max_batch, incarnation: inc] ++ opts),
             do: {:ok, sub, inc}
      end)
    end

    add_sub(session, corr, {credit, max_batch, incarnation}, nil, start)
  end

  # `start.(credit)` subscribes: `{:ok, sub, incarnation}` or an error;
  # `group` is a group subscription's `{channel, group, consumer}`.
  defp add_sub(session, corr, {credit, max_batch, incarnation}, group, start) do
    cond do
      map_size(session.subs) >= session.config.max_subscriptions ->
        error(session, corr, :too_many_subscriptions)

      credit == 0 or max_batch == 0 ->
        error(session, corr, :bad_argument, "credit and max_batch must be positive")

      incarnation == 0 ->
        error(session, corr, :bad_argument, @zero_incarnation)

      true ->
        case start.(min(credit, session.config.max_credit)) do
          {:ok, sub, inc} ->
            id = session.next_sub

            session = %{
              session
              | subs: Map.put(session.subs, id, sub),
                refs: Map.put(session.refs, sub, id),
                groups: if(group, do: Map.put(session.groups, id, group), else: session.groups),
                next_sub: id + 1
            }

            reply(session, {:subscribed, corr, id, inc})

          {:error, reason} ->
            error(session, corr, reason)
        end
    end
  end

  defp versions do
    {last, others} = List.pop_at(Frame.versions(), -1)
    Enum.join(others, ", ") <> " and #{last}"
  end

  # Version 4's INFO_OK also says how many members the channel has (nil:
  # a memory channel) and how many nodes this server's node reaches, itself
  # included: the most `replicas` a CREATE through it can ask for now.
  defp info(%{version: 3}, info), do: Map.take(info, @info_fields)

  defp info(%{version: v}, info) do
    replicas = if n = info[:replicas], do: min(n, Frame.max_replicas())
    fields = if v >= 6, do: @info_fields ++ @time_fields, else: @info_fields

    info
    |> Map.take(fields)
    |> Map.merge(%{replicas: replicas, nodes: min(nodes(), 0xFFFF)})
  end

  defp nodes, do: length(Node.list()) + 1

  defp needs(n), do: "replicas #{n} needs #{n} nodes, #{nodes()} connected"

  # Checks the grant, runs the operation and answers with what it returns:
  # a frame, or an error with or without a message of its own.
  defp guarded(session, corr, access, name, fun) do
    if Auth.allowed?(session.grants, access, name) do
      case fun.() do
        {:error, reason, message} -> error(session, corr, reason, message)
        {:error, reason} -> error(session, corr, reason)
        {:frames, frames} -> {:ok, frames, session}
        {:wait, fun} -> wait(session, corr, fun)
        frame -> reply(session, frame)
      end
    else
      forbidden(session, corr, access, name)
    end
  end

  defp wait(session, corr, fun) do
    case Fetches.add(session.fetches, corr, fun) do
      {:ok, fetches} -> {:ok, [], %{session | fetches: fetches}}
      :full -> error(session, corr, :too_many_fetches)
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
  def deliver(%__MODULE__{refs: refs, groups: groups, config: config}, sub, messages, lost) do
    case refs do
      %{^sub => id} when is_map_key(groups, id) -> GroupRequests.deliveries(id, messages, config)
      %{^sub => id} -> deliveries(id, messages, lost, config.max_payload_size, [])
      # Unsubscribed: deliveries already on their way are dropped.
      _ -> []
    end
  end

  defp deliveries(id, messages, lost, max, frames) do
    case fit(messages, max) do
      {count, fitted, []} ->
        :lists.reverse(frames, [delivery(id, lost, count, fitted)])

      {count, fitted, rest} ->
        deliveries(id, rest, 0, max, [delivery(id, lost, count, fitted) | frames])
    end
  end

  # A subscription with times delivers its messages `{seq, payload, ms}`.
  defp delivery(id, lost, count, [{_, _, _} | _] = timed),
    do: {:deliver_timed, id, lost, count, timed}

  defp delivery(id, lost, count, messages), do: {:deliver, id, lost, count, messages}

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
        subs = Map.delete(session.subs, id)
        session = %{session | refs: refs, subs: subs, groups: Map.delete(session.groups, id)}
        {[{:sub_closed, id, closed_code(reason)}], session}
    end
  end

  # The channel was deleted; its home node (in a cluster) went down;
  # Ringbus is stopping; its channel's anchor died of something else (the
  # subscription could not go on).
  defp closed_code(:channel_deleted), do: :no_channel
  defp closed_code(:node_down), do: :node_down
  defp closed_code(:no_group), do: :no_group
  defp closed_code(:shutdown), do: :shutting_down
  defp closed_code(_other), do: :internal

  defp fit(messages, max), do: Fit.fit(messages, max)
end
