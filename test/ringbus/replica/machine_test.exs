defmodule Ringbus.Replica.MachineTest do
  # The replicated channel's Ra machine as functions: its decisions (seqs,
  # overflow, bytes, pulls, dedup, release cursors) with no process, and
  # `apply/3` on a real ring of this node, replayed.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.Trim
  alias Ringbus.Replica.{Checkpoints, Machine}
  alias Ringbus.Test.Internals

  # The channels these tests create, gone after each (the status page test
  # counts what the page shows).
  setup do
    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, "replica_machine_"),
          do: Ringbus.delete(name)
    end)
  end

  defp machine(opts) do
    Machine.init(Map.merge(%{name: :test, channel: unique(), capacity: 4}, Map.new(opts)))
  end

  defp unique, do: "replica_machine_#{System.unique_integer([:positive])}"

  # Decides commands from log index 1 on; returns the last state and every reply.
  defp run(state, commands) do
    {state, replies} =
      commands
      |> Enum.with_index(1)
      |> Enum.reduce({state, []}, fn {cmd, i}, {st, replies} ->
        {st, reply, _ops} = Machine.decide(cmd, i, st)
        {st, [reply | replies]}
      end)

    {state, Enum.reverse(replies)}
  end

  describe "decisions" do
    test "a batch gets consecutive seqs; drop-oldest moves the tail past the capacity" do
      state = machine(capacity: 4)
      {state, reply, ops} = Machine.decide({:push, nil, ["a", "b", "c"]}, 1, state)
      assert reply == {:ok, 0}
      # Its IDs follow the last (0-0) at the state's stamp (0 here).
      assert ops == [{:put, 0, ["a", "b", "c"], 3, 3, {0, 1}}, {:drop, 0}]

      {state, reply, ops} = Machine.decide({:push, nil, ["d", "e", "f"]}, 2, state)
      assert reply == {:ok, 3}
      assert ops == [{:put, 3, ["d", "e", "f"], 3, 3, {0, 4}}, {:drop, 2}]
      assert {state.head, state.tail} == {6, 2}
    end

    test "reject refuses a batch that does not fit, whole, and counts it" do
      {state, replies} =
        run(machine(capacity: 4, overflow: :reject), [
          {:push, nil, ["a", "b", "c"]},
          {:push, nil, ["d", "e"]},
          {:push, nil, ["d"]}
        ])

      assert replies == [{:ok, 0}, {:error, :full}, {:ok, 3}]
      assert {state.head, state.tail, state.rejected} == {4, 0, 2}
      {_, _, ops} = Machine.decide({:push, nil, ["x"]}, 4, state)
      assert ops == [{:rejected, 3}]
    end

    test "max_bytes: too large is refused; drop-oldest frees the oldest messages until it fits" do
      state = machine(capacity: 100, max_bytes: 10)
      {state, reply, _} = Machine.decide({:push, nil, ["12345678901"]}, 1, state)
      assert reply == {:error, :too_large}

      {state, replies} = run(state, [{:push, nil, ["1234", "12"]}, {:push, nil, ["123", "1234"]}])

      assert replies == [{:ok, 0}, {:ok, 2}]
      # 4 + 2 + 3 + 4 = 13 > 10: the first message (4 bytes) goes.
      assert {state.tail, state.bytes} == {1, 9}

      {state, {:pulled, 1, 2}, [{:pull, 1, 2}]} = Machine.decide({:pull, 2}, 9, state)
      assert {state.tail, state.bytes} == {3, 4}
    end

    test "max_bytes under reject refuses what would pass it; a pull makes room" do
      {state, replies} =
        run(machine(capacity: 100, max_bytes: 6, overflow: :reject), [
          {:push, nil, ["1234"]},
          {:push, nil, ["123"]},
          {:pull, 1},
          {:push, nil, ["123"]}
        ])

      assert replies == [{:ok, 0}, {:error, :full}, {:pulled, 0, 1}, {:ok, 1}]
      assert state.bytes == 3
    end

    test "a pull takes at most what is live" do
      {state, replies} = run(machine([]), [{:pull, 5}, {:push, nil, ["a", "b"]}, {:pull, 5}])
      assert replies == [{:pulled, 0, 0}, {:ok, 0}, {:pulled, 0, 2}]
      assert state.tail == 2
    end

    test "batches of one command are decided one by one; bad ones are refused" do
      {state, reply, ops} =
        Machine.decide(
          {:push_batches, [{nil, ["a"]}, {nil, [:not_binary]}, :junk, {nil, ["b", "c"]}]},
          1,
          machine([])
        )

      assert reply == [{:ok, 0}, {:error, :badarg}, {:error, :badarg}, {:ok, 1}]
      # The batches stored are one put, at the first one's seq and ID.
      assert ops == [{:put, 0, ["a", "b", "c"], 3, 3, {0, 1}}, {:drop, 0}]
      assert state.head == 3
      assert {_, {:error, :badarg}, []} = Machine.decide(:what, 2, state)
    end

    test "a refusal between batches of one command keeps the puts apart, in order" do
      command = {:push_batches, [{nil, ["a"]}, {nil, ["b", "c", "d", "e"]}, {nil, ["f"]}]}
      {state, reply, ops} = Machine.decide(command, 1, machine(capacity: 4, overflow: :reject))
      assert reply == [{:ok, 0}, {:error, :full}, {:ok, 1}]

      assert ops == [
               {:put, 0, ["a"], 1, 1, {0, 1}},
               {:rejected, 4},
               {:put, 1, ["f"], 1, 1, {0, 2}}
             ]

      assert {state.head, state.rejected} == {2, 4}
    end
  end

  describe "dedup" do
    test "a tag stored already gets its first reply and stores nothing" do
      {state, replies} =
        run(machine(capacity: 10), [
          {:push, {:p, 1}, ["a"]},
          {:push, {:p, 2}, ["b"]},
          {:push, {:p, 1}, ["a"]},
          {:push, {:q, 1}, ["c"]}
        ])

      assert replies == [{:ok, 0}, {:ok, 1}, {:ok, 0}, {:ok, 2}]
      assert state.head == 3
      assert {_, {:ok, 1}, []} = Machine.decide({:push, {:p, 2}, ["b"]}, 5, state)
    end

    test "a refused batch does not spend its tag" do
      {state, replies} =
        run(machine(capacity: 1, overflow: :reject), [
          {:push, {:p, 1}, ["a"]},
          {:push, {:p, 2}, ["b"]},
          {:pull, 1},
          {:push, {:p, 2}, ["b"]}
        ])

      assert replies == [{:ok, 0}, {:error, :full}, {:pulled, 0, 1}, {:ok, 1}]
      assert state.head == 2
    end

    # As a memory channel's (`Ringbus.Channel.Producers`): the window is of
    # n, (last - window, last], not of the last tags stored.
    test "within the window, a tag never stored is stored once; window below the last is stale" do
      {state, replies} =
        run(machine(capacity: 100, window: 4), [
          {:push, {:p, 1}, ["a"]},
          {:push, {:p, 5}, ["b"]},
          {:push, {:p, 3}, ["c"]},
          {:push, {:p, 3}, ["c"]},
          {:push, {:p, 1}, ["a"]},
          {:push, {:p, 2}, ["d"]},
          {:push, {:p, 5}, ["b"]}
        ])

      assert replies == [
               {:ok, 0},
               {:ok, 1},
               {:ok, 2},
               {:ok, 2},
               {:error, :stale_tag},
               {:ok, 3},
               {:ok, 1}
             ]

      assert %{p: {5, _seen, recent}} = state.producers
      assert recent |> :queue.to_list() |> Enum.map(&elem(&1, 0)) |> Enum.sort() == [2, 3, 5]
    end

    test "the window per producer and the number of producers are bounded" do
      state = machine(capacity: 100, window: 2, max_producers: 2)

      {state, _} =
        run(state, for(n <- 1..3, do: {:push, {:p, n}, ["x"]}) ++ [{:push, {:q, 1}, ["y"]}])

      assert {_, {:ok, 2}, []} = Machine.decide({:push, {:p, 3}, ["x"]}, 9, state)
      assert {_, {:error, :stale_tag}, []} = Machine.decide({:push, {:p, 1}, ["x"]}, 9, state)

      # A third producer evicts the one seen least recently, :p.
      {state, {:ok, 4}, _} = Machine.decide({:push, {:r, 1}, ["z"]}, 10, state)
      assert Map.keys(state.producers) |> Enum.sort() == [:q, :r]
      assert {_, {:ok, 5}, _} = Machine.decide({:push, {:p, 3}, ["x"]}, 11, state)
    end
  end

  describe "writer tags" do
    test "a resent command gets its first reply and applies nothing: pushes, pulls, trims" do
      state = machine(capacity: 10)
      push = {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["a"]}, {{:p, 1}, ["b", "c"]}]}}
      {state, first, ops} = Machine.decide(push, 1, state)
      assert first == [{:ok, 0}, {:ok, 1}]
      assert [{:put, 0, ["a", "b", "c"], 3, 3, _id}, {:drop, 0}] = ops

      # The same command again (the writer's resend after a failover).
      assert {state, ^first, []} = Machine.decide(push, 2, state)
      assert state.head == 3

      pull = {:tagged, {:w, 1, 0}, {:pull, 2}}
      {state, {:pulled, 0, 2} = pulled, [{:pull, 0, 2}]} = Machine.decide(pull, 3, state)
      assert {state, ^pulled, []} = Machine.decide(pull, 4, state)
      assert state.tail == 2

      trim = {:tagged, {:w, 2, 0}, {:trim, %{strategy: {:maxlen, 0}, approx: false, limit: nil}}}
      {state, {:trimmed, 2, 1} = trimmed, [{:pull, 2, 1}]} = Machine.decide(trim, 5, state)
      assert {state, ^trimmed, []} = Machine.decide(trim, 6, state)
      assert {state.head, state.tail} == {3, 3}

      # Another writer's tag of the same number is its own.
      assert {_, [{:ok, 3}], _} =
               Machine.decide({:tagged, {:v, 0, 0}, {:push_batches, [{nil, ["d"]}]}}, 7, state)
    end

    test "a refusal is a reply like any other: the resend gets it, even with room since" do
      {state, replies} =
        run(machine(capacity: 1, overflow: :reject), [
          {:push, nil, ["a"]},
          {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["b"]}]}},
          {:pull, 1},
          {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["b"]}]}}
        ])

      assert replies == [{:ok, 0}, [{:error, :full}], {:pulled, 0, 1}, [{:error, :full}]]
      assert state.head == 1
    end

    test "tags are not in order: a copy lost with a leader is applied when it comes after newer ones" do
      {state, replies} =
        run(machine(capacity: 10), [
          {:tagged, {:w, 1, 0}, {:push_batches, [{nil, ["b"]}]}},
          {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["a"]}]}},
          {:tagged, {:w, 1, 0}, {:push_batches, [{nil, ["b"]}]}}
        ])

      assert replies == [[{:ok, 0}], [{:ok, 1}], [{:ok, 0}]]
      assert state.head == 2
    end

    test "replies below the writer's floor are forgotten; a tag below it is stale and applies nothing" do
      {state, _} =
        run(machine(capacity: 10), [
          {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["a"]}]}},
          {:tagged, {:w, 1, 0}, {:push_batches, [{nil, ["b"]}]}},
          {:tagged, {:w, 2, 2}, {:push_batches, [{nil, ["c"]}]}}
        ])

      assert %{w: {2, 3, replies}} = state.writers
      assert Map.keys(replies) == [2]

      assert {state, {:error, :stale_tag}, []} =
               Machine.decide({:tagged, {:w, 1, 0}, {:push_batches, [{nil, ["b"]}]}}, 4, state)

      assert state.head == 3
    end

    test "the replies per writer and the writers are bounded" do
      state = machine(capacity: 100, writer_window: 2, max_writers: 2)
      push = fn w, n -> {:tagged, {w, n, 0}, {:push_batches, [{nil, ["x"]}]}} end
      {state, _} = run(state, [push.(:w, 0), push.(:w, 1), push.(:w, 2), push.(:v, 0)])

      # Past the window the oldest reply goes, and the floor passes it.
      assert {_, [{:ok, 1}], []} = Machine.decide(push.(:w, 1), 9, state)
      assert {_, {:error, :stale_tag}, []} = Machine.decide(push.(:w, 0), 9, state)

      # A third writer evicts the one seen least recently, :w.
      {state, [{:ok, 4}], _} = Machine.decide(push.(:u, 0), 10, state)
      assert Map.keys(state.writers) |> Enum.sort() == [:u, :v]
    end

    test "bad tags and nested tags are refused" do
      state = machine([])

      for bad <- [
            {:tagged, {:w, :x, 0}, {:pull, 1}},
            {:tagged, {:w, 0}, {:pull, 1}},
            {:tagged, {:w, 0, 0}, {:tagged, {:w, 1, 0}, {:pull, 1}}},
            {:tagged, {:w, 0, 0}, :junk}
          ] do
        assert {^state, {:error, :badarg}, []} = Machine.decide(bad, 1, state)
      end
    end
  end

  describe "release cursors" do
    test "a cursor passes only entries whose messages are all dead" do
      state = machine(channel: here(capacity: 4), capacity: 4)
      # Nothing stored yet: the log so far can go.
      assert {state, [{:release_cursor, 0, _}]} = Checkpoints.checkpoint(state, 0, 4)

      # Entries 1 and 2 store seqs 0..3: all live, nothing to release.
      {state, _, _} = Machine.decide({:push, nil, ["a", "b"]}, 1, state)
      {state, []} = Checkpoints.checkpoint(state, 1, 4)
      {state, _, _} = Machine.decide({:push, nil, ["c", "d"]}, 2, state)
      {state, []} = Checkpoints.checkpoint(state, 2, 4)

      # Entry 3 overwrites seqs 0 and 1, entry 1's: the log up to 1 can go,
      # with the state as it was after entry 1.
      {state, _, _} = Machine.decide({:push, nil, ["e", "f"]}, 3, state)
      assert {state, [{:release_cursor, 1, snapshot}]} = Checkpoints.checkpoint(state, 3, 4)
      assert {snapshot.head, snapshot.tail} == {2, 0}

      # Pulling everything releases up to the last entry that stored.
      {state, _, _} = Machine.decide({:pull, 10}, 4, state)
      assert {_state, [{:release_cursor, 4, snapshot}]} = Checkpoints.checkpoint(state, 4, 4)
      assert {snapshot.head, snapshot.tail} == {6, 6}
    end

    test "checkpoints stay few however many entries" do
      reject = [capacity: 1000, overflow: :reject]

      state =
        Enum.reduce(1..10_000, machine([channel: here(reject)] ++ reject), fn i, st ->
          cmd = if rem(i, 3) == 0, do: {:pull, 1}, else: {:push, nil, ["x"]}
          {st, _, _} = Machine.decide(cmd, i, st)
          {st, _} = Checkpoints.checkpoint(st, i, 4)
          st
        end)

      assert :queue.len(state.checkpoints) <= 5
    end

    test "a member whose channel is not on its node releases nothing: it could not copy its groups" do
      state = machine(capacity: 4)
      {state, _, _} = Machine.decide({:pull, 10}, 1, state)
      assert {_state, []} = Checkpoints.checkpoint(state, 1, 4)
    end
  end

  # A channel of this node for a machine to checkpoint.
  defp here(opts) do
    name = unique()
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  describe "apply/3 on this node's ring" do
    defp apply_all(state, commands, from \\ 1) do
      commands
      |> Enum.with_index(from)
      |> Enum.reduce({state, []}, fn {cmd, i}, {st, replies} ->
        {st, reply, _effects} = Machine.apply(%{index: i}, cmd, st)
        {st, [reply | replies]}
      end)
      |> then(fn {st, replies} -> {st, Enum.reverse(replies)} end)
    end

    test "pushes and pulls reach the ring; replaying the log changes nothing" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 4)
      state = machine(channel: name, capacity: 4)

      commands = [
        {:push, {:p, 1}, ["a", "b", "c"]},
        {:pull, 1},
        {:push_batches, [{{:p, 2}, ["d", "e"]}, {nil, ["f"]}]},
        {:push, {:p, 2}, ["d", "e"]}
      ]

      {_state, replies} = apply_all(state, commands)
      assert replies == [{:ok, 0}, {:ok, [{0, "a"}]}, [{:ok, 3}, {:ok, 5}], {:ok, 3}]
      ring = {Ringbus.read(name, 0, 10), Ringbus.info(name)}
      assert {{:ok, [{2, "c"}, {3, "d"}, {4, "e"}, {5, "f"}], 2}, {:ok, info}} = ring
      assert %{len: 4, pulled: 1, overwritten: 1, pushed: 6} = info

      # The Ra server restarts, this ring lives on: the log applies again.
      {_state, _} = apply_all(machine(channel: name, capacity: 4), commands)
      assert {Ringbus.read(name, 0, 10), Ringbus.info(name)} == ring
    end

    test "a resent pull answers the messages the first took, and takes no more" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 10)
      state = machine(channel: name, capacity: 10)
      pull = {:tagged, {:w, 1, 0}, {:pull, 2}}

      {_state, replies} =
        apply_all(state, [
          {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["a", "b", "c"]}]}},
          pull,
          pull
        ])

      assert replies == [[{:ok, 0}], {:ok, [{0, "a"}, {1, "b"}]}, {:ok, [{0, "a"}, {1, "b"}]}]
      assert {:ok, [{2, "c"}], 2} = Ringbus.read(name, 0, 10)
      assert {:ok, %{pulled: 2, len: 1}} = Ringbus.info(name)
    end

    test "version 0 refuses a tagged command, as a machine before tags does; a state of version 0 takes tags after the upgrade" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 10)
      push = {:tagged, {:w, 0, 0}, {:push_batches, [{nil, ["a"]}]}}
      # A state as a snapshot of version 0 holds it: no writers.
      old =
        machine(channel: name, capacity: 10) |> Map.drop([:writers, :writer_window, :max_writers])

      assert {state, {:error, :badarg}, _} =
               Machine.apply(%{index: 1, machine_version: 0}, push, old)

      assert {state.head, Ringbus.read(name, 0, 10)} == {0, {:ok, [], 0}}
      {state, :ok, _} = Machine.apply(%{index: 2}, {:machine_version, 0, 1}, state)
      assert {_, [{:ok, 0}], _} = Machine.apply(%{index: 3, machine_version: 1}, push, state)
      # Also with no version change applied: a snapshot taken before it.
      assert {_, [{:ok, 0}], _} = Machine.apply(%{index: 3, machine_version: 1}, push, old)
    end

    test "version 1 refuses group requests, tagged or not, as a machine before groups does" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 10)
      state = machine(channel: name, capacity: 10)
      groups = {:groups, [{:infinity, {:create, "g", -1, nil}}]}

      assert {_, {:error, :badarg}, _} =
               Machine.apply(%{index: 1, machine_version: 1}, groups, state)

      tagged = {:tagged, {:w, 0, 0}, groups}

      assert {state, {:error, :badarg}, _} =
               Machine.apply(%{index: 1, machine_version: 1}, tagged, state)

      # The refusal is the tag's reply: a resend gets it too, even under version 2.
      assert {state, {:error, :badarg}, _} =
               Machine.apply(%{index: 2, machine_version: 2}, tagged, state)

      assert {_, {:groups, [:ok]}, _} =
               Machine.apply(%{index: 3, machine_version: 2, system_time: 5}, groups, state)
    end

    test "versions before 5 refuse an ack_fetch, that request alone, tagged or not; version 5 acks, then fetches" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 10)
      on_exit(fn -> Ringbus.delete(name) end)
      state = machine(channel: name, capacity: 10)
      {state, _, _} = Machine.apply(%{index: 1, system_time: 5}, {:push, nil, ["a", "b"]}, state)
      fetch = {:fetch, "g", "c", self(), 1, 0}
      groups = {:groups, [{:infinity, {:create, "g", -1, nil}}, {:infinity, fetch}]}

      assert {state, {:groups, [:ok, {:ok, {[{0, "a", 1}], nil, []}}]}, _} =
               Machine.apply(%{index: 2, system_time: 5}, groups, state)

      both = [{:infinity, {:ack_fetch, [0], fetch}}, {:infinity, {:info, "g"}}]

      for version <- [2, 3, 4],
          command <- [{:groups, both}, {:tagged, {:w, version, 0}, {:groups, both}}] do
        assert {_, {:groups, [{:error, :badarg}, {:ok, %{pending: 1, acked: 0}}]}, _} =
                 Machine.apply(%{index: 3, machine_version: version}, command, state)
      end

      assert {_,
              {:groups, [{:ok, {1, {[{1, "b", 1}], nil, []}}}, {:ok, %{pending: 1, acked: 1}}]},
              _} = Machine.apply(%{index: 4, machine_version: 5}, {:groups, both}, state)

      # Version 6 adds stream IDs decided in the log, 7 deletes (`{:delete, seqs}`).
      assert Machine.version() == 7
    end

    test "a trim of a run of pushes removes what the pushes trimming one by one would, from version 4" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 2_000)
      on_exit(fn -> Ringbus.delete(name) end)
      state = machine(channel: name, capacity: 2_000)
      push = {:push, nil, List.duplicate("m", 1_000)}
      {state, _, _} = Machine.apply(%{index: 1, system_time: 5}, push, state)
      # Two pushes' `~` trim, LIMIT 150: each removes one whole node of 100.
      trim = Trim.of_run(%{strategy: {:maxlen, 10}, approx: true, limit: 150}, 2)

      assert {_, {:ok, 100}, _} =
               Machine.apply(%{index: 2, machine_version: 3}, {:trim, trim}, state)

      assert {_, {:ok, 200}, _} =
               Machine.apply(%{index: 2, machine_version: 4}, {:trim, trim}, state)
    end

    test "a command's messages carry its stamp, never less than the one before" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 10)
      on_exit(fn -> Ringbus.delete(name) end)
      state = machine(channel: name, capacity: 10)
      t = System.system_time(:millisecond) - 1_000

      {state, _, _} = Machine.apply(%{index: 1, system_time: t}, {:push, nil, ["a", "b"]}, state)
      # A leader whose clock is behind stamps as the last command did.
      {state, _, _} = Machine.apply(%{index: 2, system_time: t - 50}, {:push, nil, ["c"]}, state)
      {state, _, _} = Machine.apply(%{index: 3, system_time: t + 7}, {:push, nil, ["d"]}, state)
      # A state from a snapshot taken before messages had times has no stamp.
      old = Map.delete(state, :stamp)
      {_, _, _} = Machine.apply(%{index: 4, system_time: t + 3}, {:push, nil, ["e"]}, old)

      assert {:ok, timed, 0} = Ringbus.read(name, 0, 10, times: true)
      assert timed == [{0, "a", t}, {1, "b", t}, {2, "c", t}, {3, "d", t + 7}, {4, "e", t + 3}]
    end

    test "under max_age, each command first expires what its stamp makes older, counted once" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 10)
      on_exit(fn -> Ringbus.delete(name) end)
      state = machine(channel: name, capacity: 10, max_age: 15)
      t = System.system_time(:millisecond) - 1_000
      apply = fn st, i, at, cmd -> Machine.apply(%{index: i, system_time: at}, cmd, st) end

      {state, _, _} = apply.(state, 1, t, {:push, nil, ["a", "b"]})
      {state, _, _} = apply.(state, 2, t + 10, {:push, nil, ["c"]})
      {state, _, _} = apply.(state, 3, t + 12, {:pull, 0})
      assert {:ok, %{len: 3, expired: 0}} = Ringbus.info(name)

      # At t + 20, what was stored at t is older than 15 ms; at t + 10, not.
      {state, {:ok, []}, effects} = apply.(state, 4, t + 20, {:pull, 0})
      assert {:ok, %{len: 1, expired: 2, first_seq: 2} = info} = Ringbus.info(name)
      assert info.pushed == info.pulled + info.overwritten + info.expired + info.len
      # The leader's timer for the next expiry: when "c" is 15 ms old.
      assert {:timer, :expire, 6} in effects

      # The timer's command expires "c"; applying it again changes nothing.
      {state, :ok, effects} = apply.(state, 5, t + 26, {:timeout, :expire})
      refute Enum.any?(effects, &match?({:timer, _, _}, &1))
      {_, _, _} = apply.(state, 5, t + 26, {:timeout, :expire})
      assert {:ok, %{len: 0, expired: 3}} = Ringbus.info(name)
      assert Ringbus.Replica.Retention.expire(state) == {state, []}
    end

    test "a replay from a snapshot onto a new ring rebuilds the live messages" do
      name = unique()
      :ok = Ringbus.create(name, capacity: 3, overflow: :reject)
      state = machine(channel: name, capacity: 3, overflow: :reject)

      # Entry 1 stores seqs 0..1, entry 2 pulls them, entries 3 and 4 store.
      commands = [{:push, nil, ["a", "b"]}, {:pull, 2}, {:push, nil, ["c"]}, {:push, nil, ["d"]}]

      {_, effects} =
        Enum.reduce(Enum.with_index(commands, 1), {state, []}, fn {cmd, i}, {st, effects} ->
          {st, _reply, new} = Machine.apply(%{index: i}, cmd, st)
          {st, effects ++ new}
        end)

      assert [{:release_cursor, 2, snapshot}] = effects
      assert {:ok, [{2, "c"}, {3, "d"}], 2} = Ringbus.read(name, 0, 10)

      # A new node's ring: the snapshot's state and the entries after it.
      :ok = Ringbus.delete(name)
      :ok = Ringbus.create(name, capacity: 3, overflow: :reject)
      {_, _} = apply_all(snapshot, Enum.drop(commands, 2), 3)
      assert {:ok, [{2, "c"}, {3, "d"}], 2} = Ringbus.read(name, 0, 10)
      assert {:ok, %{len: 2, next_seq: 4}} = Ringbus.info(name)
    end

    test "decisions match a local channel's, push for push and pull for pull" do
      :rand.seed(:exsss, {1, 2, 3})

      for opts <- [
            [capacity: 5],
            [capacity: 5, overflow: :reject],
            [capacity: 50, max_bytes: 20],
            [capacity: 50, max_bytes: 20, overflow: :reject]
          ] do
        local = unique()
        replicated = unique()
        :ok = Ringbus.create(local, opts)
        :ok = Ringbus.create(replicated, opts)
        state = machine([{:channel, replicated} | opts])

        commands =
          for _ <- 1..300 do
            if :rand.uniform(4) == 1,
              do: {:pull, :rand.uniform(3)},
              else: {:push, nil, for(_ <- 1..:rand.uniform(3), do: random_payload())}
          end

        {_state, replies} = apply_all(state, commands)

        for {cmd, reply} <- Enum.zip(commands, replies) do
          assert reply == local_reply(local, cmd), "#{inspect(opts)}: #{inspect(cmd)}"
        end

        assert Ringbus.read(replicated, 0, 100) == Ringbus.read(local, 0, 100)
        # A local drop-oldest batch is one chunk, whose bytes count until it
        # goes whole; the replicated ring stores messages one by one.
        chunked? = opts[:max_bytes] == nil and opts[:overflow] != :reject
        # Two channels, two creations, each with its own push times.
        # Times and Redis IDs are each ring's clock's.
        ignore = [:incarnation, :oldest_time, :newest_time, :first_id, :last_id, :max_removed_id]
        ignore = if chunked?, do: [:bytes | ignore], else: ignore
        {:ok, info} = Ringbus.info(replicated)
        {:ok, expected} = Ringbus.info(local)
        assert Map.drop(info, ignore) == Map.drop(expected, ignore)
      end
    end

    defp random_payload, do: :binary.copy("x", :rand.uniform(8) - 1)

    defp local_reply(name, {:push, nil, payloads}) do
      {count, bytes} = Ringbus.Channel.Ring.measure!(payloads)
      Ringbus.Channel.Ring.push_measured(Internals.channel!(name), payloads, count, bytes)
    end

    defp local_reply(name, {:pull, max}) do
      {:ok, pull_n(name, max, [])}
    end

    defp pull_n(_name, 0, acc), do: Enum.reverse(acc)

    defp pull_n(name, n, acc) do
      case Ringbus.pull(name) do
        {:ok, seq, payload} -> pull_n(name, n - 1, [{seq, payload} | acc])
        :empty -> Enum.reverse(acc)
      end
    end
  end
end
