defmodule Ringbus.Client.Session do
  @moduledoc false
  # The protocol of one client connection, as functions of data: which
  # requests wait for an answer, which async batches are in flight, which
  # subscriptions are live, and where each frame from the server goes. It
  # never touches the socket, the mailbox or the counters;
  # `Ringbus.Client.Connection` carries out what it returns:
  #
  #   {:reply, from, result}   answer a caller waiting in `GenServer.call`
  #   {:owner, message}        send a message to the client's owner
  #
  # and `handle/2` also returns how many async messages the frames acked, for
  # the connection to release from the `:max_pending` bound.
  #
  # Async pushes. The ack entries of a PUSH_ACKS frame go to the owner as
  # they are, in one message per frame. The correlation ids of acked async
  # pushes in flight are kept in send order, which is the order their acks
  # come back in, as runs of consecutive ids: a producer's pushes take
  # consecutive ids, so a push extends the last run and a frame of acks
  # shortens the first ones, O(1) a push. When the connection is lost, each
  # push still in flight gets an error entry, so the owner hears of every
  # push it sent. Batches (whose ack releases more than one message) are
  # also remembered with their message count; a batch the connection
  # coalesced from single pushes also with their ids, so that its one ack
  # entry goes to the owner as one entry a push: `{:ok, first + i}` for the
  # i-th, or the batch's error for each.

  alias Ringbus.Client.InFlight
  alias Ringbus.Wire.{ErrorCode, Frame}

  defstruct [
    # The `Ringbus.Client` value, in the owner's messages so it can match on it.
    :client,
    # Sync requests waiting for an answer: corr => {from, action}.
    pending: %{},
    # Acked async pushes of other than one message: corr => message count.
    batches: %{},
    # Batches coalesced from single pushes: corr => the pushes' ids in order.
    coalesced: %{},
    # Acked async pushes in flight, in send order (`Ringbus.Client.InFlight`).
    in_flight: InFlight.new(),
    # Live subscriptions: sub_id => true.
    subs: %{},
    # What the owner is told when the server closes: the connection error
    # the server sent before closing, or :closed.
    closing: :closed
  ]

  @type t :: %__MODULE__{}
  @type effect :: {:reply, GenServer.from(), term()} | {:owner, term()}
  @typedoc "What the caller asks the connection to do once the answer comes."
  @type action :: nil | {:unsubscribe, non_neg_integer()} | {:messages, [list()]}

  @spec new(Ringbus.Client.t()) :: t()
  def new(client), do: %__MODULE__{client: client}

  @doc "A sync request went out: its answer goes to `from`."
  @spec await(t(), Frame.corr(), GenServer.from(), action()) :: t()
  def await(session, corr, from, action),
    do: %{session | pending: Map.put(session.pending, corr, {from, action})}

  @doc "An acked async push of `count` messages went out."
  @spec async(t(), Frame.corr(), pos_integer()) :: t()
  def async(session, corr, 1), do: %{session | in_flight: InFlight.push(session.in_flight, corr)}

  def async(session, corr, count),
    do: %{async(session, corr, 1) | batches: Map.put(session.batches, corr, count)}

  @doc "A batch of `count` single pushes, ids `corrs` in order, went out as one with id `corr`."
  @spec coalesced(t(), Frame.corr(), [Frame.corr()], pos_integer()) :: t()
  def coalesced(session, corr, [first | _] = corrs, count) do
    session = async(session, corr, count)
    # One producer's pushes take consecutive ids: kept as {first, last}, the
    # batch's ids cost the connection's heap nothing while they wait.
    ids = if consecutive?(corrs, first), do: {first, first + count - 1}, else: corrs
    %{session | coalesced: Map.put(session.coalesced, corr, ids)}
  end

  defp consecutive?([corr | rest], corr), do: consecutive?(rest, corr + 1)
  defp consecutive?([], _next), do: true
  defp consecutive?(_corrs, _next), do: false

  defp ids({first, last}), do: Enum.to_list(first..last)
  defp ids(corrs), do: corrs

  @doc "The messages of the acked async pushes in flight."
  @spec messages_in_flight(t()) :: non_neg_integer()
  def messages_in_flight(session) do
    batched = session.batches |> Map.values() |> Enum.sum()
    InFlight.count(session.in_flight) - map_size(session.batches) + batched
  end

  @doc "Routes the frames of one read: the effects in order, and the async messages acked."
  @spec handle([Frame.t()], t()) :: {[effect()], non_neg_integer(), t()}
  def handle(frames, session), do: handle(frames, session, [], 0)

  defp handle([frame | rest], session, effects, released) do
    {effects, more, session} = frame(frame, session, effects)
    handle(rest, session, effects, released + more)
  end

  defp handle([], session, effects, released), do: {:lists.reverse(effects), released, session}

  @doc """
  The connection is gone: every waiting caller gets `{:error, :closed}` and,
  when `notify_owner?`, the owner gets an `{:error, :closed}` entry for
  each async push still in flight, in one `:ringbus_acks` message, and
  learns that each subscription has closed, for the connection error the
  server sent before closing (`:shutting_down`, ...) or `:closed`.
  """
  @spec down(t(), boolean()) :: [effect()]
  def down(session, notify_owner?) do
    replies =
      for {_corr, {from, _action}} <- session.pending, do: {:reply, from, {:error, :closed}}

    if notify_owner?,
      do:
        replies ++
          unanswered(session) ++
          for(
            {sub_id, _} <- session.subs,
            do: {:owner, {:ringbus_closed, sub_id, session.closing}}
          ),
      else: replies
  end

  defp unanswered(session) do
    corrs =
      Enum.flat_map(
        InFlight.to_list(session.in_flight),
        &ids(Map.get(session.coalesced, &1, [&1]))
      )

    case for corr <- corrs, do: {corr, {:error, :closed}} do
      [] -> []
      acks -> [{:owner, {:ringbus_acks, session.client, acks}}]
    end
  end

  @doc "What the owner is told the connection ended with."
  @spec closing(t()) :: term()
  def closing(%__MODULE__{closing: closing}), do: closing

  ## Frames from the server

  defp frame({:push_acks, count, acks}, session, effects) do
    if map_size(session.pending) == 0 and map_size(session.batches) == 0 and
         map_size(session.coalesced) == 0 do
      # Only single async pushes in flight: every entry is the owner's.
      session = %{session | in_flight: InFlight.drop(session.in_flight, count)}
      {[{:owner, {:ringbus_acks, session.client, acks}} | effects], count, session}
    else
      route_acks(acks, session, effects, [], 0)
    end
  end

  defp frame({deliver, sub_id, lost, _count, messages}, session, effects)
       when deliver in [:deliver, :deliver_timed] do
    if Map.has_key?(session.subs, sub_id),
      do: {[{:owner, {:ringbus, sub_id, messages, lost}} | effects], 0, session},
      else: {effects, 0, session}
  end

  # A group subscription's batch (version 7): `{seq, payload, deliveries}`
  # messages, and nothing lost (the group counts what it lost).
  defp frame({:group_deliver, sub_id, _count, messages}, session, effects),
    do: frame({:deliver, sub_id, 0, 0, messages}, session, effects)

  defp frame({:sub_closed, sub_id, reason}, session, effects) do
    case Map.pop(session.subs, sub_id) do
      {nil, _} ->
        {effects, 0, session}

      {_, subs} ->
        {[{:owner, {:ringbus_closed, sub_id, reason}} | effects], 0, %{session | subs: subs}}
    end
  end

  # A connection error (code below 100) is followed by the server closing the
  # socket; it becomes the reason the owner is told.
  defp frame({:error, corr, reason, _message}, session, effects) do
    session =
      if ErrorCode.closes_connection?(reason), do: %{session | closing: reason}, else: session

    reply(session, corr, {:error, reason}, effects)
  end

  # A subscription whose caller gave up waiting stays unknown here, so its
  # deliveries are dropped.
  defp frame({:subscribed, corr, sub_id, incarnation}, session, effects) do
    case Map.pop(session.pending, corr) do
      {nil, _} ->
        {effects, 0, session}

      {{from, _action}, pending} ->
        session = %{session | pending: pending, subs: Map.put(session.subs, sub_id, true)}
        {[{:reply, from, {:ok, sub_id, incarnation}} | effects], 0, session}
    end
  end

  defp frame({:ok, corr}, session, effects) do
    case Map.pop(session.pending, corr) do
      {{from, {:unsubscribe, sub_id}}, pending} ->
        session = %{session | pending: pending, subs: Map.delete(session.subs, sub_id)}
        {[{:reply, from, :ok} | effects], 0, session}

      _ ->
        reply(session, corr, :ok, effects)
    end
  end

  defp frame({:pong, corr}, session, effects), do: reply(session, corr, :ok, effects)
  defp frame({:empty, corr}, session, effects), do: reply(session, corr, :empty, effects)
  defp frame({:len_ok, corr, len}, s, effects), do: reply(s, corr, {:ok, len}, effects)
  defp frame({:info_ok, corr, info}, s, effects), do: reply(s, corr, {:ok, info}, effects)

  defp frame({:pull_ok, corr, seq, payload}, s, effects),
    do: reply(s, corr, {:ok, seq, payload}, effects)

  defp frame({read_ok, corr, incarnation, lost, _count, messages}, s, effects)
       when read_ok in [:read_ok, :read_timed_ok],
       do: reply(s, corr, {:ok, messages, lost, incarnation}, effects)

  defp frame({:group_count, corr, n}, s, effects), do: reply(s, corr, {:ok, n}, effects)

  defp frame({:group_info_ok, corr, groups}, s, effects),
    do: reply(s, corr, {:ok, groups}, effects)

  # A fetch's messages may come in several frames, all but the last flagged
  # `more`: the caller gets them together, with the last.
  defp frame({:group_messages, corr, true, _count, messages}, session, effects) do
    case session.pending do
      %{^corr => {from, action}} ->
        got = with({:messages, acc} <- action, do: acc, else: (_ -> []))
        pending = Map.put(session.pending, corr, {from, {:messages, [messages | got]}})
        {effects, 0, %{session | pending: pending}}

      _ ->
        {effects, 0, session}
    end
  end

  defp frame({:group_messages, corr, false, _count, messages}, session, effects) do
    got =
      case session.pending do
        %{^corr => {_from, {:messages, acc}}} -> acc
        _ -> []
      end

    reply(session, corr, {:ok, Enum.concat(:lists.reverse([messages | got]))}, effects)
  end

  defp frame(_other, session, effects), do: {effects, 0, session}

  # Answers a sync request; an answer nobody waits for (the caller timed out,
  # or it is the PONG to a keep-alive ping) is dropped.
  defp reply(session, corr, result, effects) do
    case Map.pop(session.pending, corr) do
      {nil, _} ->
        {effects, 0, session}

      {{from, _action}, pending} ->
        {[{:reply, from, result} | effects], 0, %{session | pending: pending}}
    end
  end

  # Entries of sync pushes go to their callers; the rest to the owner, in one
  # message for the frame.
  defp route_acks([{corr, result} = ack | rest], session, effects, owners, released) do
    case Map.pop(session.pending, corr) do
      {{from, _action}, pending} ->
        effects = [{:reply, from, result} | effects]
        route_acks(rest, %{session | pending: pending}, effects, owners, released)

      {nil, _} ->
        session = %{session | in_flight: InFlight.drop(session.in_flight, 1)}

        case Map.pop(session.batches, corr) do
          {nil, _} ->
            route_acks(rest, session, effects, [ack | owners], released + 1)

          {count, batches} ->
            session = %{session | batches: batches}

            case Map.pop(session.coalesced, corr) do
              {nil, _} ->
                route_acks(rest, session, effects, [ack | owners], released + count)

              {corrs, coalesced} ->
                owners = spread(corrs, result, owners)
                session = %{session | coalesced: coalesced}
                route_acks(rest, session, effects, owners, released + count)
            end
        end
    end
  end

  defp route_acks([], session, effects, [], released), do: {effects, released, session}

  defp route_acks([], session, effects, owners, released) do
    message = {:ringbus_acks, session.client, :lists.reverse(owners)}
    {[{:owner, message} | effects], released, session}
  end

  # The entries, newest first, of the pushes one coalesced batch carried.
  defp spread({first, last}, {:ok, seq}, owners) when first <= last,
    do: spread({first + 1, last}, {:ok, seq + 1}, [{first, {:ok, seq}} | owners])

  defp spread({first, last}, error, owners) when first <= last,
    do: spread({first + 1, last}, error, [{first, error} | owners])

  defp spread({_first, _last}, _result, owners), do: owners

  defp spread([corr | rest], {:ok, seq}, owners),
    do: spread(rest, {:ok, seq + 1}, [{corr, {:ok, seq}} | owners])

  defp spread([corr | rest], error, owners), do: spread(rest, error, [{corr, error} | owners])
  defp spread([], _result, owners), do: owners
end
