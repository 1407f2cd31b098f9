defmodule Ringbus.Cluster.Home do
  @moduledoc false
  # What another node asks of a channel homed here, run by the link that
  # brought the request, on the channel layer directly, as `Ringbus` runs it
  # for a local caller. Creates and deletes are the directory's, which
  # answers them in its own time; everything else answers at once.
  #
  # The link is the subscriber of every subscription a remote node takes
  # here: the subscription sends it the batches, which it forwards in its
  # next batch to the node of the real subscriber. So a subscription ends
  # when its link does, as a local one ends with its subscriber.
  #
  # On a replicated channel of which this node is a member, reads run on
  # its ring as above; writes and deletes wait on Ra, which a link must
  # not, so they are `{:async, fun}`: the link runs `fun` in a process of
  # its own and forwards its result as the answer.

  alias Ringbus.{Replica, Store}
  alias Ringbus.Channel.{Producers, Ring, Subscription}
  alias Ringbus.Cluster.Directory

  # What a message costs in an answer beyond its payload, as the link counts it.
  @message_bytes 16
  # Messages a cut read takes from the ring at a time.
  @read_step 64

  @typedoc "A request from another node, as `Ringbus.Cluster.Router` sends it."
  @type op ::
          {:push, binary()}
          | {:push_many, [binary()], non_neg_integer(), non_neg_integer()}
          | {:push_run, [binary()], pos_integer(), non_neg_integer()}
          | {:push_tagged, {term(), integer()} | nil, [binary()], non_neg_integer(),
             non_neg_integer()}
          | {:push_batches, [{[binary()], non_neg_integer(), non_neg_integer()}]}
          | :pull
          | {:read, non_neg_integer(), non_neg_integer()}
          | {:read, non_neg_integer(), non_neg_integer(), pos_integer()}
          | :len
          | :info
          | :incarnation
          | {:subscribe, keyword()}
          | {:subscriptions, timeout(), pos_integer()}
          | {:create, keyword()}
          | :delete
          | {:apply, module(), atom(), list()}

  @doc """
  Runs `op` on channel `name` for `link`, whose answers may carry at most
  `room` bytes (`answer_bytes/1`): `{:reply, answer}`, or
  `{:directory, request}` when the directory must answer it, or
  `{:async, fun}` when the answer waits on other processes: the link runs
  `fun` in a process of its own, whose result is the answer.

  A read answers at most `room` div 4 bytes of messages, so that several fit
  in the link at once, but always its first message if that fits in `room`;
  a first message (or a pulled one) larger than `room` is answered
  `{:error, :too_large}` and stays in the ring.
  """
  @spec run(term(), op(), pid(), pos_integer()) ::
          {:reply, term()} | {:directory, term()} | {:async, (() -> term())}
  def run(name, {:create, opts}, _link, _room), do: {:directory, {:create, name, opts}}

  def run(name, :delete, _link, _room) do
    case Store.fetch(name) do
      {:ok, %{replica: replica} = channel} when replica != nil ->
        {:async, fn -> delete_replicated(channel, name) end}

      _ ->
        {:directory, {:delete, name}}
    end
  end

  # A survey waits up to `timeout` for the subscriptions' answers.
  def run(name, {:subscriptions, timeout, limit}, _link, _room),
    do: {:async, fn -> survey(name, timeout, limit) end}

  # A front end's own state beside the channel (`Ringbus.at_home/2`): the
  # function is data, so this layer names no front end. What it raises is
  # answered as text, and the link goes on.
  def run(name, {:apply, module, function, args}, _link, _room) do
    case Store.fetch(name) do
      {:ok, channel} -> {:reply, applied(module, function, [name, channel.incarnation | args])}
      error -> {:reply, error}
    end
  end

  def run(name, op, link, room) do
    case Store.fetch(name) do
      {:ok, %{replica: replica} = channel} when replica != nil ->
        run_replicated(channel, op, {link, room})

      {:ok, channel} ->
        {:reply, run_on(channel, op, {link, room})}

      error ->
        {:reply, error}
    end
  rescue
    # The channel was deleted while the request ran.
    ArgumentError -> {:reply, {:error, :no_channel}}
  end

  defp applied(module, function, args) do
    {:ok, apply(module, function, args)}
  catch
    kind, reason -> {:error, {:raised, Exception.format_banner(kind, reason, __STACKTRACE__)}}
  end

  defp run_replicated(channel, {:push, payload}, _link),
    do: {:async, fn -> Replica.push(channel, [payload], byte_size(payload), []) end}

  defp run_replicated(channel, {push, payloads, _count, bytes}, _link)
       when push in [:push_many, :push_run],
       do: {:async, fn -> Replica.push(channel, payloads, bytes, []) end}

  defp run_replicated(channel, {:push_tagged, tag, payloads, _count, bytes}, _link),
    do: {:async, fn -> Replica.push(channel, payloads, bytes, producer: tag) end}

  defp run_replicated(channel, {:push_batches, batches}, _link),
    do: {:async, fn -> Replica.push_batches(channel, batches) end}

  defp run_replicated(channel, :pull, {_link, room}) do
    case Ring.read(channel, 0, 1) do
      {[{_, payload}], _, _, _} when byte_size(payload) + @message_bytes > room ->
        {:reply, {:error, :too_large}}

      _ ->
        {:async, fn -> Replica.pull(channel) end}
    end
  end

  defp run_replicated(channel, :info, _link), do: {:reply, {:ok, Replica.info(channel)}}
  defp run_replicated(channel, op, link), do: {:reply, run_on(channel, op, link)}

  # Every member drops it, then every node forgets its entry.
  defp delete_replicated(%{replica: replica} = channel, name) do
    with :ok <- Replica.delete(channel, name),
         do: Directory.deleted(name, Map.get(replica, :stamp))
  end

  defp run_on(channel, {:push, payload}, _link), do: Ring.push(channel, payload)

  defp run_on(channel, {:push_many, payloads, count, bytes}, _link),
    do: Ring.push_measured(channel, payloads, count, bytes)

  defp run_on(channel, {:push_run, payloads, count, bytes}, _link),
    do: Ring.push_run(channel, payloads, count, bytes)

  # A producer tag is checked here, at the home, so a resend after :timeout
  # finds the tag its first send stored.
  defp run_on(channel, {:push_tagged, tag, payloads, count, bytes}, _link),
    do: Producers.push_tagged(channel, tag, payloads, count, bytes)

  defp run_on(channel, {:push_batches, batches}, _link),
    do: {:ok, Ring.push_batches(channel, batches)}

  # The oldest message is looked at first, so one too large for the link
  # stays in the ring. (One that another puller's take puts at the head
  # between the look and the pull still goes, whole.)
  defp run_on(channel, :pull, {_link, room}) do
    case Ring.read(channel, 0, 1) do
      {[{_, payload}], _, _, _} when byte_size(payload) + @message_bytes > room ->
        {:error, :too_large}

      _ ->
        Ring.pull(channel)
    end
  end

  defp run_on(channel, {:read, from, max}, {_link, room}) do
    case cut_read(channel, from, max, div(room, 4), room) do
      {[], 0, lost} when max > 0 -> too_large_or_empty(channel, from, lost, room)
      {messages, _bytes, lost} -> {:ok, messages, lost}
    end
  end

  defp run_on(channel, {:read, from, max, incarnation}, link) do
    with :ok <- Ring.check_incarnation(channel, incarnation),
         do: run_on(channel, {:read, from, max}, link)
  end

  defp run_on(channel, :len, _link), do: Ring.len(channel)
  defp run_on(channel, :info, _link), do: {:ok, Ring.info(channel)}
  defp run_on(channel, :incarnation, _link), do: {:ok, channel.incarnation}

  defp run_on(channel, {:subscribe, opts}, {link, _room}),
    do: Subscription.start(channel, link, opts)

  @doc """
  Ends a subscription homed here without waiting for it: it may have a
  backlog to get through first, and the link must not wait on it.
  """
  @spec unsubscribe(Subscription.t()) :: :ok
  def unsubscribe(sub) do
    spawn(fn -> Subscription.stop(sub) end)
    :ok
  end

  @doc "Returns credit to a subscription homed here."
  @spec ack(Subscription.t(), pos_integer()) :: :ok
  def ack(sub, count) do
    Subscription.ack(sub, count)
    :ok
  end

  defp survey(name, timeout, limit) do
    case Store.fetch(name) do
      {:ok, channel} -> {:ok, Subscription.survey(channel, timeout, limit)}
      error -> error
    end
  rescue
    # Deleted meanwhile.
    ArgumentError -> {:error, :no_channel}
  end

  # Reads up to `max` messages from `from` while they fit in `budget` bytes,
  # the first one in `room`: a few at a time, so a large `max` of large
  # messages is not all taken from the ring to be cut. Stops at a gap (what
  # a step finds lost), which the next read from the seq after reports.
  defp cut_read(channel, from, max, budget, room) do
    {messages, _n, lost, next} = Ring.read(channel, from, min(max, @read_step))
    {acc, taken, bytes, cut?} = fit(messages, [], 0, 0, budget, room)
    stop? = cut? or taken == 0 or taken < @read_step
    {acc, bytes} = cut_more(channel, next, max - taken, acc, bytes, budget, stop?)
    {:lists.reverse(acc), bytes, lost}
  end

  defp cut_more(_channel, _from, left, acc, bytes, _budget, stop?) when stop? or left <= 0,
    do: {acc, bytes}

  defp cut_more(channel, from, left, acc, bytes, budget, false) do
    case Ring.read(channel, from, min(left, @read_step)) do
      {[_ | _] = messages, n, 0, next} ->
        {acc, taken, bytes, cut?} = fit(messages, acc, 0, bytes, budget, budget)
        cut_more(channel, next, left - taken, acc, bytes, budget, cut? or n < @read_step)

      _ ->
        {acc, bytes}
    end
  end

  # Takes messages while they fit in `budget`, the very first in `room`;
  # returns them newest first, how many, their bytes, and whether one did
  # not fit.
  defp fit([{_, payload} = message | rest], acc, taken, bytes, budget, room) do
    cost = byte_size(payload) + @message_bytes

    if (acc == [] and cost <= room) or (acc != [] and bytes + cost <= budget),
      do: fit(rest, [message | acc], taken + 1, bytes + cost, budget, room),
      else: {acc, taken, bytes, true}
  end

  defp fit([], acc, taken, bytes, _budget, _room), do: {acc, taken, bytes, false}

  # Nothing fitted: either nothing is there, or the first message is too large.
  defp too_large_or_empty(channel, from, lost, room) do
    case Ring.read(channel, from, 1) do
      {[{_, payload}], _, _, _} when byte_size(payload) + @message_bytes > room ->
        {:error, :too_large}

      _ ->
        {:ok, [], lost}
    end
  end

  @doc """
  The bytes an answer carries, to bound what a link holds: payloads and
  what each message costs beyond its payload.
  """
  @spec answer_bytes(term()) :: non_neg_integer()
  def answer_bytes({:ok, messages, _lost}) when is_list(messages), do: messages_bytes(messages)

  def answer_bytes({:ok, _seq, payload}) when is_binary(payload),
    do: byte_size(payload) + @message_bytes

  # A survey's figures: a monitoring answer, measured whole.
  def answer_bytes({:ok, [%{} | _]} = answer), do: :erlang.external_size(answer)
  # A front end's answer (`{:apply, ...}`): measured, as nothing bounds it before.
  def answer_bytes({:ok, answer}) when not is_integer(answer), do: :erlang.external_size(answer)

  def answer_bytes(_answer), do: 0

  @doc "The bytes messages `[{seq, payload}]` cost in a link: payloads and overhead."
  @spec messages_bytes([{non_neg_integer(), binary()}]) :: non_neg_integer()
  def messages_bytes(messages) do
    {n, bytes} = measure(messages)
    bytes + @message_bytes * n
  end

  @doc "How many messages `[{seq, payload}]` holds, and their payload bytes, in one pass."
  @spec measure([{non_neg_integer(), binary()}]) :: {non_neg_integer(), non_neg_integer()}
  def measure(messages), do: measure(messages, 0, 0)

  defp measure([{_, payload} | rest], n, bytes),
    do: measure(rest, n + 1, bytes + byte_size(payload))

  defp measure([], n, bytes), do: {n, bytes}
end
