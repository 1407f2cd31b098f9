defmodule Ringbus.Group.Push do
  @moduledoc false
  # A push subscription to a consumer group (`Ringbus.Groups.subscribe/4`):
  # one process, where the channel lives, that fetches the group's messages
  # for one consumer and sends them to its subscriber as a subscription
  # does, `{:ringbus, sub, [{seq, payload}], 0}` (with `opts[:deliveries]`
  # `{seq, payload, deliveries}`, with `opts[:times]` and the time too),
  # within a credit.
  #
  # It starts as `{:subscribe, opts, subscriber}` with `opts[:group]`, so a
  # subscriber on another node gets it through the link as any
  # subscription: the link is its subscriber here and forwards its batches;
  # an unsubscribe or the subscriber's exit there ends it here. Every read
  # and change of the group is a group request run by `run`, the function
  # `Ringbus.Op` hands it, so it works over whatever runs them.
  #
  # Owner. Its fetches name the real subscriber (`opts[:owner]`) as the
  # consumer's owner: when that process exits, the consumer's pending
  # messages are due at once (`Ringbus.Group.TableOwner`). Its own end
  # (unsubscribe) leaves them pending, for the subscriber to ack.
  #
  # Credit. `held` is the seqs it delivered and still counts, at most
  # `max_credit`: an ack (`Ringbus.Group.Reads.ack/3`) tells it the seqs
  # acked, and they leave `held`. A message that comes due again (ack_wait,
  # a nack, a claim) is no longer this subscriber's to ack: when it has no
  # credit left, it asks which of `held` are still its own and not yet due
  # (`{:held, ...}`), and sleeps until the earliest of those comes due.
  #
  # Waiting. With credit and nothing to fetch, it registers in the
  # channel's waiters as a fetch that waits does (a push, a nack or an
  # owner's exit wakes it), and sets a timer for the earliest due time it
  # knows of, or `ack_wait` on. No selective receive; every message is
  # taken in arrival order, and its queue is off the heap.
  #
  # Dead letters are pushed by `bury`, the API's function it is handed, as
  # a fetch's caller pushes them.

  use GenServer

  alias Ringbus.Channel.{Ring, Subscription, Times}
  alias Ringbus.Group.{At, Fetch, Table}

  @doc """
  Starts a push subscription of `subscriber` to `channel`'s group and
  consumer in `opts[:group]`, whose requests `run` runs; returns once it runs.
  """
  @spec start(Ringbus.Channel.t(), pid(), keyword(), (term() -> term())) ::
          {:ok, {pid(), reference()}} | {:error, term()}
  def start(channel, subscriber, opts, run) do
    {group, _consumer} = opts[:group]

    with {:ok, g} <- run.({:info, group}) do
      args = {channel, subscriber, opts, run, g.config.ack_wait}
      Subscription.start_process(__MODULE__, args)
    end
  end

  @doc false
  def enter_loop(args) do
    {:ok, state, continue} = init(args)
    :gen_server.enter_loop(__MODULE__, [], state, continue)
  end

  ## Its requests (`Ringbus.Group.run/3`)

  @doc """
  Makes `pid` the consumer's push subscription, and `owner` its owner:
  `:ok` or `{:error, :no_group}`.
  """
  def attach(%{table: t, c: c} = at, group, consumer, owner, pid, ref) do
    with {:ok, _} <- At.fetch(at, group) do
      Fetch.own(at, group, consumer, owner)
      Table.attach(t, c, group, consumer, pid, ref)
      :ok
    end
  end

  @doc """
  A fetch (`Ringbus.Group.Fetch.fetch/6`, without waiting) while `owner`
  still owns the consumer; `{:error, :owner_gone}` once it exited (or
  another process fetched for the consumer), so that nothing is delivered
  for it after.
  """
  def fetch(%{table: t, c: c} = at, group, consumer, owner, max) do
    with {:ok, _} <- At.fetch(at, group) do
      if Table.owner(t, c, group, consumer) == owner,
        do: Fetch.fetch(at, group, consumer, owner, max, 0),
        else: {:error, :owner_gone}
    end
  end

  @doc "The consumer's push subscription is `pid` no more: `{:ok, detached?}`."
  def detach(%{table: t, c: c}, group, consumer, pid),
    do: {:ok, Table.detach(t, c, group, consumer, pid)}

  @doc """
  Of `held` (`{seq, deliveries}`), those still `consumer`'s, at that
  delivery and not due: `{:ok, [{seq, deliveries, due_ms}]}`.
  """
  def held(%{table: t, c: c, now: now}, group, consumer, held) do
    still =
      for {seq, n} <- held,
          {^seq, ^consumer, _at, ^n, due} <- [Table.row(t, c, group, seq)],
          due > now,
          do: {seq, n, due}

    {:ok, still}
  end

  @doc "The earliest due time of the group's pending messages (system ms), or nil."
  def next_due(%{table: t, c: c} = at, group) do
    with {:ok, _} <- At.fetch(at, group), do: {:ok, Table.next_due(t, c, group)}
  end

  ## Process

  @impl true
  def init({channel, subscriber, opts, run, ack_wait}) do
    {group, consumer} = opts[:group]
    ref = make_ref()
    monitor = Process.monitor(subscriber)
    Process.monitor(channel.anchor)
    owner = opts[:owner] || subscriber
    # A subscriber on another node (the link is `subscriber` here): its end
    # stops the deliveries at once, not when the link's unsubscribe comes.
    owner_monitor = if owner != subscriber, do: Process.monitor(owner), else: monitor
    attached = run.({:attach, group, consumer, owner, self(), ref})

    state = %{
      channel: channel,
      run: run,
      bury: opts[:bury],
      name: opts[:channel],
      group: group,
      consumer: consumer,
      owner: owner,
      handle: {self(), ref},
      subscriber: subscriber,
      monitor: monitor,
      owner_monitor: owner_monitor,
      max_credit: opts[:max_credit],
      max_batch: opts[:max_batch],
      form: form(opts),
      ack_wait: ack_wait,
      held: %{},
      waiting?: false,
      timer: nil
    }

    case attached do
      :ok -> {:ok, state, {:continue, :deliver}}
      {:error, reason} -> {:ok, state, {:continue, {:refused, reason}}}
    end
  end

  @impl true
  def handle_call(request, _from, state), do: Subscription.control(request, state)

  @impl true
  def handle_continue(:deliver, state), do: deliver(state)
  # The group went between the start's look and the attach: the start answers the error.
  def handle_continue({:refused, reason}, state), do: {:stop, {:shutdown, reason}, state}

  @impl true
  # The waker removed it from the waiters already.
  def handle_info(:ringbus_wake, state), do: deliver(%{state | waiting?: false})

  def handle_info({:ringbus_due, tag}, %{timer: {tag, _timer}} = state),
    do: deliver(%{state | timer: nil})

  def handle_info({:ringbus_group_acked, ref, seqs}, %{handle: {_, ref}} = state) do
    held = Map.drop(state.held, seqs)

    if map_size(held) < map_size(state.held),
      do: deliver(%{state | held: held}),
      else: noreply(state)
  end

  def handle_info({:DOWN, ref, :process, _, _}, %{monitor: ref} = state),
    do: {:stop, :normal, state}

  def handle_info({:DOWN, ref, :process, _, _}, %{owner_monitor: ref} = state),
    do: {:stop, :normal, state}

  def handle_info({:DOWN, _, :process, anchor, reason}, %{channel: %{anchor: anchor}} = state),
    do: Subscription.control({:anchor_down, reason}, state)

  # Credit by count (`Ringbus.ack/2`) is not this subscription's: acks by seq are.
  def handle_info(_other, state), do: noreply(state)

  @impl true
  def terminate(_reason, state) do
    unwait(state)
    state.run.({:detach, state.group, state.consumer, self()})
  rescue
    # The channel is gone, and its groups with it.
    ArgumentError -> :ok
  end

  defp noreply(state), do: {:noreply, state}

  defp close(state, reason) do
    send(state.subscriber, {:ringbus_closed, state.handle, reason})
    {:stop, :normal, state}
  end

  ## Delivering

  defp deliver(state) do
    state = unwait(state)
    credit = state.max_credit - map_size(state.held)
    if credit > 0, do: fetch(state, min(credit, state.max_batch)), else: recount(state)
  end

  # Registered as a waiter (`waiting?`) before its last fetch, so that a
  # push between an empty fetch and the wait is not missed.
  defp fetch(state, max) do
    %{group: group, consumer: consumer} = state

    case request(state, {:push_fetch, group, consumer, state.owner, max}) do
      {:ok, {[], _dead_letter, []}} when state.waiting? ->
        sleep(state)

      {:ok, {[], _dead_letter, []}} ->
        Ring.arm_wake(state.channel)
        fetch(%{state | waiting?: true}, max)

      {:ok, {entries, dead_letter, dead}} ->
        if dead != [], do: state.bury.(state.name, group, dead_letter, dead)
        send_batch(Subscription.unwait(state), entries)

      {:error, reason} ->
        close(state, reason)
    end
  end

  defp send_batch(state, []), do: deliver(state)

  defp send_batch(state, entries) do
    send(state.subscriber, {:ringbus, state.handle, messages(entries, state), 0})
    held = Enum.reduce(entries, state.held, fn {seq, _, n}, held -> Map.put(held, seq, n) end)
    deliver(%{state | held: held})
  end

  defp form(opts) do
    cond do
      opts[:times] -> :timed
      opts[:deliveries] -> :counted
      true -> :plain
    end
  end

  defp messages(entries, %{form: :plain}),
    do: for({seq, payload, _n} <- entries, do: {seq, payload})

  defp messages(entries, %{form: :counted}), do: entries

  # Read from this member's ring, one probe a message, as a timed fetch's.
  defp messages(entries, %{form: :timed, channel: channel}),
    do: for({seq, payload, n} <- entries, do: {seq, payload, n, Times.at_seq(channel, seq)})

  # Waits for a wake, or until the earliest due time it knows of (a message
  # delivered meanwhile comes due `ack_wait` on at the soonest).
  defp sleep(state) do
    now = At.now()

    case request(state, {:next_due, state.group}) do
      {:ok, due} ->
        at = min(due || now + state.ack_wait, now + state.ack_wait)
        noreply(timer(state, at - now))

      {:error, reason} ->
        close(state, reason)
    end
  end

  # No credit: which of `held` are still its own and not due, and a timer
  # for the earliest of them to come due.
  defp recount(state) do
    held = Enum.to_list(state.held)

    case request(state, {:held, state.group, state.consumer, held}) do
      {:ok, still} ->
        {kept, due} =
          Enum.reduce(still, {%{}, nil}, fn {seq, n, due}, {kept, soonest} ->
            {Map.put(kept, seq, n), min(soonest || due, due)}
          end)

        if map_size(kept) < map_size(state.held),
          do: deliver(%{state | held: kept}),
          else: noreply(timer(state, due - At.now()))

      {:error, reason} ->
        close(state, reason)
    end
  end

  defp request(state, request) do
    state.run.(request)
  rescue
    # The channel's tables are gone: the delete notice is on its way.
    ArgumentError -> {:error, :no_channel}
  end

  # One timer at a time: a wake cancels it, so a stream of wakes leaves none behind.
  defp timer(state, ms) do
    tag = make_ref()
    %{state | timer: {tag, Process.send_after(self(), {:ringbus_due, tag}, max(ms, 1))}}
  end

  defp unwait(%{timer: {_tag, timer}} = state) do
    Process.cancel_timer(timer, async: true, info: false)
    Subscription.unwait(%{state | timer: nil})
  end

  defp unwait(state), do: Subscription.unwait(state)
end
