defmodule Ringbus.Channel.SubscriptionOwnerTest do
  use ExUnit.Case, async: true

  alias Ringbus.Channel.SubscriptionOwner

  import Ringbus.Test.Eventually

  setup do
    name = {:_, "owner-test-#{System.unique_integer([:positive])}"}
    other = {:"$1", "owner-test-#{System.unique_integer([:positive])}"}
    :ok = Ringbus.create(name, capacity: 4)
    :ok = Ringbus.create(other, capacity: 4)

    on_exit(fn ->
      Ringbus.delete(name)
      Ringbus.delete(other)
    end)

    %{name: name, other: other}
  end

  test "finds a subscription by its reference, and its channel's subscriptions by name",
       %{name: name, other: other} do
    {:ok, a} = Ringbus.subscribe(name)
    {:ok, b} = Ringbus.subscribe(name)
    {:ok, c} = Ringbus.subscribe(other)

    pids = Enum.map([a, b, c], &SubscriptionOwner.whereis/1)
    assert Enum.all?(pids, &is_pid/1)
    assert Enum.sort(SubscriptionOwner.subscriptions(name)) == Enum.sort(Enum.take(pids, 2))
    assert SubscriptionOwner.subscriptions(other) == [List.last(pids)]
    assert SubscriptionOwner.whereis(make_ref()) == nil
  end

  test "forgets a subscription that ends, however it ends", %{name: name} do
    {:ok, killed} = Ringbus.subscribe(name)
    {:ok, stopped} = Ringbus.subscribe(name)
    pid = SubscriptionOwner.whereis(killed)
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}
    :ok = Ringbus.unsubscribe(stopped)

    # The owner takes each :EXIT in its own time: poll, a bounded number of times.
    assert eventually(fn -> SubscriptionOwner.whereis(killed) == nil end, 200)
    assert eventually(fn -> SubscriptionOwner.whereis(stopped) == nil end, 200)
    assert SubscriptionOwner.whereis(killed) == nil
    assert SubscriptionOwner.whereis(stopped) == nil
    assert :ets.lookup(SubscriptionOwner, pid) == []
    assert SubscriptionOwner.subscriptions(name) == []
    assert Ringbus.ack(killed, 1) == {:error, :no_subscription}
  end
end
