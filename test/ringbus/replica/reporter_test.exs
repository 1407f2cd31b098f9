defmodule Ringbus.Replica.ReporterTest do
  # Each member of a replicated channel as every node sees it, on real
  # nodes (`:peer`): `Ringbus.info/1`'s `:replication`,
  # `Ringbus.cluster_info/0`, `/metrics` (checked by promtool) and the
  # status views; a silent member turns unknown and a killed one down,
  # without a read waiting on either.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.Peers
  alias Ringbus.HTTP.{StatusPage, StatusText}
  alias Ringbus.Metrics.Status
  alias Ringbus.Test.Promtool
  alias Ringbus.Test.Internals
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 180_000

  defp eventually(check), do: Peers.eventually(check, 20_000)

  defp replication(n, name \\ "obs") do
    {:ok, info} = Nodes.call(n, Ringbus, :info, [name])
    Map.new(info.replication, &{&1.node, &1})
  end

  defp now, do: System.monotonic_time(:millisecond)

  # How `n` shows `member`, read over and over until it shows it unknown.
  defp watch_until_unknown(n, member, deadline) do
    m = replication(n)[member]

    cond do
      m.role == :unknown -> [m]
      System.monotonic_time(:millisecond) > deadline -> flunk("#{member} never turned unknown")
      true -> [m | watch_until_unknown(n, member, deadline)]
    end
  end

  test "every node shows each member's role, term, indexes, lag and disk, and exports its own" do
    nodes = Peers.start_joined(3, "replica_obs")
    [a | _] = nodes
    names = Enum.map(nodes, & &1.node)

    :ok = Nodes.call(a, Ringbus, :create, ["obs", [replicas: 3, capacity: 1000]], 30_000)
    assert {:ok, _} = Nodes.call(a, Ringbus, :push_many, ["obs", ["a", "b", "c"]])

    # Once the reports have gone round (and Ra's figures have ticked),
    # every node sees one leader and two followers in one term, each caught
    # up with every push applied.
    for n <- nodes do
      eventually(fn ->
        members = replication(n)
        values = Map.values(members)

        Enum.sort(Map.keys(members)) == Enum.sort(names) and
          Enum.frequencies(Enum.map(values, & &1.role)) == %{leader: 1, follower: 2} and
          match?([t] when t >= 1, Enum.uniq(Enum.map(values, & &1.term))) and
          Enum.all?(values, fn m ->
            match?(%{lag_entries: 0, lag_ms: 0, applied_seq: 2}, m) and
              m.applied_index == m.commit_index and m.applied_index > 0
          end)
      end)
    end

    members = replication(a)
    [term] = members |> Map.values() |> Enum.map(& &1.term) |> Enum.uniq()

    for m <- Map.values(members) do
      assert is_integer(m.elections) and m.log_bytes > 0 and m.snapshot_bytes >= 0
      assert m.segment_bytes >= 0 and m.segment_bytes + m.snapshot_bytes <= m.log_bytes
      # Its node's WAL and Ra's ETS tables, shared by the node's channels;
      # its own entries in memory, which are among the latter.
      assert m.wal_bytes > 0 and m.ets_bytes > 0
      assert m.mem_bytes > 0 and m.mem_bytes < m.ets_bytes
    end

    # cluster_info/0 lists the channel with the same members.
    %{replicas: [%{channel: "obs", members: listed}]} = Nodes.call(a, Ringbus, :cluster_info, [])
    assert Enum.sort(Enum.map(listed, & &1.node)) == Enum.sort(names)

    # /metrics: this node's member only, labelled by channel, and promtool accepts it.
    for n <- nodes do
      text = IO.iodata_to_binary(Nodes.call(n, Ringbus.Metrics, :prometheus, []))
      assert {"", 0} = Promtool.check(text)
      role = members[n.node].role

      assert text =~ ~s(ringbus_replica_role{channel="obs",role="#{role}"} 1\n)
      assert text =~ ~s(ringbus_replica_term{channel="obs"} #{term}\n)
      assert [_] = Regex.scan(~r/^ringbus_replica_term\{/m, text)

      for family <-
            ~w(commit_index applied_index lag_entries lag_seconds elections_total snapshot_bytes log_bytes) ++
              ~w(segment_bytes mem_bytes),
          do: assert(text =~ ~r/^ringbus_replica_#{family}\{channel="obs"\} \d/m)

      # The node's own, once, with no channel.
      for family <- ~w(wal_bytes ets_bytes) do
        assert [[_, n]] = Regex.scan(~r/^ringbus_replica_#{family} (\d+)\n/m, text)
        assert String.to_integer(n) > 0
      end
    end

    # The status views: a row per member.
    status = Status.build(Nodes.call(a, Ringbus.Metrics, :snapshot, []), %{}, 1000)
    assert length(status.replicas) == 3
    html = IO.iodata_to_binary(StatusPage.render(status))
    assert html =~ ~s(<table id="replicas">)

    for n <- names,
        do:
          assert(
            html =~
              ~r{<td class="name">obs</td><td class="name">#{n}</td><td class="name">(leader|follower)</td>}
          )

    json = IO.iodata_to_binary(Ringbus.HTTP.JSON.encode(status))

    assert [_, _, _] =
             Regex.scan(~r/\{[^{}]*"channel":"obs"[^{}]*"role":"(leader|follower)"/, json)

    assert html =~ ~s(<th>node wal</th><th>node ets</th>)
    assert json =~ ~r/"wal_bytes":[1-9]/ and json =~ ~r/"ets_bytes":[1-9]/

    text = IO.iodata_to_binary(StatusText.render(status))
    assert text =~ ~r/^CHANNEL +NODE +ROLE +TERM +COMMIT +APPLIED.* NODE_WAL +NODE_ETS$/m

    for n <- names,
        do: assert(text =~ ~r/^obs +#{Regex.escape(to_string(n))} +(leader|follower) +#{term} /m)

    # A follower goes silent (SIGSTOP): the others show it unknown once its
    # last report is older than two periods (2 s), never before, and
    # reading info never waits on it.
    leader = Enum.find(nodes, &(members[&1.node].role == :leader))
    [f, g] = nodes -- [leader]
    Nodes.signal(f, :stop)
    seen = watch_until_unknown(leader, f.node, System.monotonic_time(:millisecond) + 20_000)
    {known, [unknown | _]} = Enum.split_while(seen, &(&1.role != :unknown))
    oldest_known = known |> Enum.map(& &1.age_ms) |> Enum.max(fn -> 0 end)
    assert oldest_known <= 2_000, "shown #{oldest_known} ms after its last report"
    assert unknown.age_ms > 2_000 and unknown.age_ms < 3_000
    assert %{term: nil, lag_entries: nil, lag_ms: nil, applied_index: nil} = unknown
    assert %{term: nil, lag_entries: nil} = replication(g)[f.node]
    Nodes.signal(f, :cont)
    eventually(fn -> replication(leader)[f.node].role == :follower end)

    # The leader's node is killed: the others show it down and elect a new
    # leader, an election each saw.
    Nodes.signal(leader, :kill)

    for n <- [f, g] do
      eventually(fn ->
        m = replication(n)

        m[leader.node].role == :down and
          Enum.sort([m[f.node].role, m[g.node].role]) == [:follower, :leader] and
          m[n.node].elections >= 1 and m[n.node].term > term
      end)
    end

    text = IO.iodata_to_binary(Nodes.call(f, Ringbus.Metrics, :prometheus, []))
    assert text =~ ~r/^ringbus_replica_elections_total\{channel="obs"\} [1-9]/m
  end

  test "lag: the age of the oldest committed entry a member lacks, under steady load and stalled" do
    nodes = Peers.start_joined(3, "replica_lag")
    [a | _] = nodes
    :ok = Nodes.call(a, Ringbus, :create, ["lag", [replicas: 3, capacity: 100_000]], 30_000)

    eventually(fn ->
      roles = Enum.map(Map.values(replication(a, "lag")), & &1.role)
      Enum.frequencies(roles) == %{leader: 1, follower: 2}
    end)

    leader = Enum.find(nodes, &(replication(a, "lag")[&1.node].role == :leader))
    [f, g] = nodes -- [leader]
    server = Nodes.call(leader, Internals, :ra_server, ["lag"])

    # A steady load through g: 5 messages every 10 ms.
    pusher = Nodes.call(g, Probe, :steady_pusher, ["lag", 5, 10])
    on_exit(fn -> Nodes.call(g, Kernel, :send, [pusher, :stop]) end)

    # Every member keeps up, and every node says so for three seconds: a lag
    # within the figures' resolution (a report period and Ra's tick), that
    # does not climb.
    eventually(fn -> all_keeping_up?(nodes) end)
    keeping_up_for!(nodes, now() + 3_000)

    # A follower's Raft server stalls: its lag grows with the time, on every
    # node, its own included (its node still reports). The others keep up.
    :ok = Nodes.call(f, :sys, :suspend, [server])
    stalled_at = now()
    stalled!(nodes, f, g, stalled_at)
    :ok = Nodes.call(f, :sys, :resume, [server])
    eventually(fn -> all_keeping_up?(nodes) end)

    # The leader's server stalls. Ra's followers wait on a leader whose node
    # is up, so f stands; the ex-leader's Ra still says it leads, in the old
    # term, and finds nobody behind. Every node shows it falling behind,
    # its own too, as the new leader's node computes it.
    :ok = Nodes.call(leader, :sys, :suspend, [server])
    stalled_at = now()
    :ok = Nodes.call(f, :ra, :trigger_election, [{server, f.node}])

    eventually(fn ->
      m = replication(g, "lag")
      m[f.node].role == :leader or m[g.node].role == :leader
    end)

    new_leader = if replication(g, "lag")[f.node].role == :leader, do: f, else: g
    stalled!(nodes, leader, new_leader, stalled_at)

    m = replication(g, "lag")
    assert %{role: :leader, term: old_term} = m[leader.node]
    assert m[new_leader.node].term > old_term

    # Once it runs again it follows the new leader and catches up.
    :ok = Nodes.call(leader, :sys, :resume, [server])

    eventually(fn ->
      replication(g, "lag")[leader.node].role == :follower and all_keeping_up?(nodes)
    end)
  end

  # Every node shows every member with a lag under 2.5 s (a report period,
  # Ra's tick, and room for a busy machine).
  defp all_keeping_up?(nodes) do
    Enum.all?(nodes, fn n ->
      Enum.all?(Map.values(replication(n, "lag")), fn m ->
        is_integer(m.lag_ms) and m.lag_ms <= 2_500 and is_integer(m.lag_entries)
      end)
    end)
  end

  defp keeping_up_for!(nodes, until) do
    if now() < until do
      for n <- nodes, m <- Map.values(replication(n, "lag")) do
        assert is_integer(m.lag_ms) and m.lag_ms <= 2_500,
               "#{n.node} shows #{m.node} #{m.lag_ms} ms behind under steady load"
      end

      keeping_up_for!(nodes, until)
    end
  end

  # `stalled`'s lag reaches 4 s on `healthy`'s node within 8 s of its stall
  # and never reads more than the time since plus what a member keeping up
  # may show (the entries it lacked at the stall were committed up to a
  # report period and Ra's tick before it); every node shows it behind, and
  # `healthy` keeping up.
  defp stalled!(nodes, stalled, healthy, stalled_at) do
    Peers.eventually(fn -> replication(healthy, "lag")[stalled.node].lag_ms >= 4_000 end, 20_000)
    elapsed = now() - stalled_at
    assert elapsed <= 8_000, "its lag reached 4 s #{elapsed} ms after it stalled"

    for n <- nodes do
      m = replication(n, "lag")
      lag = m[stalled.node].lag_ms
      assert lag >= 3_000 and lag <= now() - stalled_at + 2_500, "#{n.node} shows #{lag} ms"
      assert m[stalled.node].lag_entries > 0
      assert m[healthy.node].lag_ms <= 2_500
    end
  end
end
