defmodule Ringbus.Cluster.Link do
  @moduledoc false
  # All traffic between this node and one other goes through one link
  # process on each side: requests and their answers, subscription batches
  # and credit, directory messages. A link lives for one connection to its
  # peer link; when the node goes down or the peer link stops, it stops too
  # (its remote subscribers get `{:ringbus_closed, sub, :node_down}`, the
  # subscriptions it holds here end with it) and `Ringbus.Cluster.Members`
  # starts a new one when the node is back.
  #
  # Sending. Everything for the other node goes into a byte-bounded outbox
  # (`Ringbus.Cluster.Outbox`); when the mailbox is empty, or the outbox
  # holds `batch_bytes`, the link sends it as one distribution message with
  # `:erlang.send(peer, batch, [:noconnect, :nosuspend])`:
  #
  #   - `:ok`: sent; counted in `batches`.
  #   - `:nosuspend`: the distribution buffer is full (the node is slow or
  #     silent). A plain send would suspend the link here for as long as the
  #     node stays silent; instead the batch stays in the outbox, the
  #     suspension is counted, and the link tries again after 1, 2, 4 ... 50
  #     ms. Nothing else waits meanwhile.
  #   - `:noconnect`: the node is not connected; the link stops. With only
  #     `:nosuspend`, a send to a node whose connection is being set up again
  #     would wait for the setup (up to `net_setuptime`, 7 s); reconnecting
  #     is `Members`' job, in processes nobody waits on.
  #
  # Bounds. `Home` cuts a read's answer to a quarter of `max_buffer_bytes`
  # (at least one message) and refuses `:too_large` a read, pull or push of
  # one message larger than the bound. When an item does not fit in the outbox: a request is answered
  # `{:error, :node_busy}` at once, an answer is dropped (its caller gets
  # `{:error, :timeout}` when it stops waiting), a directory message is dropped and
  # the directory resyncs the node once the link drains; each is counted in
  # `drops`. Subscription batches are never dropped: a subscription sends at
  # most its credit, and while the outbox is full the link holds back the
  # credit its subscriber returns, so the subscription stops and its
  # messages wait in the ring, where an overwrite counts in `lost` as it
  # would for a local subscriber. What a link holds is thus bounded by
  # `max_buffer_bytes` plus the credit of its subscriptions. Credit going
  # out is added up per subscription; closes and unsubscribes are at most
  # one per subscription; both always go in.
  #
  # Silence. Every batch with items carries a sequence number, and the peer
  # acknowledges the highest it has handled in its next batch (an empty one
  # if it has nothing else to send). A batch unacknowledged for longer than
  # `busy_timeout` makes the link busy: callers get `{:error, :node_busy}`
  # without waiting, until the peer catches up. Before that, a request
  # waits in the outbox at most its caller's `call_timeout`: one still there
  # when its caller gave up is dropped, not sent (`node_busy`, certainly not
  # carried out). One that left in a batch is waited on until
  # `reply_timeout`, then answered `{:error, :timeout}` (unknown outcome).
  # Which of the two happened is settled by a flag per request
  # (`Ringbus.Cluster.Links`). The timeouts and `busy_timeout` are apart on
  # purpose: one slow answer (a scheduler stall on a loaded machine) fails
  # its own call, not every call for `busy_timeout`.
  #
  # Backlog safety: it takes messages in arrival order, never receives
  # selectively, counts no list, and keeps its queue off the heap.

  use GenServer

  alias Ringbus.Op
  alias Ringbus.Cluster.{Directory, Home, Links, Outbox}

  # What a request, an answer or a batch of messages costs beyond its
  # payloads, roughly: enough that many small items still count.
  @item_bytes 64
  @retry_max 50

  @doc false
  def child_spec(args),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [args]}, restart: :temporary}

  @doc "Starts the link to `args.node`."
  @spec start_link(map()) :: GenServer.on_start()
  def start_link(args),
    do: GenServer.start_link(__MODULE__, args, spawn_opt: [message_queue_data: :off_heap])

  @impl true
  def init(%{node: node, counters: counters, config: config}) do
    Process.flag(:trap_exit, true)
    Links.set_state(counters, :down)
    Links.set_queued(counters, 0)
    Links.put(node, self(), counters, config)
    :ok = :pg.join(Links.scope(), Links.group(node), self())

    state = %{
      node: node,
      peer: nil,
      counters: counters,
      busy_timeout: config.busy_timeout,
      batch_bytes: config.batch_bytes,
      outbox: Outbox.new(config.max_buffer_bytes),
      # Sending: the last seq sent, the batches not yet acknowledged
      # ({seq, sent_at}), the seq to acknowledge to the peer and the last
      # one acknowledged.
      seq: 0,
      unacked: :queue.new(),
      ack_due: 0,
      ack_sent: 0,
      # Why the link is busy, if it is.
      full?: false,
      stale?: false,
      # The last retry delay while the distribution buffer refuses batches.
      suspended: nil,
      checking?: false,
      resync?: false,
      # Subscriptions whose subscriber is here: sub => {subscriber, monitor}.
      routes: %{},
      watched: %{},
      # Subscribe requests on their way: request ref => {subscriber, flag}.
      subscribing: %{},
      # Credit to send, per subscription at the peer.
      acks: %{},
      # Credit the peer returned to subscriptions homed here, held back
      # while the outbox is full.
      owed: %{}
    }

    {:ok, state}
  end

  ## From the peer and from Members

  @impl true
  def handle_info({:ringbus_batch, from, seq, ack_through, items}, state) do
    cond do
      from == state.peer ->
        receive_batch(state, seq, ack_through, items)

      state.peer == nil and node(from) == state.node ->
        receive_batch(connect(state, from), seq, ack_through, items)

      # A batch of a peer link that has stopped: its session is over.
      true ->
        noreply(state)
    end
  end

  def handle_info({:ringbus_link_peer, pid}, %{peer: nil} = state),
    do: noreply(connect(state, pid))

  def handle_info({:ringbus_link_peer, pid}, %{peer: pid} = state), do: noreply(state)

  def handle_info({:ringbus_link_peer, _other}, state),
    do: {:stop, {:shutdown, :peer_changed}, state}

  def handle_info({:ringbus_link_down, reason}, state), do: {:stop, {:shutdown, reason}, state}

  ## From local callers, subscriptions and the directory

  def handle_info({:ringbus_call, ref, _name, _op, _flag}, %{peer: nil} = state) do
    send(ref, {ref, {:error, :node_down}})
    noreply(state)
  end

  def handle_info({:ringbus_call, ref, name, {:subscribe, opts, subscriber}, flag}, state) do
    state = %{state | subscribing: Map.put(state.subscribing, ref, {subscriber, flag})}
    noreply(request(state, ref, name, {:subscribe, opts}, flag))
  end

  def handle_info({:ringbus_call, ref, name, op, flag}, state),
    do: noreply(request(state, ref, name, op, flag))

  def handle_info({:ringbus_link_ack, sub, count}, state),
    do: noreply(%{state | acks: Map.update(state.acks, sub, count, &(&1 + count))})

  # Its caller gave up first (`node_busy`): dropped, not carried out.
  def handle_info({:ringbus_unsubscribe, ref, sub, flag}, state) do
    if Links.claim(flag), do: noreply(unsubscribe(state, ref, sub)), else: noreply(state)
  end

  # A batch of a subscription homed here, for its subscriber at the peer:
  # within the subscription's credit, so it always goes in.
  def handle_info({:ringbus, sub, messages, lost}, state) do
    item = {:deliver, sub, messages, lost}
    outbox = Outbox.force_push(state.outbox, item, Op.messages_bytes(messages) + @item_bytes)

    state = %{state | outbox: outbox}
    noreply(if Outbox.full?(outbox), do: full(state), else: state)
  end

  def handle_info({:ringbus_closed, sub, reason}, state) do
    state = %{state | owed: Map.delete(state.owed, sub)}
    noreply(force(state, {:closed, sub, reason}))
  end

  # The directory's answer to a create or delete the peer asked for.
  def handle_info({:ringbus_reply, ref, answer}, state), do: noreply(answer(state, ref, answer))

  # A directory message: rare, and a sync can be large, so it is measured.
  def handle_info({:ringbus_cast, item}, state) do
    case Outbox.push(state.outbox, item, :erlang.external_size(item)) do
      {:ok, outbox} -> noreply(%{state | outbox: outbox})
      :full -> noreply(full(%{state | resync?: true}))
    end
  end

  def handle_info({:DOWN, monitor, :process, _, _}, state)
      when is_map_key(state.watched, monitor) do
    {sub, watched} = Map.pop(state.watched, monitor)
    state = %{state | watched: watched, routes: Map.delete(state.routes, sub)}
    noreply(force(state, {:unsubscribe, sub}))
  end

  ## Timers

  def handle_info(:timeout, state), do: flush(state)

  def handle_info(:retry, state), do: send_batch(state)

  def handle_info(:check, state) do
    state = update_stale(%{state | checking?: false}, now())
    noreply(arm_check(state))
  end

  # Answers and monitors of subscriptions this link stopped, and the like.
  def handle_info(_other, state), do: noreply(state)

  @impl true
  def terminate(reason, state) do
    Links.set_state(state.counters, :down)
    Links.set_queued(state.counters, 0)
    why = if reason == :shutdown, do: :shutdown, else: :node_down

    for {sub, {subscriber, _monitor}} <- state.routes,
        do: send(subscriber, {:ringbus_closed, sub, why})

    Directory.link_down(state.node)
  end

  ## Receiving

  defp unsubscribe(state, ref, sub) do
    case Map.pop(state.routes, sub) do
      {nil, _} ->
        send(ref, {ref, {:error, :no_subscription}})
        state

      {{_subscriber, monitor}, routes} ->
        Process.demonitor(monitor, [:flush])
        send(ref, {ref, :ok})
        state = %{state | routes: routes, watched: Map.delete(state.watched, monitor)}
        force(state, {:unsubscribe, sub})
    end
  end

  defp connect(state, peer) do
    Links.set_peer(state.counters, peer)
    Directory.link_up(state.node)
    set_state(%{state | peer: peer})
  end

  defp receive_batch(state, seq, ack_through, items) do
    state = acked(state, ack_through)
    state = if seq > 0, do: %{state | ack_due: seq}, else: state
    noreply(Enum.reduce(items, state, &receive_item/2))
  end

  defp receive_item({:call, ref, name, op}, state) do
    case Home.run(name, op, self(), state.outbox.max_bytes - @item_bytes) do
      {:reply, answer} ->
        answer(state, ref, answer)

      {:directory, request} ->
        Directory.remote(self(), ref, request)
        state

      # Answered as the directory's answers are, when it is ready: a
      # subscriptions survey, a replicated channel's write.
      {:async, fun} ->
        link = self()
        spawn(fn -> send(link, {:ringbus_reply, ref, fun.()}) end)
        state
    end
  end

  defp receive_item({:reply, ref, answer}, state) do
    case Map.pop(state.subscribing, ref) do
      {nil, _} ->
        send(ref, {ref, answer})
        state

      {{subscriber, flag}, subscribing} ->
        subscribed(%{state | subscribing: subscribing}, ref, answer, subscriber, flag)
    end
  end

  defp receive_item({:ack, sub, count}, %{full?: true} = state),
    do: %{state | owed: Map.update(state.owed, sub, count, &(&1 + count))}

  defp receive_item({:ack, sub, count}, state) do
    Home.ack(sub, count)
    state
  end

  defp receive_item({:unsubscribe, sub}, state) do
    Home.unsubscribe(sub)
    state
  end

  defp receive_item({:deliver, sub, messages, lost}, state) do
    case state.routes do
      %{^sub => {subscriber, _}} -> send(subscriber, {:ringbus, sub, messages, lost})
      # Unsubscribed here: its batches still on their way are dropped.
      _ -> :ok
    end

    state
  end

  defp receive_item({:closed, sub, reason}, state) do
    case Map.pop(state.routes, sub) do
      {nil, _} ->
        state

      {{subscriber, monitor}, routes} ->
        Process.demonitor(monitor, [:flush])
        send(subscriber, {:ringbus_closed, sub, reason})
        %{state | routes: routes, watched: Map.delete(state.watched, monitor)}
    end
  end

  defp receive_item({:dir, message}, state) do
    Directory.peer(state.node, message)
    state
  end

  # A subscription the peer started for a subscriber here: route its
  # batches from now on, unless the caller has given up waiting, in which
  # case nobody knows its handle and it is ended at once.
  defp subscribed(state, ref, {:ok, sub} = answer, subscriber, flag) do
    if Links.deliver?(flag) do
      monitor = Process.monitor(subscriber)
      send(ref, {ref, answer})

      %{
        state
        | routes: Map.put(state.routes, sub, {subscriber, monitor}),
          watched: Map.put(state.watched, monitor, sub)
      }
    else
      force(state, {:unsubscribe, sub})
    end
  end

  defp subscribed(state, ref, answer, _subscriber, _flag) do
    send(ref, {ref, answer})
    state
  end

  ## Queueing

  # Larger than the link ever holds: refused, whatever it holds now.
  defp request(state, ref, name, op, flag) do
    bytes = Op.request_bytes(op) + @item_bytes

    if bytes > state.outbox.max_bytes do
      send(ref, {ref, {:error, :too_large}})
      %{state | subscribing: Map.delete(state.subscribing, ref)}
    else
      queue_request(state, ref, name, op, flag, bytes)
    end
  end

  defp queue_request(state, ref, name, op, flag, bytes) do
    case Outbox.push(state.outbox, {:call, ref, name, op, flag}, bytes) do
      {:ok, outbox} ->
        %{state | outbox: outbox}

      :full ->
        Links.count(state.counters, :drops, 1)
        send(ref, {ref, {:error, :node_busy}})
        full(%{state | subscribing: Map.delete(state.subscribing, ref)})
    end
  end

  defp answer(state, ref, answer) do
    case Outbox.push(state.outbox, {:reply, ref, answer}, Op.answer_bytes(answer) + @item_bytes) do
      {:ok, outbox} ->
        %{state | outbox: outbox}

      # The caller at the peer gets `timeout` when it stops waiting.
      :full ->
        Links.count(state.counters, :drops, 1)
        full(state)
    end
  end

  defp force(state, item),
    do: %{state | outbox: Outbox.force_push(state.outbox, item, @item_bytes)}

  defp full(%{full?: true} = state), do: state
  defp full(state), do: set_state(%{state | full?: true})

  ## Sending

  # Every callback returns through here. Flushes now if the outbox holds a
  # batch's worth, else when the mailbox is empty (gen_server's timeout 0),
  # if anything waits to be sent. A return without the timeout would cancel
  # a flush an earlier message asked for, so no callback returns otherwise.
  # While a retry is pending, the retry timer flushes.
  defp noreply(%{suspended: nil, peer: peer} = state) when peer != nil do
    cond do
      Outbox.bytes(state.outbox) >= state.batch_bytes -> flush(state)
      pending?(state) -> {:noreply, publish(state), 0}
      true -> {:noreply, publish(state)}
    end
  end

  defp noreply(state), do: {:noreply, publish(state)}

  defp pending?(state),
    do:
      not Outbox.empty?(state.outbox) or map_size(state.acks) > 0 or
        state.ack_due != state.ack_sent

  defp flush(%{suspended: nil} = state), do: send_batch(state)
  defp flush(state), do: {:noreply, publish(state)}

  defp send_batch(%{peer: nil} = state), do: {:noreply, publish(state)}

  defp send_batch(state) do
    if pending?(state),
      do: send_next(state),
      else: {:noreply, publish(%{state | suspended: nil})}
  end

  defp send_next(state) do
    now = now()
    {items, _bytes, rest} = Outbox.take(state.outbox, state.batch_bytes)
    {items, claimed, expired} = wire_items(items, [], [], 0)
    items = ack_items(state.acks, items)
    seq = if items == [], do: 0, else: state.seq + 1

    case :erlang.send(state.peer, {:ringbus_batch, self(), seq, state.ack_due, items}, [
           :noconnect,
           :nosuspend
         ]) do
      :ok ->
        if seq > 0, do: Links.count(state.counters, :batches, 1)
        if expired > 0, do: Links.count(state.counters, :drops, expired)
        unacked = if seq > 0, do: :queue.in({seq, now}, state.unacked), else: state.unacked

        state =
          %{
            state
            | outbox: rest,
              acks: %{},
              ack_sent: state.ack_due,
              seq: max(seq, state.seq),
              unacked: unacked,
              suspended: nil
          }
          |> arm_check()
          |> drained()

        if Outbox.empty?(rest), do: {:noreply, publish(state)}, else: send_next(state)

      # Not sent: its requests are queued again, and their callers may still
      # give up on them with the certainty that they were not carried out.
      :nosuspend ->
        Enum.each(claimed, &Links.unclaim/1)
        {:noreply, publish(retry_later(state))}

      :noconnect ->
        Enum.each(claimed, &Links.unclaim/1)
        {:stop, {:shutdown, :noconnect}, state}
    end
  end

  # The items of a batch as the peer gets them, and the flags of its
  # requests; requests whose caller has stopped waiting are dropped (and
  # counted).
  defp wire_items([{:call, ref, name, op, flag} | rest], acc, claimed, expired) do
    if Links.claim(flag),
      do: wire_items(rest, [{:call, ref, name, op} | acc], [flag | claimed], expired),
      else: wire_items(rest, acc, claimed, expired + 1)
  end

  defp wire_items([item | rest], acc, claimed, expired),
    do: wire_items(rest, [item | acc], claimed, expired)

  defp wire_items([], acc, claimed, expired), do: {:lists.reverse(acc), claimed, expired}

  defp ack_items(acks, items) when map_size(acks) == 0, do: items

  defp ack_items(acks, items),
    do: Enum.reduce(acks, items, fn {sub, n}, acc -> [{:ack, sub, n} | acc] end)

  # The suspension is counted once, however many tries it takes.
  defp retry_later(state) do
    ms =
      case state.suspended do
        nil ->
          Links.count(state.counters, :suspensions, 1)
          1

        ms ->
          min(ms * 2, @retry_max)
      end

    Process.send_after(self(), :retry, ms)
    %{state | suspended: ms}
  end

  ## Busy or not

  defp acked(state, through) do
    unacked = drop_acked(state.unacked, through)
    update_stale(%{state | unacked: unacked}, now())
  end

  defp drop_acked(queue, through) do
    case :queue.peek(queue) do
      {:value, {seq, _}} when seq <= through -> drop_acked(:queue.drop(queue), through)
      _ -> queue
    end
  end

  defp update_stale(state, now) do
    stale? =
      case :queue.peek(state.unacked) do
        {:value, {_, sent_at}} -> now - sent_at >= state.busy_timeout
        :empty -> false
      end

    if stale? == state.stale?, do: state, else: set_state(%{state | stale?: stale?})
  end

  # One timer at a time, due when the oldest unacknowledged batch turns
  # `busy_timeout` old.
  defp arm_check(%{checking?: false} = state) do
    case :queue.peek(state.unacked) do
      {:value, {_, sent_at}} ->
        Process.send_after(self(), :check, max(sent_at + state.busy_timeout - now(), 1))
        %{state | checking?: true}

      :empty ->
        state
    end
  end

  defp arm_check(state), do: state

  # Half empty again after being full.
  defp drained(%{full?: true} = state) do
    if Outbox.bytes(state.outbox) * 2 <= state.outbox.max_bytes,
      do: set_state(%{state | full?: false}),
      else: state
  end

  defp drained(state), do: state

  defp set_state(%{peer: nil} = state) do
    Links.set_state(state.counters, :down)
    state
  end

  defp set_state(state) do
    if state.full? or state.stale? do
      Links.set_state(state.counters, :busy)
      state
    else
      Links.set_state(state.counters, :up)
      recovered(state)
    end
  end

  # Up again: pass on the credit held back meanwhile, and let the directory
  # resend what did not fit.
  defp recovered(state) do
    for {sub, n} <- state.owed, do: Home.ack(sub, n)
    if state.resync?, do: Directory.link_up(state.node)
    %{state | owed: %{}, resync?: false}
  end

  defp publish(state) do
    Links.set_queued(state.counters, Outbox.bytes(state.outbox))
    state
  end

  defp now, do: System.monotonic_time(:millisecond)
end
