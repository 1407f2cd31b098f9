defmodule Ringbus.GroupsTest do
  # Consumer groups through the Elixir API (`Ringbus.Groups`) on this node:
  # redelivery after ack_wait, nack, a consumer's owner exiting, claims,
  # max_deliver and dead letters, the bound on pending messages, the ring's
  # losses, long polls, and the same groups through RESP's requests.
  use ExUnit.Case, async: true

  alias Ringbus.Groups

  doctest Ringbus.Groups

  defp channel(count, opts \\ [capacity: 100]) do
    name = "groups-test-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    for i <- 0..(count - 1)//1, do: {:ok, ^i} = Ringbus.push(name, "m#{i}")
    name
  end

  defp group!(name, opts \\ []) do
    {:ok, groups} = Groups.info(name)
    Enum.find(groups, &(&1.name == Keyword.get(opts, :group, "g")))
  end

  test "fetch, ack, nack, in_progress: each message to one consumer until acked" do
    name = channel(4)
    assert Groups.create(name, "g", from: :earliest) == :ok
    assert Groups.create(name, "g") == {:error, :exists}
    assert Groups.fetch(name, "none", "c", 1) == {:error, :no_group}
    assert Groups.fetch("groups-test-none", "g", "c", 1) == {:error, :no_channel}

    assert Groups.fetch(name, "g", "a", 2) == {:ok, [{0, "m0", 1}, {1, "m1", 1}]}
    assert Groups.fetch(name, "g", "b", 10) == {:ok, [{2, "m2", 1}, {3, "m3", 1}]}
    assert Groups.fetch(name, "g", "b", 10) == {:ok, []}

    assert Groups.ack(name, "g", [0, 2, 2, 9]) == {:ok, 2}
    assert Groups.nack(name, "g", [1, 0]) == {:ok, 1}
    assert Groups.in_progress(name, "g", [3]) == {:ok, 1}
    # Due again at once, for any consumer; 3 is not due.
    assert Groups.fetch(name, "g", "b", 10) == {:ok, [{1, "m1", 2}]}
    assert Groups.ack(name, "g", [1, 3]) == {:ok, 2}

    assert %{delivered: 3, pending: 0, lag: 0, acked: 4, redelivered: 1, dead: 0, lost: 0} =
             group!(name)

    assert Groups.delete(name, "g") == :ok
    assert Groups.delete(name, "g") == {:error, :no_group}
    assert Groups.info(name) == {:ok, []}
  end

  test "from: :latest (the default) and from a seq" do
    name = channel(3)
    :ok = Groups.create(name, "late")
    :ok = Groups.create(name, "mid", from: 1)
    {:ok, 3} = Ringbus.push(name, "m3")
    assert Groups.fetch(name, "late", "c", 10) == {:ok, [{3, "m3", 1}]}
    assert Groups.fetch(name, "mid", "c", 10) == {:ok, [{1, "m1", 1}, {2, "m2", 1}, {3, "m3", 1}]}
  end

  test "a message not acked within ack_wait is delivered again, with its count" do
    name = channel(1)
    :ok = Groups.create(name, "g", from: :earliest, ack_wait: 50)
    assert Groups.fetch(name, "g", "a", 1) == {:ok, [{0, "m0", 1}]}
    assert Groups.fetch(name, "g", "b", 1) == {:ok, []}
    # A long poll wakes when the message comes due.
    assert Groups.fetch(name, "g", "b", 1, timeout: 5_000) == {:ok, [{0, "m0", 2}]}
    assert Groups.fetch(name, "g", "a", 1, timeout: 5_000) == {:ok, [{0, "m0", 3}]}
    assert %{redelivered: 2, pending: 1, consumers: consumers} = group!(name)
    assert [%{name: "a", pending: 1}, %{name: "b", pending: 0}] = consumers
  end

  test "a nack's delay" do
    name = channel(1)
    :ok = Groups.create(name, "g", from: :earliest)
    {:ok, [_]} = Groups.fetch(name, "g", "a", 1)
    assert Groups.nack(name, "g", [0], delay: 60_000) == {:ok, 1}
    assert Groups.fetch(name, "g", "a", 1) == {:ok, []}
    assert Groups.nack(name, "g", [0], delay: 30) == {:ok, 1}
    assert Groups.fetch(name, "g", "a", 1, timeout: 5_000) == {:ok, [{0, "m0", 2}]}
  end

  test "when a consumer's process exits, its messages go to a waiting consumer at once" do
    name = channel(2)
    :ok = Groups.create(name, "g", from: :earliest)
    test = self()

    worker =
      spawn(fn ->
        send(test, {:fetched, Groups.fetch(name, "g", "doomed", 1)})
        Process.sleep(:infinity)
      end)

    assert_receive {:fetched, {:ok, [{0, "m0", 1}]}}
    assert Groups.fetch(name, "g", "other", 1) == {:ok, [{1, "m1", 1}]}
    waiting = Task.async(fn -> Groups.fetch(name, "g", "other", 1, timeout: 10_000) end)
    Process.exit(worker, :kill)
    # Well within the default ack_wait of 30 s.
    assert Task.await(waiting, 5_000) == {:ok, [{0, "m0", 2}]}
  end

  test "owner: names the consumer's owner in the caller's stead; its exit makes the message due" do
    name = channel(1)
    :ok = Groups.create(name, "g", from: :earliest)
    owner = spawn(fn -> Process.sleep(:infinity) end)

    assert Groups.fetch(name, "g", "w1", 1, owner: owner) == {:ok, [{0, "m0", 1}]}
    assert Groups.fetch(name, "g", "w2", 1) == {:ok, []}
    # The caller lives on; the owner's exit alone makes the message due.
    Process.exit(owner, :kill)
    assert Groups.fetch(name, "g", "w2", 1, timeout: 5_000) == {:ok, [{0, "m0", 2}]}
    assert_raise ArgumentError, fn -> Groups.fetch(name, "g", "w2", 1, owner: :me) end
  end

  test "a consumer fetched for by a new process belongs to it; removed, its messages are due" do
    name = channel(2)
    :ok = Groups.create(name, "g", from: :earliest)
    # The first owner exits, so 0 is due, whether or not the table's owner
    # has handled that exit yet (here it cannot); the new owner gets it.
    :sys.suspend(Ringbus.Group.TableOwner)

    try do
      first = Task.async(fn -> Groups.fetch(name, "g", "c", 1) end)
      gone = Process.monitor(first.pid)
      assert Task.await(first) == {:ok, [{0, "m0", 1}]}
      assert_receive {:DOWN, ^gone, :process, _, _}
      assert Groups.fetch(name, "g", "c", 1) == {:ok, [{0, "m0", 2}]}
    after
      :sys.resume(Ringbus.Group.TableOwner)
    end

    assert Groups.fetch(name, "g", "c", 1) == {:ok, [{1, "m1", 1}]}
    assert Groups.remove_consumer(name, "g", "c") == {:ok, 2}
    assert %{consumers: []} = group!(name)
    assert Groups.fetch(name, "g", "d", 10) == {:ok, [{0, "m0", 3}, {1, "m1", 2}]}
  end

  test "claim and autoclaim take pending messages over" do
    name = channel(3)
    :ok = Groups.create(name, "g", from: :earliest)
    {:ok, [_, _, _]} = Groups.fetch(name, "g", "a", 3)
    assert Groups.claim(name, "g", "b", [1, 7]) == {:ok, [{1, "m1", 2}]}
    assert Groups.autoclaim(name, "g", "c", 60_000, 10) == {:ok, []}
    assert Groups.autoclaim(name, "g", "c", 0, 2) == {:ok, [{0, "m0", 2}, {1, "m1", 3}]}
    assert %{consumers: cs} = group!(name)
    assert Enum.map(cs, &{&1.name, &1.pending}) == [{"a", 1}, {"b", 0}, {"c", 2}]
  end

  test "max_deliver without a dead-letter channel: counted dead" do
    name = channel(1)
    :ok = Groups.create(name, "g", from: :earliest, max_deliver: 2)
    {:ok, [{0, _, 1}]} = Groups.fetch(name, "g", "a", 1)
    {:ok, 1} = Groups.nack(name, "g", [0])
    {:ok, [{0, _, 2}]} = Groups.fetch(name, "g", "a", 1)
    {:ok, 1} = Groups.nack(name, "g", [0])
    assert Groups.fetch(name, "g", "a", 1) == {:ok, []}
    assert %{dead: 1, pending: 0, acked: 0} = group!(name)
  end

  test "max_deliver with a dead-letter channel: pushed there, decoded, counted" do
    name = channel(2)
    dlq = channel(0)
    :ok = Groups.create(name, "g", from: :earliest, max_deliver: 1, dead_letter: dlq)
    {:ok, [{0, _, 1}, {1, _, 1}]} = Groups.fetch(name, "g", "a", 2)
    {:ok, 1} = Groups.nack(name, "g", [1])
    assert Groups.fetch(name, "g", "a", 1) == {:ok, []}
    assert {:ok, [{0, letter}], 0} = Ringbus.read(dlq, 0, 10)

    assert Groups.decode_dead_letter(letter) ==
             {:ok, %{seq: 1, deliveries: 1, group: "g", channel: name, payload: "m1"}}

    assert %{dead: 1, pending: 1} = group!(name)

    # A dead-letter channel that refuses: the message stays pending, due
    # again after ack_wait (here made due at once, by nacks).
    full = channel(2, capacity: 2, overflow: :reject)
    :ok = Groups.create(name, "f", from: :earliest, max_deliver: 1, dead_letter: full)
    {:ok, [{0, _, 1}, {1, _, 1}]} = Groups.fetch(name, "f", "a", 2)
    {:ok, 1} = Groups.nack(name, "f", [0])
    assert Groups.fetch(name, "f", "a", 1) == {:ok, []}
    assert %{dead: 0, pending: 2} = group!(name, group: "f")
    {:ok, 0, _} = Ringbus.pull(full)
    {:ok, 1, _} = Ringbus.pull(full)
    {:ok, 2} = Groups.nack(name, "f", [0, 1])
    assert Groups.fetch(name, "f", "a", 1) == {:ok, []}
    assert %{dead: 2, pending: 0} = group!(name, group: "f")
    assert {:ok, [{2, _}, {3, _}], 2} = Ringbus.read(full, 0, 10)
  end

  test "max_pending: a fetch at the bound takes due messages only, and counts it" do
    name = channel(5)
    :ok = Groups.create(name, "g", from: :earliest, max_pending: 2)
    assert Groups.fetch(name, "g", "a", 5) == {:ok, [{0, "m0", 1}, {1, "m1", 1}]}
    assert Groups.fetch(name, "g", "a", 5) == {:ok, []}
    {:ok, 1} = Groups.nack(name, "g", [0])
    assert Groups.fetch(name, "g", "a", 5) == {:ok, [{0, "m0", 2}]}
    {:ok, 2} = Groups.ack(name, "g", [0, 1])
    assert Groups.fetch(name, "g", "a", 5) == {:ok, [{2, "m2", 1}, {3, "m3", 1}]}
    assert %{held: 4, pending: 2, lag: 1} = group!(name)
  end

  test "lost: messages the ring overwrote before delivery, or before a redelivery" do
    name = channel(4, capacity: 4)
    :ok = Groups.create(name, "g", from: :earliest)
    {:ok, [{0, _, 1}]} = Groups.fetch(name, "g", "a", 1)
    {:ok, 1} = Groups.nack(name, "g", [0])
    for i <- 4..6, do: {:ok, ^i} = Ringbus.push(name, "m#{i}")
    # 0 to 2 are gone: 1 and 2 undelivered, counted at once; 0 pending.
    assert %{lost: 2, pending: 1, lag: 4} = group!(name)
    assert Groups.fetch(name, "g", "a", 10) == {:ok, for(i <- 3..6, do: {i, "m#{i}", 1})}
    assert %{lost: 3, pending: 4, lag: 0} = group!(name)
  end

  test "a long poll is woken by a push, and times out with nothing" do
    name = channel(0)
    :ok = Groups.create(name, "g")
    assert Groups.fetch(name, "g", "a", 1, timeout: 20) == {:ok, []}
    waiting = Task.async(fn -> Groups.fetch(name, "g", "a", 10, timeout: 10_000) end)
    # Pushed once the task waits (its fetch registered it among the waiters).
    Ringbus.Test.Eventually.eventually(fn -> waiting?(name, waiting.pid) end)
    {:ok, 0} = Ringbus.push(name, "late")
    assert Task.await(waiting, 5_000) == {:ok, [{0, "late", 1}]}
    # Nothing left in the caller's mailbox.
    refute_received :ringbus_wake
  end

  test "ack_fetch acks, then fetches as fetch does: its wait, its times" do
    name = channel(3)
    :ok = Groups.create(name, "g", from: :earliest)
    assert {:ok, [{0, "m0", 1}, {1, "m1", 1}]} = Groups.fetch(name, "g", "c", 2)
    # Counted as ack/3 counts: 7 is not pending.
    assert Groups.ack_fetch(name, "g", "c", [0, 7], 10) == {:ok, 1, [{2, "m2", 1}]}

    assert {:ok, 2, [{3, "late", 1, ms}]} =
             (fn ->
                waiting =
                  Task.async(fn ->
                    Groups.ack_fetch(name, "g", "c", [1, 2], 10, timeout: 10_000, times: true)
                  end)

                Ringbus.Test.Eventually.eventually(fn -> waiting?(name, waiting.pid) end)
                # The acks were done before the wait.
                assert %{acked: 3, pending: 0} = group!(name)
                {:ok, 3} = Ringbus.push(name, "late")
                Task.await(waiting, 5_000)
              end).()

    assert is_integer(ms)
    # Nothing acked comes again.
    assert Groups.nack(name, "g", [0, 1, 2, 3]) == {:ok, 1}
    assert Groups.fetch(name, "g", "c", 10) == {:ok, [{3, "late", 2}]}
    assert Groups.ack_fetch(name, "none", "c", [3], 1) == {:error, :no_group}
    assert_raise ArgumentError, ~r/:seqs/, fn -> Groups.ack_fetch(name, "g", "c", [-1], 1) end
  end

  defp waiting?(name, pid) do
    channel = Ringbus.Test.Internals.channel!(name)
    :ets.member(channel.waiters, pid)
  end

  test "RESP's requests and the API share one group" do
    name = channel(4)
    # Made as RESP makes it (XGROUP CREATE ... 0), read as XREADGROUP reads.
    :ok = Ringbus.run(name, {:group, {:create, "g", -1, nil}})
    assert Ringbus.run(name, {:group, {:read, "g", "redis", 1, false}}) == {:ok, [{0, "m0"}]}
    assert Groups.fetch(name, "g", "api", 2) == {:ok, [{1, "m1", 1}, {2, "m2", 1}]}
    assert Ringbus.run(name, {:group, {:ack, "g", [1]}}) == {:ok, 1}
    assert Groups.ack(name, "g", [0]) == {:ok, 1}

    assert {:ok, {1, 2, 2, [{"api", 1}]}} = Ringbus.run(name, {:group, {:pending, "g"}})

    assert %{config: %{ack_wait: 30_000, max_pending: 10_000}, acked: 2, pending: 1} =
             group!(name)
  end

  test "bad arguments raise" do
    name = channel(0)
    assert_raise ArgumentError, ~r/:ack_wait/, fn -> Groups.create(name, "g", ack_wait: 0) end
    assert_raise ArgumentError, ~r/:from/, fn -> Groups.create(name, "g", from: -1) end

    assert_raise ArgumentError, ~r/:max_pending/, fn ->
      Groups.create(name, "g", max_pending: 0)
    end

    assert_raise ArgumentError, ~r/invalid group options/, fn ->
      Groups.create(name, "g", x: 1)
    end

    assert_raise ArgumentError, ~r/:group/, fn -> Groups.fetch(name, "", "c", 1) end
    assert_raise ArgumentError, ~r/:max/, fn -> Groups.fetch(name, "g", "c", 0) end
    assert_raise ArgumentError, ~r/:seqs/, fn -> Groups.ack(name, "g", [-1]) end
  end
end
