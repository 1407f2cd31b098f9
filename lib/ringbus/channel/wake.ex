defmodule Ringbus.Channel.Wake do
  @moduledoc false
  # Wake-ups for a channel's subscriptions and waiting fetches: the
  # channel's waiters table, and its wake flag in slot 8 of its `:atomics`
  # (`Ringbus.Channel.Ring` stores, then calls `stored/1`).

  alias Ringbus.Channel

  @waiting 8

  @doc """
  Asks the next push to wake the channel's subscriptions. A subscription calls
  this when it has caught up, then reads once more before it waits: the push
  stores before it looks at the flag, the subscription sets the flag before it
  looks at the store, so one of the two always sees the other.
  """
  @spec arm(Channel.t()) :: :ok
  def arm(%Channel{atomics: a} = ch) do
    :ets.insert(ch.waiters, {self()})
    :atomics.put(a, @waiting, 1)
  end

  @doc "Withdraws the calling process from the channel's waiters."
  @spec disarm(Channel.t()) :: true
  def disarm(%Channel{} = ch), do: :ets.delete(ch.waiters, self())

  @doc """
  Wakes the channel's waiters as a push does, for a change other than a
  push that they wait for (a consumer group's pending entries come due).
  A channel deleted meanwhile has nobody waiting.
  """
  @spec wake_waiters(Channel.t()) :: :ok
  def wake_waiters(%Channel{atomics: a} = ch) do
    if :atomics.exchange(a, @waiting, 0) != 0, do: wake_all(ch)
    :ok
  rescue
    ArgumentError -> :ok
  end

  # Each waiter is removed and then woken, so none is removed unwoken; a
  # waiter that died meanwhile is removed all the same. Inserting and
  # removing one waiter costs the same however many there are.
  defp wake_all(ch) do
    for {pid} <- :ets.tab2list(ch.waiters) do
      :ets.delete(ch.waiters, pid)
      send(pid, :ringbus_wake)
    end
  end

  @doc "After a store: wakes the waiters if they asked for it (`arm/1`)."
  @spec stored(Channel.t()) :: :ok
  def stored(%Channel{atomics: a} = ch) do
    # An atomic read-modify-write orders this read after the store's insert.
    if :atomics.add_get(a, @waiting, 0) != 0 and :atomics.exchange(a, @waiting, 0) != 0 do
      wake_all(ch)
    end

    :ok
  end
end
