defmodule Ringbus.Channel.Subscription do
  @moduledoc false
  # One process per subscription. It keeps a cursor into the channel and a
  # credit of messages it may still send, reads the ring in batches and sends
  # `{:ringbus, sub, [{seq, payload}], lost}` to the subscriber.
  #
  # Flow control: the subscriber holds at most `max_credit` undelivered
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
  #     of the process, so each collection costs the backlog's length (the
  #     on-heap rows of `mix ringbus.bench backlog`).
  #   - starting one does not queue behind other starts, and registers it
  #     nowhere shared: the subscriber starts it (waiting in its own mailbox),
  #     and it monitors its subscriber and its channel's
  #     `Ringbus.Channel.Anchor`. Under a DynamicSupervisor a burst of N
  #     subscribes costs O(N²) (the `subscribe_crowd` rows of the same bench).
  #
  # Delivery time. Each batch it sends adds its messages' time since their
  # push to the node's histogram for its `:via` (`Ringbus.Channel.Delivery`).
  # With `times: true` the same read's runs give each message its time
  # (`Ringbus.Channel.Times`), so the subscriber gets `{seq, payload, ms}`.
  #
  # Its handle, `{pid, ref}`, is all ack and unsubscribe need: no lookup.
  # It ends when its subscriber exits, when it is unsubscribed, and when its
  # channel's anchor stops (the channel is deleted, or Ringbus stops), which
  # it tells the subscriber with `{:ringbus_closed, handle, reason}`.
  #
  # Surveys. `survey/3` finds a channel's subscriptions through the monitors
  # they hold on its anchor, which the VM keeps, and asks each for its
  # figures with one request apiece and one deadline for all: a subscription
  # still registers nowhere, and a busy one only goes unanswered. Each keeps
  # its own running `lost` for this, in its state.
  #
  # Waiting ones are in the channel's waiters table, one key each: removing
  # one of k entries under a shared ETS key costs O(k), so a channel with many
  # subscribers would pay O(k²) to wake them all.

  use GenServer

  alias Ringbus.{Channel, Options}
  alias Ringbus.Channel.{Delivery, Ring, Times}
  require Times

  @typedoc "A subscription: its process and its reference."
  @type t :: {pid(), reference()}

  @typedoc "A subscription's figures, from `survey/3`; nil where it did not answer."
  @type figures :: %{
          subscription: pid(),
          subscriber: pid() | nil,
          name: String.t() | nil,
          cursor: non_neg_integer() | nil,
          lag: non_neg_integer() | nil,
          credit: non_neg_integer() | nil,
          lost: non_neg_integer() | nil
        }

  @type options :: [
          from: non_neg_integer() | :earliest | :latest | {:time, non_neg_integer()},
          max_credit: pos_integer(),
          credit: pos_integer(),
          max_batch: pos_integer(),
          name: String.t() | nil,
          incarnation: pos_integer() | nil,
          via: :embedded | :binary | :resp,
          times: boolean()
        ]

  @doc "Validates subscription options, raising `ArgumentError` on bad ones."
  @spec validate_options!(keyword()) :: options()
  def validate_options!(opts) do
    opts =
      Options.validate!(
        opts,
        [
          :credit,
          from: :latest,
          max_credit: 1000,
          max_batch: 256,
          name: nil,
          incarnation: nil,
          via: :embedded,
          times: false
        ],
        "subscription"
      )

    Options.check!(
      :from,
      opts[:from],
      &(&1 in [:earliest, :latest] or (is_integer(&1) and &1 >= 0) or Times.is_time(&1)),
      "a non-negative integer, :earliest, :latest or {:time, ms}"
    )

    Options.check!(:times, opts[:times], &is_boolean/1, "a boolean")

    Options.check!(
      :name,
      opts[:name],
      &(&1 == nil or (is_binary(&1) and String.valid?(&1) and byte_size(&1) in 1..128)),
      "nil or a UTF-8 string of 1 to 128 bytes"
    )

    Options.check!(
      :incarnation,
      opts[:incarnation],
      &(&1 == nil or Options.positive?(&1)),
      "nil or a positive integer"
    )

    Options.check!(
      :via,
      opts[:via],
      &(&1 in Delivery.protocols()),
      ":embedded, :binary or :resp"
    )

    opts = Keyword.put_new(opts, :credit, opts[:max_credit])

    for key <- [:max_credit, :credit, :max_batch] do
      Options.check!(key, opts[key], &Options.positive?/1, "a positive integer")
    end

    opts
  end

  @doc """
  Starts a subscription of `subscriber` to `channel` from the caller, and
  returns once it runs.
  """
  @spec start(Channel.t(), pid(), options()) :: {:ok, t()} | {:error, term()}
  def start(%Channel{} = channel, subscriber, opts) do
    with :ok <- Ring.check_incarnation(channel, opts[:incarnation]),
         do: spawn_subscription(channel, subscriber, opts)
  end

  defp spawn_subscription(channel, subscriber, opts),
    do: start_process(__MODULE__, {channel, subscriber, make_ref(), opts})

  @doc """
  Spawns a subscription's process, `module.enter_loop(args)` with its queue
  off the heap, and waits until it answers `:ringbus_started`: its answer,
  or `{:error, reason}` when it ends first (`{:shutdown, reason}` too).
  """
  @spec start_process(module(), term()) :: term()
  def start_process(module, args) do
    pid = :proc_lib.spawn_opt(module, :enter_loop, [args], message_queue_data: :off_heap)

    # Not `GenServer.start/3`: proc_lib's start waits for an ack that carries
    # no reference, so the runtime finds it by scanning the caller's mailbox,
    # and a caller with a backlog pays for it on every subscribe. A call
    # waits on a fresh monitor reference, which the runtime matches without
    # scanning.
    GenServer.call(pid, :ringbus_started, :infinity)
  catch
    :exit, {{:shutdown, reason}, {GenServer, :call, _}} -> {:error, reason}
    :exit, {reason, {GenServer, :call, _}} -> {:error, reason}
  end

  @doc false
  # The subscription's process: `init/1`, then the gen_server loop.
  def enter_loop(args) do
    {:ok, state, continue} = init(args)
    :gen_server.enter_loop(__MODULE__, [], state, continue)
  end

  @doc "Returns `count` messages of credit to the subscription."
  @spec ack(t(), pos_integer()) :: :ok | {:error, :no_subscription}
  def ack({pid, ref}, count) do
    # A process that is not this subscription (its pid reused) drops the
    # message: each subscription takes only credit tagged with its own ref.
    if Process.alive?(pid) do
      send(pid, {:ringbus_ack, ref, count})
      :ok
    else
      {:error, :no_subscription}
    end
  end

  @doc "Ends the subscription and waits until it has."
  @spec stop(t()) :: :ok | {:error, :no_subscription}
  def stop({pid, ref}) do
    # No timeout: it answers after the messages queued before this call.
    GenServer.call(pid, {:ringbus_unsubscribe, ref}, :infinity)
  catch
    :exit, _ -> {:error, :no_subscription}
  end

  @doc """
  The figures of up to `limit` subscriptions of `channel`, asked all at
  once; those that do not answer within `timeout` ms have nil figures.
  """
  @spec survey(Channel.t(), timeout(), pos_integer()) :: [figures()]
  def survey(%Channel{anchor: anchor}, timeout, limit) do
    pids =
      case Process.info(anchor, :monitored_by) do
        {:monitored_by, pids} -> pids |> Stream.filter(&subscription?/1) |> Enum.take(limit)
        nil -> []
      end

    requests =
      Enum.reduce(pids, :gen_server.reqids_new(), fn pid, requests ->
        :gen_server.send_request(pid, :ringbus_survey, pid, requests)
      end)

    deadline = System.monotonic_time(:millisecond) + timeout
    answers = collect(requests, {:abs, deadline}, %{})

    for pid <- pids do
      Map.get_lazy(answers, pid, fn ->
        %{
          subscription: pid,
          subscriber: nil,
          name: nil,
          cursor: nil,
          lag: nil,
          credit: nil,
          lost: nil
        }
      end)
    end
  end

  defp subscription?(pid) when is_pid(pid),
    do: match?({__MODULE__, :enter_loop, _}, :proc_lib.initial_call(pid))

  defp subscription?(_port_or_resource), do: false

  defp collect(requests, deadline, answers) do
    case :gen_server.receive_response(requests, deadline, true) do
      {{:reply, figures}, pid, requests} ->
        collect(requests, deadline, Map.put(answers, pid, figures))

      {{:error, _ended}, _pid, requests} ->
        collect(requests, deadline, answers)

      _no_request_or_timeout ->
        answers
    end
  end

  ## Process

  @impl true
  def init({channel, subscriber, sub, opts}) do
    monitor = Process.monitor(subscriber)
    Process.monitor(channel.anchor)

    cursor =
      case opts[:from] do
        :earliest -> Ring.first_seq(channel)
        :latest -> Ring.next_seq(channel)
        {:time, t} -> Times.seek(channel, t)
        seq -> seq
      end

    state = %{
      channel: channel,
      handle: {self(), sub},
      subscriber: subscriber,
      monitor: monitor,
      cursor: cursor,
      credit: min(opts[:credit], opts[:max_credit]),
      max_credit: opts[:max_credit],
      max_batch: opts[:max_batch],
      name: opts[:name],
      delivery: Delivery.for_protocol(opts[:via]),
      times?: opts[:times],
      waiting?: false,
      stalled: nil,
      lost: 0
    }

    {:ok, state, {:continue, :deliver}}
  end

  @doc """
  What every subscription process (this one, a consumer group's push,
  `Ringbus.Group.Push`) answers alike, on its `state.handle`: the start's
  call, an unsubscribe (`stop/1`), and its channel's anchor going down,
  which it tells its subscriber.
  """
  @spec control(term(), map()) ::
          {:reply, term(), map()} | {:stop, :normal, map()} | {:stop, :normal, :ok, map()}
  def control(:ringbus_started, state), do: {:reply, {:ok, state.handle}, state}

  def control({:ringbus_unsubscribe, sub}, %{handle: {_, sub}} = state),
    do: {:stop, :normal, :ok, state}

  def control({:ringbus_unsubscribe, _other}, state),
    do: {:reply, {:error, :no_subscription}, state}

  def control({:anchor_down, reason}, state) do
    reason = if reason in [:channel_deleted, :noproc], do: :channel_deleted, else: reason
    send(state.subscriber, {:ringbus_closed, state.handle, reason})
    {:stop, :normal, state}
  end

  @impl true
  def handle_call(:ringbus_survey, _from, state) do
    figures = %{
      subscription: self(),
      subscriber: state.subscriber,
      name: state.name,
      cursor: state.cursor,
      lag: max(Ring.next_seq(state.channel) - state.cursor, 0),
      credit: state.credit,
      lost: state.lost
    }

    {:reply, figures, state}
  end

  def handle_call(request, _from, state), do: control(request, state)

  @impl true
  def handle_continue(:deliver, state), do: {:noreply, deliver(state)}

  @impl true
  # The waker removed us from the waiters already.
  def handle_info(:ringbus_wake, state), do: {:noreply, deliver(%{state | waiting?: false})}

  def handle_info({:ringbus_ack, sub, count}, %{handle: {_, sub}} = state)
      when is_integer(count) and count > 0 do
    credit = min(state.credit + count, state.max_credit)
    {:noreply, deliver(%{state | credit: credit})}
  end

  # Still stuck on the seq after a puller's wait: skip it. If it cannot be
  # skipped (a pull claimed it, or a live producer's batch covers it), the
  # next wait on it may time out again.
  def handle_info({:ringbus_stalled, seq}, %{cursor: seq} = state) do
    state = if Ring.skip(state.channel, seq), do: state, else: %{state | stalled: nil}
    {:noreply, deliver(unwait(state))}
  end

  def handle_info({:DOWN, ref, :process, _, _}, %{monitor: ref} = state) do
    {:stop, :normal, state}
  end

  # The channel's anchor: the channel is deleted (or was before this
  # subscription could monitor it), or Ringbus is stopping.
  def handle_info({:DOWN, _, :process, anchor, reason}, %{channel: %{anchor: anchor}} = state),
    do: control({:anchor_down, reason}, state)

  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: unwait(state)

  defp deliver(%{credit: credit} = state) when credit <= 0, do: state

  defp deliver(state) do
    case read(state) do
      {[], 0, 0, next, _runs} ->
        wait(%{state | cursor: next})

      {items, n, lost, next, runs} ->
        # Timed first: a subscriber that has the batch finds it counted.
        Delivery.delivered(state.delivery, runs)
        items = if state.times?, do: Times.attach(items, runs), else: items
        send(state.subscriber, {:ringbus, state.handle, items, lost})
        deliver(%{state | cursor: next, credit: state.credit - n, lost: state.lost + lost})
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
      {[], 0, 0, next, _runs} ->
        %{state | cursor: next, waiting?: true}

      _ ->
        deliver(unwait(%{state | waiting?: true}))
    end
  rescue
    # The channel is gone: the delete notice is on its way.
    ArgumentError -> state
  end

  @doc """
  Takes a subscription process out of its channel's waiters, if
  `state.waiting?`, a channel gone or not.
  """
  @spec unwait(map()) :: map()
  def unwait(%{waiting?: false} = state), do: state

  def unwait(state) do
    Ring.disarm(state.channel)
    %{state | waiting?: false}
  rescue
    # The channel is gone: the delete notice is on its way.
    ArgumentError -> %{state | waiting?: false}
  end

  defp read(state) do
    Ring.expire(state.channel)
    Ring.read_timed(state.channel, state.cursor, min(state.credit, state.max_batch))
  rescue
    # The channel's table is gone: the delete notice is on its way.
    ArgumentError -> {[], 0, 0, state.cursor, []}
  end
end
