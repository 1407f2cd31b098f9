defmodule Ringbus.Channel.Subscription do
  @moduledoc false
  # One process per subscription. It keeps a cursor into the channel and a
  # credit of messages it may still send, reads the ring in batches and sends
  # `{:ringbus, sub, [{seq, payload}], lost}` to the subscriber.
  #
  # Flow control: the subscriber holds at most `max_in_flight` undelivered
  # messages in its mailbox; each `Ringbus.ack/2` returns credit. Nothing is
  # buffered here: a subscriber that falls behind the ring learns through
  # `lost` how many messages it missed.
  #
  # When it has caught up, it registers as waiting, arms the channel's wake
  # flag and reads once more; the next push wakes it. It does no selective
  # receive: every message it gets is handled in arrival order.
  #
  # Backlog safety. A subscription can get a burst of acks or wakes (a
  # subscriber acking message by message, many pushes at once), so it must
  # stay linear in its backlog:
  #   - it takes every message in arrival order and never receives
  #     selectively; the calls it makes (ETS, `:atomics`, `send/2`)
  #     do not wait for a reply;
  #   - it counts no list: a read returns its own count, credit is an integer;
  #   - its message queue is off the heap (`message_queue_data: :off_heap`).
  #     On the heap, the messages waiting take part in every garbage collection
  #     of the process, so each collection costs the backlog's length; with
  #     160k queued acks that took 2.4 s instead of 0.21 s
  #     (`mix ringbus.bench backlog`, subscription rows).
  #   - starting one does not queue behind other starts: the subscriber
  #     starts it (waiting in its own mailbox) and it links itself to
  #     `Ringbus.Channel.SubscriptionOwner`. Started under a DynamicSupervisor
  #     a burst of N subscribes cost O(N²) there (10k 0.15 s, 40k 3.6 s; the
  #     subscribe rows of `mix ringbus.bench backlog`).
  #
  # Each subscription is registered with `Ringbus.Channel.SubscriptionOwner`
  # under its own reference (for ack and unsubscribe), with its channel's name
  # (to close them all when the channel is deleted). Waiting ones are in the
  # channel's waiters table. Neither keeps many entries under one key:
  # removing one of k entries under a shared ETS key costs O(k), so a channel
  # with many subscribers would pay O(k²) to wake or drop them all.

  use GenServer, restart: :temporary

  alias Ringbus.Channel
  alias Ringbus.Channel.{Ring, SubscriptionOwner}

  @type options :: [
          from: non_neg_integer() | :earliest | :latest,
          max_in_flight: pos_integer(),
          credit: pos_integer(),
          max_batch: pos_integer()
        ]

  @doc "Validates subscription options, raising `ArgumentError` on bad ones."
  @spec validate_options!(keyword()) :: options()
  def validate_options!(opts) do
    opts = Keyword.validate!(opts, [:credit, from: :latest, max_in_flight: 1000, max_batch: 256])

    case opts[:from] do
      f when f in [:earliest, :latest] ->
        :ok

      f when is_integer(f) and f >= 0 ->
        :ok

      other ->
        raise ArgumentError,
              "expected :from to be a non-negative integer, :earliest or :latest, got: #{inspect(other)}"
    end

    opts = Keyword.put_new(opts, :credit, opts[:max_in_flight])

    for key <- [:max_in_flight, :credit, :max_batch] do
      case opts[key] do
        n when is_integer(n) and n > 0 ->
          :ok

        other ->
          raise ArgumentError,
                "expected #{inspect(key)} to be a positive integer, got: #{inspect(other)}"
      end
    end

    opts
  end

  @spec start(Channel.t(), pid(), options()) :: {:ok, reference()} | {:error, term()}
  def start(%Channel{} = channel, subscriber, opts) do
    sub = make_ref()
    args = {channel, subscriber, sub, opts}

    case GenServer.start(__MODULE__, args, spawn_opt: [message_queue_data: :off_heap]) do
      {:ok, _pid} -> {:ok, sub}
      {:error, _} = error -> error
    end
  end

  @doc "Returns `count` messages of credit to the subscription."
  @spec ack(reference(), pos_integer()) :: :ok | {:error, :no_subscription}
  def ack(sub, count) do
    case SubscriptionOwner.whereis(sub) do
      nil -> {:error, :no_subscription}
      pid -> send(pid, {:ringbus_ack, count}) && :ok
    end
  end

  @spec stop(reference()) :: :ok | {:error, :no_subscription}
  def stop(sub) do
    with pid when is_pid(pid) <- SubscriptionOwner.whereis(sub),
         :ok <- GenServer.stop(pid, :normal) do
      :ok
    else
      _ -> {:error, :no_subscription}
    end
  catch
    :exit, _ -> {:error, :no_subscription}
  end

  @doc "Tells every subscription of `name` to close with `reason`."
  @spec close_all(Channel.name(), term()) :: :ok
  def close_all(name, reason) do
    # A scan of every subscription: deleting a channel is rare.
    for pid <- SubscriptionOwner.subscriptions(name), do: send(pid, {:ringbus_close, reason})

    :ok
  end

  ## Process

  @impl true
  def init({channel, subscriber, sub, opts}) do
    SubscriptionOwner.adopt(sub, channel.name)
    monitor = Process.monitor(subscriber)

    cursor =
      case opts[:from] do
        :earliest -> Ring.first_seq(channel)
        :latest -> Ring.next_seq(channel)
        seq -> seq
      end

    state = %{
      channel: channel,
      sub: sub,
      subscriber: subscriber,
      monitor: monitor,
      cursor: cursor,
      credit: min(opts[:credit], opts[:max_in_flight]),
      max_in_flight: opts[:max_in_flight],
      max_batch: opts[:max_batch],
      waiting?: false,
      stalled: nil
    }

    {:ok, state, {:continue, :deliver}}
  end

  @impl true
  def handle_continue(:deliver, state), do: {:noreply, deliver(state)}

  @impl true
  # The waker removed us from the waiters already.
  def handle_info(:ringbus_wake, state), do: {:noreply, deliver(%{state | waiting?: false})}

  def handle_info({:ringbus_ack, count}, state) when is_integer(count) and count > 0 do
    credit = min(state.credit + count, state.max_in_flight)
    {:noreply, deliver(%{state | credit: credit})}
  end

  def handle_info({:ringbus_stalled, seq}, %{cursor: seq} = state) do
    Ring.skip(state.channel, seq)
    {:noreply, deliver(unwait(state))}
  end

  def handle_info({:ringbus_close, reason}, state) do
    send(state.subscriber, {:ringbus_closed, state.sub, reason})
    {:stop, :normal, state}
  end

  def handle_info({:DOWN, ref, :process, _, _}, %{monitor: ref} = state) do
    {:stop, :normal, state}
  end

  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: unwait(state)

  defp deliver(%{credit: credit} = state) when credit <= 0, do: state

  defp deliver(state) do
    case read(state) do
      {[], 0, 0, next} ->
        wait(%{state | cursor: next})

      {items, n, lost, next} ->
        send(state.subscriber, {:ringbus, state.sub, items, lost})
        deliver(%{state | cursor: next, credit: state.credit - n})
    end
  end

  # Stuck on a seq its producer reserved but has not stored: give it as long
  # as a puller would, then skip it (the producer, if alive, pushes again).
  defp wait(%{cursor: cursor} = state) do
    if cursor < Ring.next_seq(state.channel) and state.stalled != cursor do
      Process.send_after(self(), {:ringbus_stalled, cursor}, Ring.stall_timeout())
      arm(%{state | stalled: cursor})
    else
      arm(state)
    end
  end

  # Caught up: arm the wake flag, then look once more before waiting.
  defp arm(state) do
    Ring.arm_wake(state.channel)

    case read(state) do
      {[], 0, 0, next} ->
        %{state | cursor: next, waiting?: true}

      _ ->
        deliver(unwait(%{state | waiting?: true}))
    end
  rescue
    # The channel is gone: the delete notice is on its way.
    ArgumentError -> state
  end

  defp unwait(%{waiting?: false} = state), do: state

  defp unwait(state) do
    Ring.disarm(state.channel)
    %{state | waiting?: false}
  rescue
    # The channel is gone: the delete notice is on its way.
    ArgumentError -> %{state | waiting?: false}
  end

  defp read(state) do
    Ring.read(state.channel, state.cursor, min(state.credit, state.max_batch))
  rescue
    # The channel's table is gone: the delete notice is on its way.
    ArgumentError -> {[], 0, 0, state.cursor}
  end
end
