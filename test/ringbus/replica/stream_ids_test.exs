defmodule Ringbus.Replica.StreamIdsTest do
  # A replicated channel's Redis stream IDs are decided in its log (machine
  # version 6, `Ringbus.Replica.StreamIds`): the machine, applied to rings
  # of this node, gives the same IDs to a ring whatever its history (one
  # rebuilt from a snapshot of an empty ring); a client's ID and XSETID
  # follow Redis's rules; under version 5 in effect nothing changes, and a
  # snapshot of version 5 still loads.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.{Ids, Ring}
  alias Ringbus.Replica.Machine
  alias Ringbus.Test.Internals

  @max 0xFFFF_FFFF_FFFF_FFFF

  defp ring(opts \\ [capacity: 100]) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  defp machine(name, opts \\ []),
    do: Machine.init(Map.merge(%{channel: name, capacity: 100}, Map.new(opts)))

  # Applies `commands` ({command, system_ms}) from log index `from`, under
  # machine version `version`: the last state and every reply.
  defp apply_all(state, commands, from \\ 1, version \\ Machine.version()) do
    {state, replies} =
      commands
      |> Enum.with_index(from)
      |> Enum.reduce({state, []}, fn {{cmd, ms}, i}, {st, replies} ->
        meta = %{index: i, system_time: ms, machine_version: version}
        {st, reply, _effects} = Machine.apply(meta, cmd, st)
        {st, [reply | replies]}
      end)

    {state, Enum.reverse(replies)}
  end

  defp ids(name, seqs), do: Enum.map(seqs, &Ring.stored_id(Internals.channel!(name), &1))
  defp last(name), do: Ids.last(Internals.channel!(name).ids)

  test "a ring rebuilt from a snapshot of an empty ring gives the IDs every member gives" do
    t = System.system_time(:millisecond)
    [a, c] = [ring(), ring()]

    # All in one ms, then a leader whose clock is behind.
    before = [
      {{:push, nil, ["a", "b"]}, t},
      {{:push_batches, [{nil, ["c"]}, {nil, ["d", "e"]}]}, t},
      {{:pull, 5}, t}
    ]

    later = [{{:push, nil, ["f"]}, t}, {{:push_id, :auto, "g"}, t - 5}]

    {snapshot, _} = apply_all(machine(a), before)
    {_, replies} = apply_all(snapshot, later, 4)
    assert replies == [{:ok, 5}, {:ok, 6, {t, 6}}]
    assert ids(a, 5..6) == [{t, 5}, {t, 6}]

    # C's ring is new (its own stamp at 0-0) and empty, as the snapshot's.
    {_, replies} = apply_all(%{snapshot | channel: c}, later, 4)
    assert replies == [{:ok, 5}, {:ok, 6, {t, 6}}]
    assert ids(c, 5..6) == ids(a, 5..6)
    assert last(c) == last(a)
  end

  test "a snapshot's last ID is the ring's at once, before any push" do
    t = System.system_time(:millisecond)
    [a, c] = [ring(), ring()]
    {snapshot, _} = apply_all(machine(a), [{{:push, nil, ["a"]}, t + 50}, {{:pull, 1}, t}])
    assert snapshot.last_id == {t + 50, 0}
    # As Ra starts a member from a snapshot.
    [] = Machine.state_enter(:follower, %{snapshot | channel: c, groups: []})
    assert last(c) == {t + 50, 0}
  end

  test "a client's ID and XSETID follow Redis's rules; every ring follows the last ID" do
    t = System.system_time(:millisecond)
    a = ring()
    f = t + 100

    {state, replies} =
      apply_all(machine(a), [
        {{:push_id, {f, 5}, "a"}, t},
        {{:push_id, {f, 5}, "x"}, t},
        {{:push_id, {0, 0}, "x"}, t},
        {{:push_id, {f, :auto}, "b"}, t},
        {{:push_id, {f - 1, :auto}, "x"}, t},
        {{:push_id, :auto, "c"}, t},
        {{:push, nil, ["d", "e"]}, t},
        {{:set_id, {f, 8}}, t},
        {{:set_id, {f, 9}}, t},
        {{:set_id, {f + 100, 0}}, t},
        {{:push_id, :auto, "f"}, t},
        {{:push_id, {f, 3}, ["not", "one"]}, t},
        {{:set_id, {-1, 0}}, t}
      ])

    assert replies == [
             {:ok, 0, {f, 5}},
             {:error, :not_greater},
             {:error, :zero},
             {:ok, 1, {f, 6}},
             {:error, :not_greater},
             {:ok, 2, {f, 7}},
             {:ok, 3},
             {:error, :below_top},
             :ok,
             :ok,
             {:ok, 5, {f + 100, 1}},
             {:error, :badarg},
             {:error, :badarg}
           ]

    assert ids(a, 0..5) == [{f, 5}, {f, 6}, {f, 7}, {f, 8}, {f, 9}, {f + 100, 1}]
    assert {state.head, state.rejected} == {6, 0}

    # Emptied, the stream takes a lower last ID, as Redis's does; the ring too.
    {state, [{:ok, _}, :ok]} = apply_all(state, [{{:pull, 6}, t}, {{:set_id, {1, 1}}, t}], 14)
    assert last(a) == {1, 1}
    {state, [{:ok, 6, {^t, 0}}]} = apply_all(state, [{{:push_id, :auto, "g"}, t}], 16)

    # The largest ID: none after it.
    {_state, replies} =
      apply_all(
        state,
        [
          {{:push_id, {@max, @max}, "h"}, t},
          {{:push_id, :auto, "x"}, t},
          {{:push, nil, ["x"]}, t},
          {{:push_id, {@max, :auto}, "x"}, t}
        ],
        17
      )

    assert replies == [
             {:ok, 7, {@max, @max}},
             {:error, :exhausted},
             {:error, :ids_exhausted},
             {:error, :not_greater}
           ]

    assert last(a) == {@max, @max}
  end

  test "a tagged push under an ID sent again gets its first reply" do
    t = System.system_time(:millisecond)
    push = {:tagged, {:w, 0, 0}, {:push_id, {t, 1}, "a"}}
    {_, replies} = apply_all(machine(ring()), [{push, t}, {push, t}])
    assert replies == [{:ok, 0, {t, 1}}, {:ok, 0, {t, 1}}]
  end

  test "under version 5 in effect, ID commands are refused and each ring stamps its own, as before; the change to 6 decides IDs above them" do
    t = System.system_time(:millisecond)
    a = ring()

    {state, replies} =
      apply_all(
        machine(a),
        [
          {{:push, nil, ["a", "b"]}, t},
          {{:push_id, {t + 5, 0}, "x"}, t},
          {{:tagged, {:w, 0, 0}, {:push_id, :auto, "x"}}, t},
          {{:set_id, {t + 5, 0}}, t},
          {{:tagged, {:w, 1, 0}, {:set_id, {t + 5, 0}}}, t}
        ],
        1,
        5
      )

    assert replies == [{:ok, 0} | List.duplicate({:error, :badarg}, 4)]
    # The ring stamped them itself, at the command's ms; the state decided none.
    assert [{ms, 0}, {ms, 1}] = ids(a, 0..1)
    assert ms in (t - 1)..(t + 1)
    assert {state.last_id, state.top_id} == {{0, 0}, {0, 0}}

    assert Machine.version() >= 6
    {state, [:ok]} = apply_all(state, [{{:machine_version, 5, 6}, t + 1}], 6)
    assert state.last_id == {t + 1, @max}
    assert last(a) == {t + 1, @max}

    {_, [{:ok, 2}, {:ok, 3, id}]} =
      apply_all(state, [{{:push, nil, ["c"]}, t + 1}, {{:push_id, :auto, "d"}, t + 1}], 7)

    assert ids(a, 2..3) == [{t + 2, 0}, {t + 2, 1}]
    assert id == {t + 2, 1}

    # A channel that never stored starts at 0-0.
    {fresh, [:ok]} = apply_all(machine(ring()), [{{:machine_version, 0, 6}, t}])
    assert fresh.last_id == {0, 0}
  end

  test "a snapshot of version 5, its messages without IDs, loads and goes on" do
    t = System.system_time(:millisecond)
    a = ring()

    old =
      machine(a)
      |> Map.merge(%{head: 2, stamp: t, groups: [], messages: [{0, "a", t}, {1, "b", t}]})
      |> Map.drop([:last_id, :top_id])

    {state, [{:ok, 2}]} = apply_all(old, [{{:push, nil, ["c"]}, t}], 10, 5)

    assert {:ok, [{0, "a", ^t}, {1, "b", ^t}, {2, "c", ^t}], 0} =
             Ringbus.read(a, 0, 10, times: true)

    [first, second, third] = ids(a, 0..2)
    assert Ids.above?(second, first) and Ids.above?(third, second)

    {state, [:ok]} = apply_all(state, [{{:machine_version, 5, 6}, t}], 11)
    {_, [{:ok, 3, id}]} = apply_all(state, [{{:push_id, :auto, "d"}, t}], 12)
    assert Ids.above?(id, third)
    assert ids(a, [3]) == [id]
  end
