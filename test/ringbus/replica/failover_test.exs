defmodule Ringbus.Replica.FailoverTest do
  # A replicated channel of three members whose leader's node is killed
  # (kill -9) again and again while producers and pullers on the two other
  # nodes work: a push or pull in flight at the kill gets its answer from
  # the next leader, within 2 s; every acked message is stored once, and
  # pulled at most once.
  #
  # Each round: the leader is found; a producer
  # (`Ringbus.Test.TaggedProducer`, one push at a time under producer
  # tags, each failed attempt tried again under its tag) and a puller
  # (`Ringbus.Test.Puller`) start on each follower; the leader's node is
  # killed once both producers have acks, and another producer starts on
  # each follower at once (its first push begins a millisecond or two after
  # the kill, while Ra there still names the dead leader); all work 2.5 s
  # more and stop; the node is started again on its data dir and rejoins,
  # and the three members are awaited until they hold the same messages.
  # `FAILOVER_REPORT=1` prints each round's slowest push and pull.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Nodes, Peers, Puller, TaggedProducer}
  import Peers, only: [eventually: 1, eventually: 2]

  @moduletag timeout: 900_000

  # No attempt may take longer: a push in flight at a kill is sent again to
  # the next leader, whose election takes well under this here.
  @bound_ms 2_000
  @after_kill_ms 2_500

  test "kills of the leader's node: no push or pull waits 2 s, acked messages are stored once, pulled once" do
    kill_rounds("replica_failover", 5)
  end

  # `mix test test/ringbus/replica/failover_test.exs --include long`
  @tag :long
  test "20 kills of the leader's node" do
    kill_rounds("replica_failover_long", 20)
  end

  test "with no majority up, a write on the member left answers :node_busy before its timeout, and was not done" do
    nodes = Peers.start_joined(3, "replica_no_majority")

    :ok = Nodes.call(hd(nodes), Ringbus, :create, ["f", [replicas: 3, capacity: 100]], 30_000)
    leader = await_leader(nodes)
    assert {:ok, 0} = Nodes.call(leader, Ringbus, :push, ["f", "a"])
    [left, other] = nodes -- [leader]
    eventually(fn -> Nodes.call(left, Ringbus, :len, ["f"]) == 1 end)

    Nodes.signal(leader, :kill)
    Nodes.signal(other, :kill)
    # Both are down as the member left sees it: a write then cannot leave.
    eventually(fn ->
      Nodes.call(left, Node, :list, []) -- [leader.node, other.node] ==
        Nodes.call(left, Node, :list, [])
    end)

    started = System.monotonic_time(:millisecond)
    opts = [producer: {"p", 1}, timeout: 1_000]
    assert {:error, :node_busy} = Nodes.call(left, Ringbus, :push, ["f", "b", opts])
    # Timed here, around the call to the peer node: its own round trip
    # (milliseconds on a loaded machine) comes on top of the 1 s.
    assert (System.monotonic_time(:millisecond) - started) in 900..1_200
    assert {:error, :node_busy} = Nodes.call(left, Ringbus, :pull, ["f"])

    # The server's batches: once one is not done, the rest are not tried.
    batches = {:push_batches, [{["c"], 1, 1}, {["d"], 1, 1}, {["e"], 1, 1}]}
    started = System.monotonic_time(:millisecond)

    assert {:ok, [{:error, :node_busy}, {:error, :node_busy}, {:error, :node_busy}]} =
             Nodes.call(left, Ringbus, :run, ["f", batches])

    assert System.monotonic_time(:millisecond) - started < 6_000

    # Not done: with a majority again, the tag is unspent and nothing was
    # pulled.
    restarted = for n <- [leader, other], do: Nodes.restart(n)
    on_exit(fn -> Nodes.stop(restarted) end)
    nodes = [left | restarted]
    :ok = Nodes.join(nodes)
    await_leader(nodes)
    assert {:ok, 1} = Nodes.call(left, Ringbus, :push, ["f", "b", opts], 15_000)
    # `left` may follow now: its ring has the push once it applies the entry.
    eventually(fn ->
      Nodes.call(left, Ringbus, :read, ["f", 0, 10]) == {:ok, [{0, "a"}, {1, "b"}], 0}
    end)
  end

  defp kill_rounds(prefix, rounds) do
    nodes = Peers.start_joined(3, prefix)

    :ok =
      Nodes.call(hd(nodes), Ringbus, :create, ["f", [replicas: 3, capacity: 1_000_000]], 30_000)

    {nodes, done} =
      Enum.reduce(1..rounds, {nodes, []}, fn round, {nodes, done} ->
        {nodes, round_done} = kill_round(nodes, round)
        {nodes, done ++ round_done}
      end)

    pushes = for {:push, id, n, result, ms} <- done, do: {id, n, result, ms}
    pulls = for {:pull, node, result, ms} <- done, do: {node, result, ms}

    slow = for {_, _, _, ms} = a <- pushes, ms > @bound_ms, do: a
    assert slow == [], "pushes over #{@bound_ms} ms: #{inspect(slow)}"
    slow = for {_, _, ms} = a <- pulls, ms > @bound_ms, do: a
    assert slow == [], "pulls over #{@bound_ms} ms: #{inspect(slow)}"

    failed = for {_, _, result, _} = a <- pushes, not match?({:ok, _}, result), do: a
    assert failed == [], "failed pushes: #{inspect(failed)}"

    failed =
      for {_, result, _} = a <- pulls, not match?({:ok, _, _}, result), result != :empty, do: a

    assert failed == [], "failed pulls: #{inspect(failed)}"

    acked = for {:acked, seq, payload} <- done, do: {seq, payload}
    pulled = for {_, {:ok, seq, payload}, _} <- pulls, do: {seq, payload}
    assert pulled -- Enum.uniq(pulled) == [], "pulled twice"
    assert pulled -- acked == [], "pulled, never acked"

    # Every acked message is on every member or was pulled, once, at the
    # seq its ack named.
    for n <- nodes do
      {:ok, messages, _pulled} = Nodes.call(n, Ringbus, :read, ["f", 0, 1_000_000], 60_000)
      held = messages ++ pulled
      assert held -- Enum.uniq(held) == [], "stored twice, or pulled and held, on #{n.node}"
      by_seq = Map.new(held)

      for {seq, payload} <- acked,
          do: assert(Map.get(by_seq, seq) == payload, "#{payload} at #{seq} on #{n.node}")
    end

    assert length(acked) > rounds * 10
    assert length(pulled) > rounds
  end

  defp kill_round(nodes, round) do
    leader = await_leader(nodes)
    followers = nodes -- [leader]

    producers =
      for n <- followers do
        id = "r#{round}-#{n.name}"
        {n, id, Nodes.call(n, TaggedProducer, :start, ["f", id])}
      end

    pullers = for n <- followers, do: {n, Nodes.call(n, Puller, :start, ["f"])}

    # Both producers have had acks from this leader.
    eventually(fn -> Enum.all?(producers, &(acked_count(&1) > 0)) end)

    Nodes.signal(leader, :kill)

    # Pushes begun in the first milliseconds after the kill, while this
    # node's Ra still names the dead leader.
    late =
      followers
      |> Enum.map(fn n ->
        Task.async(fn ->
          id = "r#{round}-late-#{n.name}"
          {n, id, Nodes.call(n, TaggedProducer, :start, ["f", id])}
        end)
      end)
      |> Enum.map(&Task.await/1)

    Process.sleep(@after_kill_ms)

    pushed =
      for {n, id, pid} <- producers ++ late,
          %{attempts: attempts, acked: acked} =
            Nodes.call(n, TaggedProducer, :stop, [pid], 40_000),
          record <-
            for({k, result, ms} <- attempts, do: {:push, id, k, result, ms}) ++
              for({_k, seq, payload} <- acked, do: {:acked, seq, payload}),
          do: record

    pulled =
      for {n, pid} <- pullers,
          {result, ms} <- Nodes.call(n, Puller, :stop, [pid], 40_000).attempts,
          do: {:pull, n.node, result, ms}

    if System.get_env("FAILOVER_REPORT") do
      push_ms = for {:push, _, _, _, ms} <- pushed, do: ms
      pull_ms = for {:pull, _, _, ms} <- pulled, do: ms

      IO.puts(
        "round #{round}: #{length(push_ms)} pushes, slowest #{Enum.max(push_ms)} ms; " <>
          "#{length(pull_ms)} pulls, slowest #{Enum.max(pull_ms)} ms"
      )
    end

    restarted = Nodes.restart(leader)
    nodes = [restarted | followers]
    on_exit(fn -> Nodes.stop([restarted]) end)
    :ok = Nodes.join(nodes)
    await_alike(nodes)
    {nodes, pushed ++ pulled}
  end

  defp acked_count({n, _id, pid}), do: Nodes.call(n, TaggedProducer, :acked, [pid])

  # The member every node names as leader, leading, with every member
  # agreeing.
  defp await_leader(nodes) do
    eventually(
      fn ->
        leaders = for n <- nodes, do: leader_of(n)

        match?([l, l, l] when l != nil, leaders) and
          role(Enum.find(nodes, &(&1.node == hd(leaders)))) == :leader
      end,
      30_000
    )

    leader = leader_of(hd(nodes))
    Enum.find(nodes, &(&1.node == leader))
  end

  defp leader_of(n) do
    case Nodes.call(n, Ringbus, :info, ["f"]) do
      {:ok, %{leader: leader}} -> leader
      _ -> nil
    end
  end

  defp role(n) do
    case Nodes.call(n, Ringbus, :info, ["f"]) do
      {:ok, %{role: role}} -> role
      _ -> nil
    end
  end

  # Every member holds the same messages (its log applied into its ring).
  defp await_alike(nodes) do
    eventually(
      fn ->
        figures =
          for n <- nodes do
            case Nodes.call(n, Ringbus, :info, ["f"]) do
              {:ok, info} -> {info.next_seq, info.len}
              other -> other
            end
          end

        match?([{_, _}, same, same], figures) and hd(figures) == List.last(figures)
      end,
      60_000
    )
  end
end
