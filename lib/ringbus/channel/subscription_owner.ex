defmodule Ringbus.Channel.SubscriptionOwner do
  @moduledoc false
  # Every subscription process links itself to this one, so that all of them
  # stop when the application stops, and registers itself in this process's
  # table, which maps its reference to its pid (for ack and unsubscribe) and
  # its channel's name (to close them all when the channel is deleted). When a
  # subscription ends, its `:EXIT` reaches this process, which removes its
  # entries. Callers read the table directly.
  #
  # Why not a DynamicSupervisor: a supervisor starts each child and waits for
  # its init with a selective receive that scans the start requests queued
  # behind it, so a burst of N subscribes costs O(N²) there (40k took 3.6 s, 160k 57 s;
  # `mix ringbus.bench backlog --only subscribe`).
  # Here each subscriber starts its own subscription, waiting in its own
  # mailbox, and this process only takes `{:EXIT, ...}` messages in order.
  # Subscriptions are temporary anyway: nothing would restart them.
  #
  # Why not a Registry: it links every registered process to a partition
  # process as well, a second process with one link per subscription to keep.
  # In bursts of 20k–160k process starts, linking and registering cost
  # 4.7–7.6 µs per start through a Registry and 4.2–5.8 µs through this table;
  # at 160k, 6.7–7.6 against 5.0–5.2 µs.
  #
  # The table holds `{ref, pid, channel_name}` and `{pid, ref}`, one key each,
  # so adding or removing a subscription costs the same however many there are.

  use GenServer

  @table __MODULE__

  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Links the calling process to the owner and registers it as subscription
  `ref` of channel `name`.
  """
  @spec adopt(reference(), term()) :: true
  def adopt(ref, name) do
    # Linked first: if the caller dies after registering, its :EXIT follows.
    Process.link(Process.whereis(__MODULE__) || exit(:ringbus_not_started))
    :ets.insert(@table, [{ref, self(), name}, {self(), ref}])
  end

  @doc "The pid of subscription `ref`, or `nil`."
  @spec whereis(reference()) :: pid() | nil
  def whereis(ref) do
    case :ets.lookup(@table, ref) do
      [{^ref, pid, _name}] -> pid
      [] -> nil
    end
  end

  @doc "The pids of every subscription of channel `name`: a scan of them all."
  @spec subscriptions(term()) :: [pid()]
  def subscriptions(name) do
    :ets.select(@table, [{{:_, :"$1", :"$2"}, [{:"=:=", :"$2", {:const, name}}], [:"$1"]}])
  end

  @impl true
  def init(:ok) do
    Process.flag(:trap_exit, true)

    :ets.new(@table, [
      :set,
      :public,
      :named_table,
      read_concurrency: true,
      write_concurrency: true
    ])

    {:ok, nil}
  end

  @impl true
  def handle_info({:EXIT, pid, _reason}, state) do
    case :ets.take(@table, pid) do
      [{^pid, ref}] -> :ets.delete(@table, ref)
      [] -> true
    end

    {:noreply, state}
  end
end
