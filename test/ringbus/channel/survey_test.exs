defmodule Ringbus.Channel.SurveyTest do
  # Ringbus.subscriptions/2: each subscription of a channel, found through
  # the monitors on its anchor, gives its lag, credit and losses.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Internals

  setup do
    name = {__MODULE__, System.unique_integer([:positive])}
    :ok = Ringbus.create(name, capacity: 4)
    on_exit(fn -> Ringbus.delete(name) end)
    %{name: name}
  end

  test "lists each subscription with its lag, credit and losses", %{name: name} do
    assert {:ok, []} = Ringbus.subscriptions(name)

    {:ok, sub} = Ringbus.subscribe(name, from: :earliest, max_credit: 2)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c d))

    # Two delivered within the credit, two behind it.
    assert_receive {:ringbus, ^sub, [{0, "a"}, {1, "b"}], 0}
    wait_credit(name, 0)

    assert {:ok, [%{lag: 2, credit: 0, lost: 0, cursor: 2} = figures]} =
             Ringbus.subscriptions(name)

    assert figures.subscriber == self()
    assert figures.subscription == Internals.subscription_pid(sub)

    # Four more: the ring (capacity 4) overwrites seqs 2 and 3 before the
    # subscriber acks, so it reads on from 4, 2 lost.
    {:ok, 4} = Ringbus.push_many(name, ~w(e f g h))
    assert {:ok, [%{lag: 6, lost: 0}]} = Ringbus.subscriptions(name)
    Ringbus.ack(sub, 2)
    assert_receive {:ringbus, ^sub, [{4, "e"}, {5, "f"}], 2}
    wait_credit(name, 0)
    assert {:ok, [%{lag: 2, lost: 2, cursor: 6}]} = Ringbus.subscriptions(name)
  end

  test "a subscription that does not answer in time is listed without figures", %{name: name} do
    {:ok, sub} = Ringbus.subscribe(name)
    {:ok, _other} = Ringbus.subscribe(name)
    pid = Internals.subscription_pid(sub)
    :ok = :sys.suspend(pid)

    {:ok, subs} = Ringbus.subscriptions(name, timeout: 50)

    assert %{lag: nil, credit: nil, lost: nil, subscriber: nil} =
             Enum.find(subs, &(&1.subscription == pid))

    assert [%{lag: 0}] = Enum.reject(subs, &(&1.subscription == pid))

    # Its late answer is dropped, not left in the caller's mailbox.
    :ok = :sys.resume(pid)
    assert {:ok, [_, _]} = Ringbus.subscriptions(name)
    refute_receive _, 50
  end

  test "only subscriptions are asked, at most :limit of them", %{name: name} do
    # Another process monitoring the anchor is not a subscription.
    anchor = Internals.channel!(name).anchor
    watcher = spawn(fn -> Process.monitor(anchor) && Process.sleep(:infinity) end)
    for _ <- 1..3, do: {:ok, _} = Ringbus.subscribe(name)

    assert {:ok, subs} = Ringbus.subscriptions(name)
    assert length(subs) == 3
    refute Enum.any?(subs, &(&1.subscription == watcher))
    assert {:ok, [_, _]} = Ringbus.subscriptions(name, limit: 2)
    assert {:error, :no_channel} = Ringbus.subscriptions({__MODULE__, :none})
    assert_raise ArgumentError, ~r/:limit/, fn -> Ringbus.subscriptions(name, limit: 0) end
  end

  defp wait_credit(name, credit) do
    assert Ringbus.Test.Eventually.eventually(fn ->
             match?({:ok, [%{credit: ^credit}]}, Ringbus.subscriptions(name))
           end)
  end
end