end

defmodule Ringbus.Replica.StreamIdsClusterTest do
  # Three members of a `replicas: 3` channel give every message the same ID:
  # pushes from every member at once (many in one ms), a client's ID, a
  # member restarted from a snapshot of an empty ring, and one that catches
  # up by replaying the log.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Nodes, Peers}
  import Peers, only: [eventually: 2]

  @moduletag timeout: 300_000
  @trim_all %{strategy: {:maxlen, 0}, approx: false, limit: nil}

  test "every member gives the same IDs, also once restored from a snapshot or the log" do
    # Small snapshot intervals, so that a few entries make a snapshot.
    [a, b, c] = nodes = Peers.start_joined(3, "replica_ids", env: [raft: [snapshot_interval: 16]])

    :ok = Nodes.call(a, Ringbus, :create, ["s", [replicas: 3, capacity: 200]], 30_000)

    nodes
    |> Enum.map(fn n ->
      Task.async(fn ->
        for i <- 1..20 do
          if rem(i, 2) == 0,
            do: {:ok, _} = Nodes.call(n, Ringbus, :push_many, ["s", ["x#{i}", "y#{i}"]]),
            else: {:ok, _} = Nodes.call(n, Ringbus, :push, ["s", "m#{i}"])
        end
      end)
    end)
    |> Task.await_many(60_000)

    ids = alike(nodes, 0..89)
    assert Enum.zip(ids, tl(ids)) |> Enum.all?(fn {x, y} -> Ringbus.Channel.Ids.above?(y, x) end)
    # A batch's two share an ms.
    assert Enum.any?(ids, &match?({_, n} when n > 0, &1))

    # A client's ID, far ahead; then the ring emptied: a snapshot of it
    # holds no message, and the last ID.
    f = System.system_time(:millisecond) + 3_600_000
    assert {:ok, 90, {^f, 0}} = run(b, {:push_id, "given", {f, 0}})
    assert run(c, {:push_id, "again", {f, 0}}) == {:error, :not_greater}
    {:ok, 91} = run(a, {:trim, @trim_all})
    index = applied(c)

    # Commands that change nothing, until c's snapshot is past them (Ra's
    # figures are as of its last tick, each second).
    Enum.reduce_while(1..100, nil, fn _, _ ->
      {:ok, 0} = run(a, {:trim, @trim_all})
      Process.sleep(50)
      if snapshot_index(c) > index, do: {:halt, :ok}, else: {:cont, nil}
    end)

    assert snapshot_index(c) > index

    Nodes.signal(c, :kill)
    c = Nodes.restart(c)
    on_exit(fn -> Nodes.stop([c]) end)
    nodes = [a, b, c]
    :ok = Nodes.join(nodes)
    # Before any push, as after one: the ring from the snapshot has its last ID.
    eventually(fn -> match?({:ok, {^f, 0}}, last_id(c)) end, 30_000)
    assert {:ok, 91, {^f, 1}} = run(c, {:push_id, "after", :auto})
    alike(nodes, 91..91)

    # b misses pushes and replays them from the log.
    Nodes.signal(b, :kill)
    for i <- 1..5, do: {:ok, _, _} = run(a, {:push_id, "while#{i}", :auto})
    b = Nodes.restart(b)
    on_exit(fn -> Nodes.stop([b]) end)
    nodes = [a, b, c]
    :ok = Nodes.join(nodes)
    assert alike(nodes, 91..96) == for(n <- 1..6, do: {f, n})
    assert Enum.uniq(for n <- nodes, do: last_id(n)) == [{:ok, {f, 6}}]
  end

  defp run(node, op), do: Nodes.call(node, Ringbus, :run, ["s", op], 20_000)

  defp last_id(node) do
    with {:ok, info} <- Nodes.call(node, Ringbus, :info, ["s"], 20_000), do: {:ok, info.last_id}
  end

  # A seq's ID on `node`'s ring, nil when it holds none (then named 0-<seq + 1>).
  defp id_of(node, seq) do
    case run(node, {:ids_of, [seq]}) do
      {:ok, [{0, _}]} -> {:ok, nil}
      {:ok, [id]} -> {:ok, id}
      other -> other
    end
  end

  # The IDs of `seqs`, once every member holds them, the same on each.
  defp alike(nodes, seqs) do
    read = fn n -> for seq <- seqs, do: id_of(n, seq) end

    eventually(
      fn -> Enum.all?(nodes, fn n -> Enum.all?(read.(n), &match?({:ok, {_, _}}, &1)) end) end,
      30_000
    )

    [first | rest] = for n <- nodes, do: read.(n)
    for other <- rest, do: assert(other == first)
    for {:ok, id} <- first, do: id
  end

  defp ra_metrics(node) do
    {:ok, ch} = Nodes.call(node, Ringbus.Store, :fetch, ["s"])
    {local, _} = ch.replica.server

    case Nodes.call(node, :ets, :lookup, [:ra_metrics, local]) do
      [{_, _term, snapshot, applied, _commit, _written, _latency}] -> {snapshot, applied}
      [] -> {0, 0}
    end
  end

  defp snapshot_index(node), do: elem(ra_metrics(node), 0)

  # Ra's figures are as of its last tick: the applied index after the next.
  defp applied(node) do
    Process.sleep(1_500)
    elem(ra_metrics(node), 1)
  end
end
