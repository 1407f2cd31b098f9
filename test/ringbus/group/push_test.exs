defmodule Ringbus.Group.PushTest do
  # Push subscriptions to a consumer group (`Ringbus.Groups.subscribe/4`) on
  # this node: batches within the credit, credit back by acks by seq (from
  # any process), the subscriber as the consumer's owner, unsubscribe, a
  # message that comes due again, dead letters, and the ends.
  use ExUnit.Case, async: true

  alias Ringbus.Groups

  defp channel(opts \\ [capacity: 1_000]) do
    name = "push-test-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  defp push(name, payloads), do: {:ok, _} = Ringbus.push_many(name, payloads)

  # Every message of the batches that come within `ms`, in order.
  defp batches(sub, ms, acc \\ []) do
    receive do
      {:ringbus, ^sub, messages, 0} -> batches(sub, ms, acc ++ messages)
    after
      ms -> acc
    end
  end

  defp seqs(messages), do: Enum.map(messages, &elem(&1, 0))

  test "at most max_credit unacked; each ack by seq, from any process, gives credit back" do
    name = channel()
    :ok = Groups.create(name, "g", from: :earliest)
    push(name, for(i <- 0..9, do: "m#{i}"))
    {:ok, sub} = Groups.subscribe(name, "g", "w", max_credit: 3, max_batch: 2)

    assert batches(sub, 100) == [{0, "m0"}, {1, "m1"}, {2, "m2"}]
    # Without credit it does not wait for pushes: none wakes it for nothing.
    %{waiters: waiters} = Ringbus.Test.Internals.channel!(name)
    assert :ets.info(waiters, :size) == 0
    # Credit by count is not a group subscription's.
    :ok = Ringbus.ack(sub, 3)
    assert batches(sub, 50) == []

    task = Task.async(fn -> Groups.ack(name, "g", [1]) end)
    assert Task.await(task) == {:ok, 1}
    assert batches(sub, 100) == [{3, "m3"}]

    {:ok, 3} = Groups.ack(name, "g", [0, 2, 3])
    assert seqs(batches(sub, 100)) == [4, 5, 6]
    # Pushed while it waits for credit: delivered once acks come.
    push(name, ["m10"])
    {:ok, 3} = Groups.ack(name, "g", [4, 5, 6])
    assert seqs(batches(sub, 100)) == [7, 8, 9]
    {:ok, 3} = Groups.ack(name, "g", [7, 8, 9])
    assert batches(sub, 100) == [{10, "m10"}]
    # Caught up, it waits for a push, which wakes it.
    assert Ringbus.Test.Eventually.eventually(fn -> :ets.info(waiters, :size) == 1 end)
    push(name, ["m11"])
    assert batches(sub, 100) == [{11, "m11"}]

    assert {:ok, [%{delivered: 11, pending: 2, acked: 10, redelivered: 0}]} = Groups.info(name)
  end

  for kind <- [:memory, :replicated] do
    @tag kind: kind
    test "the subscriber owns the consumer: when it exits, its messages go to another at once (#{kind})",
         %{kind: kind} do
      name =
        if kind == :memory,
          do: channel(),
          else: channel(replicas: 1, capacity: 1_000)

      :ok = Groups.create(name, "g", from: :earliest)
      push(name, ["a", "b"])
      parent = self()

      subscriber =
        spawn(fn ->
          {:ok, sub} = Groups.subscribe(name, "g", "w1")
          send(parent, {:got, batches(sub, 100)})
          Process.sleep(:infinity)
        end)

      assert_receive {:got, [{0, "a"}, {1, "b"}]}, 5_000
      assert Groups.fetch(name, "g", "w2", 10) == {:ok, []}
      waiting = Task.async(fn -> Groups.fetch(name, "g", "w2", 10, timeout: 10_000) end)
      Process.exit(subscriber, :kill)
      # Well within the default ack_wait of 30 s; on a replicated channel the
      # owner's exit goes through the log.
      assert Task.await(waiting, 5_000) == {:ok, [{0, "a", 2}, {1, "b", 2}]}
    end
  end

  test "unsubscribe ends the deliveries; what it had stays pending, to ack" do
    name = channel()
    :ok = Groups.create(name, "g", from: :earliest)
    push(name, ["a"])
    {:ok, sub} = Groups.subscribe(name, "g", "w")
    assert batches(sub, 100) == [{0, "a"}]
    {pid, _ref} = sub
    ref = Process.monitor(pid)
    assert Ringbus.unsubscribe(sub) == :ok
    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}
    assert Ringbus.unsubscribe(sub) == {:error, :no_subscription}

    push(name, ["b"])
    assert batches(sub, 100) == []
    assert {:ok, [%{pending: 1}]} = Groups.info(name)
    assert Groups.fetch(name, "g", "w2", 10) == {:ok, [{1, "b", 1}]}
    assert Groups.ack(name, "g", [0]) == {:ok, 1}
  end

  test "a message not acked within ack_wait frees its credit and is delivered again" do
    name = channel()
    :ok = Groups.create(name, "g", from: :earliest, ack_wait: 100)
    push(name, ["a", "b"])
    {:ok, sub} = Groups.subscribe(name, "g", "w", max_credit: 1)
    assert_receive {:ringbus, ^sub, [{0, "a"}], 0}, 5_000
    # Due after ack_wait: its credit comes back, and it is due first.
    assert_receive {:ringbus, ^sub, [{0, "a"}], 0}, 5_000
    {:ok, 1} = Groups.ack(name, "g", [0])
    assert_receive {:ringbus, ^sub, [{1, "b"}], 0}, 5_000
    assert {:ok, [%{redelivered: 1, acked: 1, pending: 1}]} = Groups.info(name)
  end

  test "a message nacked with a delay reaches a waiting subscription when it comes due" do
    name = channel()
    :ok = Groups.create(name, "g", from: :earliest)
    push(name, ["a"])
    {:ok, [{0, "a", 1}]} = Groups.fetch(name, "g", "other", 1)
    {:ok, sub} = Groups.subscribe(name, "g", "w")
    assert batches(sub, 50) == []
    {:ok, 1} = Groups.nack(name, "g", [0], delay: 100)
    refute_receive {:ringbus, ^sub, _, _}, 50
    assert_receive {:ringbus, ^sub, [{0, "a"}], 0}, 5_000
    assert {:ok, [%{redelivered: 1}]} = Groups.info(name)
  end

  test "dead letters: pushed by the subscription as a fetch's caller pushes them" do
    name = channel()
    dead = channel()

    :ok =
      Groups.create(name, "g", from: :earliest, ack_wait: 50, max_deliver: 1, dead_letter: dead)

    push(name, ["x"])
    {:ok, sub} = Groups.subscribe(name, "g", "w")
    assert_receive {:ringbus, ^sub, [{0, "x"}], 0}, 5_000

    {:ok, dsub} = Ringbus.subscribe(dead, from: :earliest)
    assert_receive {:ringbus, ^dsub, [{0, letter}], 0}, 5_000

    assert {:ok, %{seq: 0, deliveries: 1, group: "g", payload: "x"}} =
             Groups.decode_dead_letter(letter)

    assert {:ok, [%{dead: 1, pending: 0}]} = Groups.info(name)
    refute_receive {:ringbus, ^sub, _, _}, 100
  end

  test "deliveries: and times: put each message's delivery count, and its time, in the batch" do
    name = channel()
    :ok = Groups.create(name, "g", from: :earliest)
    before = System.system_time(:millisecond)
    push(name, ["a"])
    {:ok, sub} = Groups.subscribe(name, "g", "w", deliveries: true)
    assert_receive {:ringbus, ^sub, [{0, "a", 1}], 0}, 5_000
    :ok = Ringbus.unsubscribe(sub)
    {:ok, 1} = Groups.nack(name, "g", [0])

    {:ok, sub} = Groups.subscribe(name, "g", "w", times: true)
    assert_receive {:ringbus, ^sub, [{0, "a", 2, ms}], 0}, 5_000
    assert ms >= before and ms <= System.system_time(:millisecond)
    assert_raise ArgumentError, fn -> Groups.subscribe(name, "g", "w", times: 1) end
  end

  test "ends: the group deleted, the channel deleted; errors" do
    name = channel()
    :ok = Groups.create(name, "g")
    assert Groups.subscribe(name, "none", "w") == {:error, :no_group}
    assert Groups.subscribe("push-test-none", "g", "w") == {:error, :no_channel}
    assert_raise ArgumentError, fn -> Groups.subscribe(name, "g", "w", max_credit: 0) end
    assert_raise ArgumentError, fn -> Groups.subscribe(name, "g", "w", from: 0) end

    {:ok, sub} = Groups.subscribe(name, "g", "w")
    :ok = Groups.delete(name, "g")
    push(name, ["a"])
    assert_receive {:ringbus_closed, ^sub, :no_group}, 5_000

    :ok = Groups.create(name, "g")
    {:ok, sub} = Groups.subscribe(name, "g", "w")
    # Another process fetches for its consumer: it takes the consumer over.
    {:ok, []} = Task.await(Task.async(fn -> Groups.fetch(name, "g", "w", 1) end))
    push(name, ["b"])
    assert_receive {:ringbus_closed, ^sub, :owner_gone}, 5_000

    {:ok, sub} = Groups.subscribe(name, "g", "w")
    :ok = Ringbus.delete(name)
    assert_receive {:ringbus_closed, ^sub, :channel_deleted}, 5_000
  end
end
