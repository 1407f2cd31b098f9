defmodule Ringbus.Channel.SubscriptionTest do
  # How subscriptions begin and end: each one monitors its subscriber and its
  # channel's anchor, and is registered nowhere else.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.Subscription
  alias Ringbus.Test.Internals

  import Ringbus.Test.Eventually

  setup do
    name = {__MODULE__, System.unique_integer([:positive])}
    other = {__MODULE__, System.unique_integer([:positive])}
    :ok = Ringbus.create(name, capacity: 4)
    :ok = Ringbus.create(other, capacity: 4)

    on_exit(fn ->
      Ringbus.delete(name)
      Ringbus.delete(other)
    end)

    %{name: name, other: other}
  end

  test "delivers in seq order under credit, and acks return credit", %{name: name} do
    {:ok, sub} = Ringbus.subscribe(name, max_credit: 2, from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c))

    assert_receive {:ringbus, ^sub, batch, 0}, 1_000
    # Two in flight at most, in one batch or two.
    batch = if length(batch) == 1, do: batch ++ next_batch(sub), else: batch
    assert batch == [{0, "a"}, {1, "b"}]
    # Once the subscription has handled all it was sent, nothing more came.
    :sys.get_state(Internals.subscription_pid(sub))
    refute_received {:ringbus, ^sub, _, _}

    assert :ok = Ringbus.ack(sub, 2)
    assert_receive {:ringbus, ^sub, [{2, "c"}], 0}, 1_000
  end

  test "subscribing leaves the caller's queued messages as they were", %{name: name} do
    for i <- 1..3, do: send(self(), {:queued, i})

    {:ok, _sub} = Ringbus.subscribe(name)

    assert Process.info(self(), :messages) ==
             {:messages, [{:queued, 1}, {:queued, 2}, {:queued, 3}]}
  end

  test "deleting a channel closes its subscriptions and no other's", %{name: name, other: other} do
    {:ok, a} = Ringbus.subscribe(name)
    {:ok, b} = Ringbus.subscribe(name)
    {:ok, c} = Ringbus.subscribe(other)
    refs = for sub <- [a, b], do: Process.monitor(Internals.subscription_pid(sub))

    :ok = Ringbus.delete(name)

    assert_receive {:ringbus_closed, ^a, :channel_deleted}, 1_000
    assert_receive {:ringbus_closed, ^b, :channel_deleted}, 1_000
    for ref <- refs, do: assert_receive({:DOWN, ^ref, :process, _, :normal}, 1_000)
    assert Ringbus.ack(a, 1) == {:error, :no_subscription}
    assert Ringbus.unsubscribe(b) == {:error, :no_subscription}

    refute_received {:ringbus_closed, ^c, _}
    assert Process.alive?(Internals.subscription_pid(c))
    {:ok, 0} = Ringbus.push(other, "still here")
    assert_receive {:ringbus, ^c, [{0, "still here"}], 0}, 1_000
  end

  test "a subscription to a channel deleted before it started closes at once", %{name: name} do
    {:ok, channel} = Internals.channel(name)
    :ok = Ringbus.delete(name)

    {:ok, sub} = Subscription.start(channel, self(), Subscription.validate_options!([]))

    assert_receive {:ringbus_closed, ^sub, :channel_deleted}, 1_000
  end

  test "an ended subscription is gone for ack and unsubscribe, and from its anchor",
       %{name: name} do
    {:ok, killed} = Ringbus.subscribe(name, from: :earliest)
    {:ok, stopped} = Ringbus.subscribe(name, from: :earliest)
    {:ok, kept} = Ringbus.subscribe(name)

    [killed_ref, stopped_ref] =
      for sub <- [killed, stopped], do: Process.monitor(Internals.subscription_pid(sub))

    Process.exit(Internals.subscription_pid(killed), :kill)
    assert_receive {:DOWN, ^killed_ref, :process, _, :killed}, 1_000

    # Once unsubscribe returns, nothing more is sent.
    assert :ok = Ringbus.unsubscribe(stopped)
    {:ok, _} = Ringbus.push(name, "after")
    assert_receive {:ringbus, ^kept, [{_, "after"}], 0}, 1_000
    refute_received {:ringbus, ^stopped, _, _}
    assert_receive {:DOWN, ^stopped_ref, :process, _, :normal}, 1_000

    for sub <- [killed, stopped] do
      assert Ringbus.ack(sub, 1) == {:error, :no_subscription}
      assert Ringbus.unsubscribe(sub) == {:error, :no_subscription}
    end

    # The dead ones' monitors leave the anchor in its own time (a signal from
    # each); the living one's stays.
    {:ok, channel} = Internals.channel(name)
    alive = {:monitored_by, [Internals.subscription_pid(kept)]}
    assert eventually(fn -> Process.info(channel.anchor, :monitored_by) == alive end, 200)
  end

  test "the subscriber's exit ends its subscription", %{name: name} do
    parent = self()

    subscriber =
      spawn(fn ->
        {:ok, sub} = Ringbus.subscribe(name)
        send(parent, {:sub, sub})
        Process.sleep(:infinity)
      end)

    assert_receive {:sub, sub}, 1_000
    ref = Process.monitor(Internals.subscription_pid(sub))
    Process.exit(subscriber, :kill)
    assert_receive {:DOWN, ^ref, :process, _, :normal}, 1_000
  end

  test "a handle whose reference is not the subscription's changes nothing", %{name: name} do
    {:ok, {pid, _ref} = sub} = Ringbus.subscribe(name, max_credit: 1, from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b))
    assert_receive {:ringbus, ^sub, [{0, "a"}], 0}, 1_000

    forged = {pid, make_ref()}
    assert Ringbus.unsubscribe(forged) == {:error, :no_subscription}
    assert Process.alive?(pid)
    assert :ok = Ringbus.ack(forged, 1)
    :sys.get_state(pid)
    refute_received {:ringbus, _, _, _}

    assert :ok = Ringbus.ack(sub, 1)
    assert_receive {:ringbus, ^sub, [{1, "b"}], 0}, 1_000
  end

  test "an anchor stopped from outside closes its subscriptions with the reason, and the channel gets a new one",
       %{name: name} do
    {:ok, old} = Ringbus.subscribe(name)
    {:ok, channel} = Internals.channel(name)

    Process.exit(channel.anchor, :kill)

    assert_receive {:ringbus_closed, ^old, :killed}, 1_000
    # The store replaces the anchor when it takes the :EXIT.
    assert eventually(fn -> Internals.channel(name) != {:ok, channel} end, 200)
    {:ok, new} = Ringbus.subscribe(name)
    {:ok, 0} = Ringbus.push(name, "after")
    assert_receive {:ringbus, ^new, [{0, "after"}], 0}, 1_000
    {:ok, channel} = Internals.channel(name)
    assert Process.alive?(channel.anchor)
  end

  defp next_batch(sub) do
    assert_receive {:ringbus, ^sub, batch, 0}, 1_000
    batch
  end
end
