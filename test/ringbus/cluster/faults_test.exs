defmodule Ringbus.Cluster.FaultsTest do
  # Real faults on real nodes: a node made silent with SIGSTOP and woken with
  # SIGCONT, a node killed with SIGKILL and started again. Each test starts
  # its own nodes, with a short `net_ticktime` so that nodes are declared
  # down within about two seconds. The silence and outcome tests keep the
  # default `call_timeout` (5 ms), `reply_timeout` and `busy_timeout`
  # (100 ms); the others wait
  # longer, since they check behaviour, not timing.
  # Not async: the timing assertions want the machine as quiet as it gets.
  use ExUnit.Case, async: false

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 90_000
  @ticktime 2

  # A call waits at most `call_timeout` (5 ms) for its request to leave and,
  # once it has, `reply_timeout` (100 ms) for its answer, by design. On
  # a shared, loaded 2-core machine the OS adds its own stalls to any
  # process that waits: a process sleeping 1 ms in a loop beside the load
  # has been seen to wake up to 158 ms late, and the longest call of the
  # same run was as late. So the assertions are what the design guarantees,
  # with room for that: the 99th percentile within 10 ms, and no call longer
  # than 250 ms, or than the sleeper's worst lateness plus reply_timeout
  # plus 100 ms: far from
  # what a suspended send or a connection setup costs (the rest of the
  # silence, or 7 s). The figures seen are printed with each run.
  @p99_block_us 10_000
  @max_block_us 250_000

  @patient [call_timeout: 2_000]

  defp start(count, prefix, cluster \\ @patient) do
    nodes = Nodes.start(count, prefix, net_ticktime: @ticktime, cluster: cluster)
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    nodes
  end

  defp call(n, module, fun, args, timeout \\ 10_000),
    do: Nodes.call(n, module, fun, args, timeout)

  test "a silent node blocks no caller; live nodes go on; links heal after SIGCONT" do
    [a, b, c] = start(3, "silent", [])
    :ok = call(a, Ringbus, :create, ["live", [capacity: 1_000_000, node: b.node]])
    :ok = call(a, Ringbus, :create, ["silent", [capacity: 1_000_000, node: c.node]])
    watcher = call(a, Probe, :node_watcher, [])

    silence_ms = @ticktime * 1_000 + 1_500

    load =
      Task.async(fn ->
        call(a, Probe, :timed_pushes, [["live", "silent"], silence_ms + 3_000], 60_000)
      end)

    Process.sleep(500)
    stopped = System.os_time(:microsecond)
    Nodes.signal(c, :stop)
    Process.sleep(silence_ms)
    continued = System.os_time(:microsecond)
    Nodes.signal(c, :cont)
    %{records: records, lateness_us: lateness} = Task.await(load, 60_000)

    before = for {at, _, _, _} = r <- records, at < stopped, do: r
    silent = for {at, _, _, _} = r <- records, at >= stopped and at < continued, do: r
    after_cont = for {at, _, _, _} = r <- records, at >= continued, do: r

    # From SIGSTOP on, no call waited on the silent node, to either node.
    blocks = (silent ++ after_cont) |> Enum.map(&elem(&1, 2)) |> Enum.sort()
    max_block = List.last(blocks)
    p99 = Enum.at(blocks, div(length(blocks) * 99, 100))

    outcome = fn
      {:ok, _, _} -> :ok
      {:error, reason} -> reason
    end

    results = Enum.frequencies_by(silent, fn {_, name, _, result} -> {name, outcome.(result)} end)

    IO.puts(
      "\n  silence of #{silence_ms} ms and after: #{length(blocks)} calls, " <>
        "max #{max_block} µs, p99 #{p99} µs (a 1 ms sleeper woke at worst #{lateness} µs late); " <>
        "results during the silence #{inspect(results)}"
    )

    assert p99 <= @p99_block_us
    assert max_block < max(@max_block_us, lateness + 200_000)
    assert results[{"silent", :node_busy}] > 0
    # Calls in flight when it stopped, with an unknown outcome.
    assert results[{"silent", :timeout}] > 0
    assert results[{"silent", :node_down}] > 0, "the silence outlasted net_ticktime"

    # Pushes between live nodes went on.
    rate = fn rs, from, to ->
      Enum.count(rs, &match?({_, "live", _, {:ok, _, _}}, &1)) / ((to - from) / 1_000_000)
    end

    {first_at, _, _, _} = hd(records)
    before_rate = rate.(before, first_at, stopped)
    silent_rate = rate.(silent, stopped, continued)

    IO.puts(
      "  pushes to the live node: #{round(before_rate)}/s before, #{round(silent_rate)}/s during the silence"
    )

    assert silent_rate > 0.5 * before_rate

    # After SIGCONT the nodes reconnect, and data flows to the node within 1 s of it.
    events = call(a, Probe, :node_events, [watcher])
    assert {_, :nodedown, _} = Enum.find(events, &match?({_, :nodedown, n} when n == c.node, &1))

    {reconnected, :nodeup, _} =
      Enum.find(events, &match?({at, :nodeup, n} when n == c.node and at >= continued, &1))

    {healed, _, _, _} = Enum.find(after_cont, &match?({_, "silent", _, {:ok, _, _}}, &1))

    IO.puts(
      "  nodeup #{div(reconnected - continued, 1_000)} ms after SIGCONT; " <>
        "first push accepted #{div(healed - reconnected, 1_000)} ms after the nodeup"
    )

    assert healed - reconnected < 1_000_000

    # Every message acked is readable, on both nodes.
    assert call(a, Probe, :missing, [records], 60_000) == []
    assert :ok = Nodes.await_links([a, b, c])
  end

  # Three outcomes, never a false one: a push answered with an error other
  # than `:timeout` was not stored, whatever the home node did meanwhile.
  test "a push to a stopped node: an error means not stored, :timeout means unknown" do
    [a, b] = start(2, "outcome", [])
    :ok = call(a, Ringbus, :create, ["outcome", [capacity: 1_000_000, node: b.node]])

    load =
      Task.async(fn -> call(a, Probe, :checked_pushes_for, ["outcome", 2_000, 32], 60_000) end)

    # Stopped longer than reply_timeout (100 ms), shorter than net_ticktime:
    # the pushes in flight when it stops get no answer in time.
    Process.sleep(300)
    Nodes.signal(b, :stop)
    Process.sleep(400)
    Nodes.signal(b, :cont)

    %{answers: answers, missing: missing, refused_stored: refused_stored} =
      outcome = Task.await(load, 60_000)

    IO.puts("\n  pushes around a stop of 400 ms: #{inspect(outcome, limit: 20)}")
    assert refused_stored == []
    assert missing == []
    assert answers[:timeout] > 0
    assert answers[:node_busy] > 0
    assert answers[:ok] > 0
  end

  test "a push to a stopped node sent again under its producer tag after :timeout is stored once" do
    [a, b] = start(2, "tagged", [])
    :ok = call(a, Ringbus, :create, ["tagged", [capacity: 1_000_000, node: b.node]])

    load = Task.async(fn -> call(a, Probe, :tagged_pushes_for, ["tagged", 2_000, 32], 60_000) end)

    # As above: the pushes in flight when it stops get no answer in time,
    # and are sent again until one is answered.
    Process.sleep(300)
    Nodes.signal(b, :stop)
    Process.sleep(400)
    Nodes.signal(b, :cont)

    outcome = Task.await(load, 60_000)
    IO.puts("\n  tagged pushes around a stop of 400 ms: #{inspect(outcome)}")
    assert outcome.retried_after_timeout > 0
    assert outcome.duplicated == 0
    assert outcome.missing == []
    assert Map.keys(outcome.answers) == [:ok]
  end

  test "a large push on a healthy link is not answered node_busy and stored all the same" do
    [a, b] = start(2, "large", [])
    :ok = call(a, Ringbus, :create, ["large", [capacity: 100, node: b.node]])

    outcome = call(a, Probe, :checked_pushes, ["large", 8, 3 * 1024 * 1024], 60_000)
    IO.puts("\n  pushes of 3 MB: #{inspect(outcome)}")
    assert outcome.refused_stored == []
    assert outcome.missing == []
  end

  test "a killed node's channels answer node_down, its subscribers are told, and it comes back empty" do
    [a, b, c] = start(3, "killed")
    :ok = call(b, Ringbus, :create, ["on-c", [capacity: 100, node: c.node]])
    :ok = call(b, Ringbus, :create, ["on-a", [capacity: 100, node: a.node]])
    {:ok, 0} = call(a, Ringbus, :push_many, ["on-c", ["1", "2"]])
    {:ok, subscriber, _sub} = call(a, Probe, :subscriber, ["on-c", [from: :earliest], true])
    {:ok, client} = Ringbus.Client.connect(port: call(a, Probe, :start_server, []))
    {:ok, tcp_sub} = Ringbus.Client.subscribe(client, "on-c", from: :earliest)
    assert_receive {:ringbus, ^tcp_sub, [{0, "1"}, {1, "2"}], 0}, 5_000

    Nodes.signal(c, :kill)

    assert eventually(fn -> call(a, Probe, :received, [subscriber]).closed == :node_down end)
    # Credit to a subscription of a dead node goes nowhere: not :ok.
    assert call(a, Probe, :ack, [subscriber, 1]) == {:error, :no_subscription}
    assert call(a, Ringbus, :push, ["on-c", "x"]) == {:error, :node_down}
    assert call(a, Ringbus, :subscriptions, ["on-c"]) == {:error, :node_down}
    # Still listed, with its home: the name is taken.
    assert call(b, Ringbus.Cluster, :channels, [])["on-c"] == c.node
    # Over the wire too: SUB_CLOSED node_down, and ERROR node_down.
    assert_receive {:ringbus_closed, ^tcp_sub, :node_down}, 5_000
    assert Ringbus.Client.push(client, "on-c", "x") == {:error, :node_down}
    Ringbus.Client.close(client)
    assert call(b, Ringbus, :read, ["on-c", 0, 10]) == {:error, :node_down}
    assert call(b, Ringbus, :create, ["on-c", [capacity: 5]]) == {:error, :exists}
    # The others go on.
    assert {:ok, _} = call(b, Ringbus, :push, ["on-a", "still here"])
    assert %{state: :down} = call(a, Ringbus, :cluster_info, []).links[c.node]

    # Started again under the same name: the others reconnect by themselves,
    # the directory converges, and its channels are back, empty.
    c = Nodes.restart(c)
    on_exit(fn -> Nodes.stop([c]) end)
    assert :ok = Nodes.await_links([a, b, c])

    assert eventually(fn -> call(a, Ringbus, :len, ["on-c"]) == 0 end)
    # The subscription ended with c's first incarnation, though c is back.
    assert call(a, Probe, :ack, [subscriber, 1]) == {:error, :no_subscription}
    assert call(a, Probe, :unsubscribe, [subscriber]) == {:error, :no_subscription}
    assert {:ok, %{pushed: 0, capacity: 100}} = call(b, Ringbus, :info, ["on-c"])
    assert call(a, Ringbus, :push, ["on-c", "again"]) == {:ok, 0}
    for n <- [a, b, c], do: assert(call(n, Ringbus.Cluster, :home, ["on-c"]) == {:ok, c.node})
    assert call(c, Ringbus.Cluster, :home, ["on-a"]) == {:ok, a.node}
    assert call(c, Ringbus, :read, ["on-a", 0, 1]) == {:ok, [{0, "still here"}], 0}
  end

  test "a consumer that resumes with the incarnation of before its home's restart is told so" do
    [a, b, c] = start(3, "reborn")
    :ok = call(b, Ringbus, :create, ["inc-c", [capacity: 100, node: c.node]])
    {:ok, 0} = call(a, Ringbus, :push_many, ["inc-c", ["1", "2", "3"]])
    {:ok, %{incarnation: old}} = call(a, Ringbus, :info, ["inc-c"])

    assert {:ok, [{0, "1"}, {1, "2"}, {2, "3"}], 0} =
             call(a, Ringbus, :read, ["inc-c", 0, 10, [incarnation: old]])

    Nodes.signal(c, :kill)
    c = Nodes.restart(c)
    on_exit(fn -> Nodes.stop([c]) end)
    assert :ok = Nodes.await_links([a, b, c])
    assert eventually(fn -> call(a, Ringbus, :len, ["inc-c"]) == 0 end)
    {:ok, 0} = call(b, Ringbus, :push, ["inc-c", "after"])

    # The consumer on a resumes from seq 3 of the channel it knew.
    assert call(a, Ringbus, :read, ["inc-c", 3, 10, [incarnation: old]]) ==
             {:error, :new_incarnation}

    assert call(a, Ringbus, :subscribe, ["inc-c", [from: 3, incarnation: old]]) ==
             {:error, :new_incarnation}

    {:ok, %{incarnation: new}} = call(a, Ringbus, :info, ["inc-c"])
    assert new != old

    assert {:ok, subscriber, _sub} =
             call(a, Probe, :subscriber, ["inc-c", [from: 0, incarnation: new], true])

    assert eventually(fn ->
             match?(%{batches: [{[{0, "after"}], 0}]}, call(a, Probe, :received, [subscriber]))
           end)
  end

  test "a subscriber on a silent node: its link holds what its credit allows, and lost is exact" do
    [a, b] = start(2, "flood", [max_buffer_bytes: 256 * 1024] ++ @patient)
    :ok = call(a, Ringbus, :create, ["flood", [capacity: 1_500]])
    :ok = call(a, Ringbus, :create, ["on-b", [capacity: 10, node: b.node]])

    {:ok, subscriber, _} =
      call(b, Probe, :subscriber, ["flood", [max_credit: 1_000, max_batch: 50], true])

    # While b is stopped, 3,000 messages of 8 KB: the subscription sends its
    # 1,000 of credit, 8 MB, more than the distribution buffer and the
    # sockets take (the link counts suspensions and holds the rest), and
    # stops; the ring keeps the last 1,500.
    Nodes.signal(b, :stop)
    pushed = call(a, Probe, :push_n, ["flood", 3_000, 8_192])
    assert Enum.all?(pushed, &match?({:ok, _}, &1))

    assert eventually(fn ->
             link = call(a, Ringbus, :cluster_info, []).links[b.node]
             link.suspensions > 0 and link.state == :busy
           end)

    held = call(a, Ringbus, :cluster_info, []).links[b.node]

    # A call that would wait on the full link is refused at once.
    {micros, busy} = call(a, :timer, :tc, [Ringbus, :push, ["on-b", "x"]])
    assert busy == {:error, :node_busy}
    assert micros < @max_block_us
    Nodes.signal(b, :cont)

    assert eventually(fn ->
             %{delivered: delivered, lost: lost} = call(b, Probe, :tally, [subscriber])
             delivered + lost == 3_000
           end)

    %{delivered: delivered, lost: lost, contiguous?: contiguous?, gaps: gaps, closed: nil} =
      call(b, Probe, :tally, [subscriber])

    IO.puts(
      "\n  delivered #{delivered}, lost #{lost} (#{inspect(gaps)}); " <>
        "the link while b was stopped: #{inspect(held)}"
    )

    # Every message delivered or counted, in order: typically 0..999 on
    # credit, 1,000..1,499 overwritten, then 1,500..2,999. (Where the gap
    # falls depends on when the kernel stopped b, which a loaded machine
    # may delay past a first batch.)
    assert contiguous?
    assert delivered + lost == 3_000
    assert lost > 0 and gaps != []
    # The link held at most max_buffer_bytes and the subscription's credit.
    assert held.queued_bytes <= 256 * 1024 + 1_000 * (8_192 + 100)
    assert call(a, Ringbus, :cluster_info, []).links[b.node].state == :up
  end

  test "two nodes that created one name apart keep one of them when they meet" do
    nodes = Nodes.start(2, "apart", net_ticktime: @ticktime)
    on_exit(fn -> Nodes.stop(nodes) end)
    [d, e] = nodes
    :ok = call(d, Ringbus, :create, ["twice", [capacity: 10]])
    :ok = call(e, Ringbus, :create, ["twice", [capacity: 10]])
    {:ok, 0} = call(d, Ringbus, :push, ["twice", "from d"])
    {:ok, 0} = call(e, Ringbus, :push, ["twice", "from e"])

    :ok = Nodes.join(nodes)

    assert eventually(fn ->
             homes = for n <- nodes, do: call(n, Ringbus.Cluster, :home, ["twice"])
             match?([{:ok, h}, {:ok, h}], homes)
           end)

    {:ok, winner} = call(d, Ringbus.Cluster, :home, ["twice"])
    [loser] = Enum.reject(nodes, &(&1.node == winner))
    refute "twice" in call(loser, Ringbus, :channels, [])
    expected = if winner == d.node, do: "from d", else: "from e"
    assert call(loser, Ringbus, :read, ["twice", 0, 10]) == {:ok, [{0, expected}], 0}
  end

  defp eventually(check),
    do: Nodes.wait_until(System.monotonic_time(:millisecond) + 15_000, check) == :ok
end
