defmodule Ringbus.Group.HoldTest do
  # Holding groups (`hold: true`, `Ringbus.Groups`' "Holding"): a reject
  # channel keeps each message until every holding group acked it (or it
  # is dead); a push that needs the room frees what all acked, and is
  # refused `:full` only when none is; pull takes nothing, a trim only
  # what all acked; a group without hold reads as before. Then a model of
  # the ring under random pushes, fetches, acks and pulls (PropEr).
  use ExUnit.Case, async: true

  alias Ringbus.Groups
  alias Ringbus.Test.Property

  @numtests 80

  defp channel(opts) do
    name = "hold-test-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  defp info(name) do
    {:ok, info} = Ringbus.info(name)
    info
  end

  test "the example of Groups' \"Holding\"" do
    name = channel(capacity: 2, overflow: :reject)
    :ok = Groups.create(name, "workers", from: :earliest, hold: true)
    {:ok, _} = Ringbus.push_many(name, ["t0", "t1"])
    assert Ringbus.push(name, "t2") == {:error, :full}
    assert Groups.fetch(name, "workers", "w", 1) == {:ok, [{0, "t0", 1}]}
    assert Groups.ack(name, "workers", [0]) == {:ok, 1}
    assert Ringbus.push(name, "t2") == {:ok, 2}
  end

  test "a slow holding group holds the ring full; its acks make room; a plain group reads on" do
    name = channel(capacity: 4, overflow: :reject)
    :ok = Groups.create(name, "fast", from: :earliest, hold: true)
    :ok = Groups.create(name, "slow", from: :earliest, hold: true)
    :ok = Groups.create(name, "plain", from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ["m0", "m1", "m2", "m3"])

    {:ok, fast} = Groups.fetch(name, "fast", "w", 10)
    assert {:ok, 4} = Groups.ack(name, "fast", Enum.map(fast, &elem(&1, 0)))
    assert Ringbus.push(name, "m4") == {:error, :full}
    assert %{len: 4, pushed: 4, pulled: 0, overwritten: 0, rejected: 1} = info(name)

    {:ok, [{0, "m0", 1}, {1, "m1", 1}]} = Groups.fetch(name, "slow", "w", 2)
    # Delivered is not acked.
    assert Ringbus.push(name, "m4") == {:error, :full}
    assert Groups.ack(name, "slow", [1]) == {:ok, 1}
    # 1 is acked by both, but 0 is older and still held.
    assert Ringbus.push(name, "m4") == {:error, :full}
    assert Groups.ack(name, "slow", [0]) == {:ok, 1}
    assert Ringbus.push_many(name, ["m4", "m5"]) == {:ok, 4}
    assert Ringbus.push(name, "m6") == {:error, :full}
    assert %{len: 4, pushed: 6, pulled: 2, overwritten: 0, first_seq: 2} = info(name)

    # The plain group lost what the holding groups' acks freed before it read it.
    assert Groups.fetch(name, "plain", "w", 10) ==
             {:ok, [{2, "m2", 1}, {3, "m3", 1}, {4, "m4", 1}, {5, "m5", 1}]}

    assert {:ok, groups} = Groups.info(name)
    assert %{lost: 2, pending: 4} = Enum.find(groups, &(&1.name == "plain"))
    assert %{lost: 0, acked: 2} = Enum.find(groups, &(&1.name == "slow"))
  end

  test "pull takes nothing; a trim only what every holding group acked; dead messages go" do
    name = channel(capacity: 3, overflow: :reject)
    :ok = Groups.create(name, "g", from: :earliest, hold: true, max_deliver: 1, ack_wait: 30)
    {:ok, 0} = Ringbus.push_many(name, ["m0", "m1", "m2"])
    assert Ringbus.pull(name) == :empty

    {:ok, [{0, "m0", 1}]} = Groups.fetch(name, "g", "w", 1)
    {:ok, 1} = Groups.ack(name, "g", [0])

    assert Ringbus.run(name, {:trim, %{strategy: {:maxlen, 0}, approx: false, limit: nil}}) ==
             {:ok, 1}

    assert %{len: 2, first_seq: 1, pulled: 1} = info(name)

    # Delivered once, not acked within ack_wait: dead, so it goes too.
    {:ok, [{1, "m1", 1}]} = Groups.fetch(name, "g", "w", 1)
    Process.sleep(40)
    {:ok, [{2, "m2", 1}]} = Groups.fetch(name, "g", "w", 1)
    assert {:ok, [%{dead: 1, pending: 1}]} = Groups.info(name)
    assert Ringbus.push_many(name, ["m3", "m4"]) == {:ok, 3}
    assert %{len: 3, first_seq: 2} = info(name)

    # With no holding group left, pull is as before.
    :ok = Groups.delete(name, "g")
    assert Ringbus.pull(name) == {:ok, 2, "m2"}
  end

  test "a holding group made later starts where the others' acks left the ring" do
    name = channel(capacity: 4, overflow: :reject)
    :ok = Groups.create(name, "a", from: :earliest, hold: true)
    {:ok, 0} = Ringbus.push_many(name, ["m0", "m1", "m2"])
    {:ok, _} = Groups.fetch(name, "a", "w", 2)
    {:ok, 2} = Groups.ack(name, "a", [0, 1])
    :ok = Groups.create(name, "b", from: :earliest, hold: true)
    assert Groups.fetch(name, "b", "w", 10) == {:ok, [{2, "m2", 1}]}
  end

  test "only a channel that rejects takes a holding group" do
    drop = channel(capacity: 4)
    assert Groups.create(drop, "g", hold: true) == {:error, :hold_needs_reject_channel}
    assert Groups.create(drop, "g") == :ok
    assert_raise ArgumentError, fn -> Groups.create(drop, "h", hold: 1) end

    name = "hold-test-replicated-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, replicas: 1, capacity: 4)

    try do
      assert Groups.create(name, "g", hold: true) == {:error, :hold_needs_reject_channel}
    after
      Ringbus.delete(name)
    end
  end

  test "under concurrent producers and consumers, a holding group loses nothing" do
    name = channel(capacity: 32, overflow: :reject)
    for g <- ["a", "b"], do: :ok = Groups.create(name, g, from: :earliest, hold: true)
    deadline = System.monotonic_time(:millisecond) + 30_000
    parent = self()

    # Each message is given back once, then acked: a message freed while
    # pending would be lost to its redelivery, and counted.
    consumers =
      for g <- ["a", "b"], c <- ["c1", "c2"] do
        spawn_link(fn -> consume(name, g, c, deadline, 0, parent) end)
      end

    producers =
      for p <- 1..2 do
        Task.async(fn -> for i <- 1..300, do: produce(name, "p#{p}-#{i}", deadline) end)
      end

    assert Enum.flat_map(producers, &Task.await(&1, 35_000)) |> Enum.all?(&(&1 == :ok))
    acked = for _ <- consumers, do: receive(do: ({:acked, n} -> n))
    assert Enum.sum(acked) == 2 * 600

    {:ok, groups} = Groups.info(name)
    assert [%{acked: 600, lost: 0, dead: 0}, %{acked: 600, lost: 0, dead: 0}] = groups
    assert %{pushed: 600, overwritten: 0, pulled: pulled, len: len} = info(name)
    assert pulled + len == 600
  end

  defp produce(name, payload, deadline) do
    case Ringbus.push(name, payload) do
      {:ok, _seq} ->
        :ok

      {:error, :full} ->
        if System.monotonic_time(:millisecond) < deadline,
          do: Process.sleep(1) && produce(name, payload, deadline),
          else: :timeout
    end
  end

  # Until its group has acked every message (or the deadline): reports how many it acked.
  defp consume(name, group, consumer, deadline, acked, parent) do
    {:ok, groups} = Groups.info(name)
    %{acked: all} = Enum.find(groups, &(&1.name == group))

    if all >= 600 or System.monotonic_time(:millisecond) > deadline do
      send(parent, {:acked, acked})
    else
      {:ok, messages} = Groups.fetch(name, group, consumer, 8, timeout: 20)
      {first, again} = Enum.split_with(messages, fn {_, _, n} -> n == 1 end)
      if first != [], do: {:ok, _} = Groups.nack(name, group, Enum.map(first, &elem(&1, 0)))
      {:ok, n} = Groups.ack(name, group, Enum.map(again, &elem(&1, 0)))
      consume(name, group, consumer, deadline, acked + n, parent)
    end
  end

  ## The model

  test "a reject ring with holding groups against a model: nothing unacked leaves it" do
    property =
      :proper.forall(scenario(), fn {capacity, commands} ->
        name = "hold-prop-#{System.unique_integer([:positive])}"

        Property.on_channel(name, [capacity: capacity, overflow: :reject], fn name ->
          for g <- ["h1", "h2"], do: :ok = Groups.create(name, g, from: :earliest, hold: true)
          :ok = Groups.create(name, "p", from: :earliest)
          model = %{name: name, capacity: capacity, head: 0, tail: 0, pushed: 0, groups: groups()}
          Enum.reduce(commands, model, &check(step(&2, &1)))
          true
        end)
      end)

    assert Property.check(property, @numtests) == true
  end

  defp scenario do
    group = :proper_types.oneof(["h1", "h2", "p"])
    picks = :proper_types.list(:proper_types.integer(0, 7))

    commands =
      :proper_types.list(
        :proper_types.frequency([
          {4, {:push, :proper_types.integer(1, 3)}},
          {4, {:fetch, group, :proper_types.integer(1, 3)}},
          {4, {:ack, group, picks}},
          {1, :pull}
        ])
      )

    {:proper_types.integer(3, 6), commands}
  end

  # Each group: `last` delivered, `pending` seqs, `acked` seqs.
  defp groups,
    do: Map.new(["h1", "h2", "p"], &{&1, %{last: -1, pending: MapSet.new(), acked: MapSet.new()}})

  defp model_floor(model) do
    for {g, %{last: last, pending: pending}} <- model.groups, g != "p" do
      Enum.min([last + 1 | MapSet.to_list(pending)])
    end
    |> Enum.min()
  end

  defp step(model, {:push, n}) do
    %{head: head, tail: tail, capacity: cap} = model
    payloads = for seq <- head..(head + n - 1), do: "m#{seq}"
    answer = Ringbus.push_many(model.name, payloads)

    cond do
      head + n - tail <= cap ->
        assert answer == {:ok, head}
        %{model | head: head + n, pushed: model.pushed + n}

      head + n - max(tail, model_floor(model)) <= cap ->
        assert answer == {:ok, head}
        %{model | head: head + n, pushed: model.pushed + n, tail: max(tail, model_floor(model))}

      true ->
        assert answer == {:error, :full}
        %{model | tail: max(tail, model_floor(model))}
    end
  end

  defp step(model, {:fetch, g, k}) do
    %{last: last, pending: pending} = group = model.groups[g]
    from = max(last + 1, model.tail)
    to = min(from + k - 1, model.head - 1)
    expected = for seq <- from..to//1, do: {seq, "m#{seq}", 1}
    assert Groups.fetch(model.name, g, "w", k) == {:ok, expected}
    seqs = Enum.map(expected, &elem(&1, 0))
    group = %{group | last: max(last, to), pending: MapSet.union(pending, MapSet.new(seqs))}
    put_in(model.groups[g], group)
  end

  defp step(model, {:ack, g, picks}) do
    %{pending: pending, acked: acked} = group = model.groups[g]
    held = Enum.sort(pending)
    seqs = picks |> Enum.flat_map(&Enum.slice(held, &1, 1)) |> Enum.uniq()
    assert Groups.ack(model.name, g, seqs) == {:ok, length(seqs)}
    group = %{group | pending: MapSet.difference(pending, MapSet.new(seqs))}
    put_in(model.groups[g], %{group | acked: MapSet.union(acked, MapSet.new(seqs))})
  end

  defp step(model, :pull) do
    assert Ringbus.pull(model.name) == :empty
    model
  end

  # The ring agrees with the model, and every seq it freed is acked by
  # each holding group: pushed == pulled (freed) + len, nothing overwritten.
  defp check(model) do
    info = info(model.name)
    assert %{first_seq: first, next_seq: next, pulled: pulled, len: len} = info
    assert {first, next} == {model.tail, model.head}
    assert info.pushed == model.pushed and info.pushed == pulled + len
    assert info.overwritten == 0 and pulled == model.tail

    for g <- ["h1", "h2"],
        seq <- 0..(model.tail - 1)//1,
        do: assert(MapSet.member?(model.groups[g].acked, seq))

    model
  end
end
