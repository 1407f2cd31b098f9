defmodule Ringbus.Channel.SubscriptionOwner do
  @moduledoc false
  # Every subscription process links itself to this one, so that all of them
  # stop when the application stops, and otherwise it does nothing.
  #
  # Why not a DynamicSupervisor: a supervisor starts each child and waits for
  # its init with a selective receive that scans the start requests queued
  # behind it, so a burst of N subscribes costs O(N²) there (40k took 3.6 s, 160k 57 s;
  # `mix ringbus.bench backlog --only subscribe`).
  # Here each subscriber starts its own subscription, waiting in its own
  # mailbox, and this process only takes `{:EXIT, ...}` messages in order.
  # Subscriptions are temporary anyway: nothing would restart them.

  use GenServer

  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Links the calling process to the owner."
  @spec adopt() :: true
  def adopt, do: Process.link(Process.whereis(__MODULE__) || exit(:ringbus_not_started))

  @impl true
  def init(:ok) do
    Process.flag(:trap_exit, true)
    {:ok, nil}
  end

  @impl true
  def handle_info({:EXIT, _pid, _reason}, state), do: {:noreply, state}
end
