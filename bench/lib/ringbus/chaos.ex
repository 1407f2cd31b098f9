defmodule Ringbus.Chaos do
  @moduledoc """
  A Jepsen-style run: real nodes, clients that record a history, a nemesis
  that stalls, kills and partitions nodes on a seeded schedule, and a
  checker that reads the history against every channel's final state.

  Four peer nodes (`Ringbus.Test.Nodes`): two client nodes, which
  run the producers and consumers (`Ringbus.Chaos.Workload`) and keep the
  histories, and two home nodes. Channels:

    * `h1.drop`, `h2.drop` - drop-oldest, on the home nodes;
    * `h1.reject` - reject, on the first home node, emptied by a puller;
    * `c2.drop` - drop-oldest, on the second client node;
    * `c2.group` - drop-oldest, on the second client node, with a
      consumer group (`Ringbus.Groups`, dead letters to `c2.dead`) whose
      consumers (`Ringbus.Chaos.GroupConsumer`) run on both client nodes.

  The nemesis (`Ringbus.Chaos.Nemesis`) stalls and partitions any node but
  kills only the home nodes, whose channels live in memory: what was acked
  on them before a kill is counted apart, as lost to a crash. When the
  time is up, every fault is healed, the links come back, the consumers
  drain, the channels are read at their homes and the histories collected;
  every node is then stopped by its peer.

      %{report: report, table: table} = Ringbus.Chaos.run(seconds: 20, seed: 1)

  With `channels: :replicated`, the run is on durable channels of three
  replicas instead: three member nodes, which the nemesis stalls and
  restarts all at once, and whose leaders it stalls, kills and
  partitions; and a client node, never struck, whose producers push under
  producer tags through the members and retry until acked. The channels
  are read on every member once their logs are applied alike, and the
  group of `r1.drop` (its consumers on the client node, through the
  members) on every member; the
  result adds `:divergent`, the `{channel, node}` whose messages differ
  from the leader's, and `:stuck`, the `{channel, node}` through which a
  push got no answer in 15 s after the final reads (docs/FAULTS.md,
  "Replicated channels").

  Options: `:seconds` (of faults, default 20), `:seed` (default 1),
  `:net_ticktime` (default 2), `:cluster` (Ringbus's cluster options on
  every node; the defaults, so `call_timeout` is 5 ms), `:max_history`
  (entries per client node, default 1,000,000), `:tagged` (whether the
  producers of memory channels tag their pushes with producer ids, so that
  a retry after `:timeout` stores no copy; default true), `:channels`
  (`:memory`, the default, or `:replicated`, whose producers always tag).
  """

  alias Ringbus.Test.Nodes
  alias Ringbus.Chaos.{Checker, History, Nemesis, Workload}

  @history :ringbus_chaos_history
  @group "workers"

  @doc "Runs the chaos test; returns the checker's report, its table, the faults and the ops."
  @spec run(keyword()) :: %{
          report: Checker.report(),
          table: String.t(),
          faults: [{integer(), Nemesis.step()}],
          ops: map(),
          seed: integer()
        }
  def run(opts) do
    opts =
      Keyword.validate!(opts,
        seconds: 20,
        seed: 1,
        net_ticktime: 2,
        cluster: [],
        max_history: 1_000_000,
        tagged: true,
        channels: :memory
      )

    started = Nodes.start(4, "chaos", net_ticktime: opts[:net_ticktime], cluster: opts[:cluster])
    reaper = reaper(self(), started)

    try do
      case opts[:channels] do
        :memory -> run(started, opts, reaper)
        :replicated -> run_replicated(started, opts, reaper)
      end
    after
      ref = Process.monitor(reaper)
      send(reaper, :stop)

      receive do
        {:DOWN, ^ref, _, _, _} -> :ok
      end
    end
  end

  defp run(started, opts, reaper) do
    [c1, c2, h1, h2] = started
    :ok = Nodes.join(started, 30_000)

    channels = [
      {"h1.drop", h1, [capacity: 2_000, max_bytes: 8_000_000]},
      {"h2.drop", h2, [capacity: 2_000, max_bytes: 8_000_000]},
      {"h1.reject", h1, [capacity: 500, overflow: :reject, max_bytes: 8_000_000]},
      {"c2.drop", c2, [capacity: 2_000, max_bytes: 8_000_000]},
      # Room for every message of a default run, the large ones aside: the
      # group's `lost` counts what the ring overwrites before it delivers.
      {"c2.group", c2, [capacity: 100_000, max_bytes: 64_000_000]}
    ]

    for {name, home, ch_opts} <- channels,
        do: :ok = Nodes.call(c1, Ringbus, :create, [name, ch_opts ++ [node: home.node]])

    :ok = create_group(c1, "c2.group", c2)

    names = for {name, _, _} <- channels, do: name
    ms = opts[:seconds] * 1_000
    until = System.os_time(:millisecond) + ms

    clients = [
      {c1, [{1, names}, {2, names}],
       [{101, :subscribe, "h2.drop"}, {102, :subscribe, "c2.drop"}, {103, :read, "h1.drop"}],
       [{111, "c2.group", @group}, {112, "c2.group", @group}]},
      {c2, [{3, names}, {4, names}],
       [{201, :subscribe, "h1.drop"}, {202, :pull, "h1.reject"}, {203, :read, "h2.drop"}],
       [{211, "c2.group", @group}, {212, "c2.group", @group}]}
    ]

    loads =
      for {node, producers, consumers, group_consumers} <- clients do
        %History{} = Nodes.call(node, History, :new, [opts[:max_history], @history])

        spec = %{
          history: @history,
          producers: producers,
          consumers: consumers,
          group_consumers: group_consumers,
          seed: opts[:seed],
          until: until,
          tagged: opts[:tagged]
        }

        {node, async(fn -> Nodes.call(node, Workload, :run, [spec], ms + 120_000) end)}
      end

    steps = Nemesis.schedule(opts[:seed], Enum.map(started, & &1.name), [h1.name, h2.name], ms)
    by_name = Map.new(started, &{&1.name, &1})
    on_restart = fn node -> send(reaper, {:node, node}) end
    {by_name, restarts, faults} = Nemesis.run(steps, by_name, until, on_restart)
    nodes = for n <- started, do: Map.fetch!(by_name, n.name)
    links = Nodes.await_links(nodes, 60_000)
    ops = Map.new(loads, fn {node, load} -> {node.name, await(load)} end)

    finals =
      Map.new(channels, fn {name, home, _} ->
        home = Map.fetch!(by_name, home.name)
        final = Nodes.call(home, Workload, :final, [name], 60_000)
        {name, Map.put(final, :restarts, Map.get(restarts, home.name, []))}
      end)

    c2 = Map.fetch!(by_name, c2.name)
    groups = %{{"c2.group", @group} => group_final([c2], c2, "c2.group")}

    history =
      Enum.flat_map(loads, fn {node, _} -> history(node) end)
      # Stable: each node's entries stay in the order they were recorded.
      |> Enum.sort_by(&elem(&1, 4))

    report = Checker.check(history, finals, groups)

    %{
      report: report,
      table: Checker.table(report) <> "\n" <> summary(faults, links, history),
      faults: faults,
      ops: ops,
      seed: opts[:seed]
    }
  end

  defp run_replicated([client | members], opts, reaper) do
    [r1, r2, r3] = members
    :ok = Nodes.join(members, 30_000)

    # Created before the client's node connects to any member, so that each
    # channel's three members are the three member nodes.
    # r1.drop holds every message of a run, so that each ack is checked
    # against the seq it named; r2.drop overwrites.
    channels = [
      {"r1.drop", r1, [capacity: 50_000, max_bytes: 32_000_000]},
      {"r2.drop", r2, [capacity: 1_000, max_bytes: 8_000_000]},
      {"r3.reject", r3, [capacity: 500, overflow: :reject, max_bytes: 8_000_000]}
    ]

    for {name, creator, ch_opts} <- channels,
        do: :ok = Nodes.call(creator, Ringbus, :create, [name, [replicas: 3] ++ ch_opts], 30_000)

    # The group of r1.drop, whose ring holds every message of a run.
    :ok = create_group(r1, "r1.drop", r1, replicas: 3)

    names = for {name, _, _} <- channels, do: name
    member_nodes = Enum.map(members, & &1.node)
    ms = opts[:seconds] * 1_000
    until = System.os_time(:millisecond) + ms
    %History{} = Nodes.call(client, History, :new, [opts[:max_history], @history])

    spec = %{
      history: @history,
      producers: for(id <- 1..4, do: {id, names}),
      consumers: [
        {101, :subscribe, "r1.drop"},
        {102, :subscribe, "r2.drop"},
        {103, :read, "r1.drop"},
        {104, :read, "r2.drop"},
        {105, :pull, "r3.reject"}
      ],
      group_consumers: for(id <- 106..108, do: {id, "r1.drop", @group}),
      seed: opts[:seed],
      until: until,
      members: Map.new(names, &{&1, member_nodes}),
      # Until acked: the tag makes every retry of an unknown outcome safe.
      retries: 30,
      push_timeout: 1_000,
      large_bytes: 200_000
    }

    load = async(fn -> Nodes.call(client, Workload, :run, [spec], ms + 120_000) end)
    steps = Nemesis.schedule_replicated(opts[:seed], Enum.map(members, & &1.name), names, ms)
    on_restart = fn node -> send(reaper, {:node, node}) end
    by_name = Map.new(members, &{&1.name, &1})
    {by_name, _restarts, faults} = Nemesis.run(steps, by_name, until, on_restart)
    members = for n <- members, do: Map.fetch!(by_name, n.name)
    links = Nodes.await_links(members, 60_000)
    ops = %{client.name => await(load)}

    # Durable channels have one incarnation: no restart excuses a loss.
    {finals, divergent} =
      Enum.reduce(names, {%{}, []}, fn name, {finals, divergent} ->
        {final, others} = replicated_final(members, name)
        {Map.put(finals, name, Map.put(final, :restarts, [])), divergent ++ others}
      end)

    # The group's figures before the pushes below, which its consumers,
    # stopped by then, would count as lag.
    leader = Enum.find(members, hd(members), &leader?(&1, "r1.drop"))
    groups = %{{"r1.drop", @group} => group_final(members, leader, "r1.drop")}
    # After the final reads: a push through each member's writer answers.
    stuck = for {name, _, _} <- channels, n <- members, not answers?(n, name), do: {name, n.name}
    history = history(client)

    report = Checker.check(history, finals, groups)

    %{
      report: report,
      table:
        Checker.table(report) <>
          "\n" <>
          summary(faults, links, history) <>
          "\nfailed and unknown push attempts by reason: #{inspect(reasons(history))}" <>
          "; replicas unlike the leader's: #{inspect(divergent)}" <>
          "; members whose writer answered no push after healing: #{inspect(stuck)}",
      faults: faults,
      ops: ops,
      seed: opts[:seed],
      divergent: divergent,
      stuck: stuck
    }
  end

  # The group every run's consumers share, with a dead-letter channel
  # beside its channel (not one the producers push to, nor the checker
  # reads: its payloads are dead letters). A short `ack_wait`, so that
  # messages held by a stalled consumer come back within the run.
  defp create_group(node, ch, home, dead_opts \\ []) do
    dead = ch <> ".dead"
    dead_opts = if dead_opts == [], do: [node: home.node], else: dead_opts
    :ok = Nodes.call(node, Ringbus, :create, [dead, [capacity: 10_000] ++ dead_opts], 30_000)
    group_opts = [from: :earliest, ack_wait: 2_000, max_deliver: 6, dead_letter: dead]
    Nodes.call(node, Ringbus.Groups, :create, [ch, @group, group_opts])
  end

  # The group as `reference` sees it, and as each of `nodes` does.
  defp group_final(nodes, reference, ch) do
    view = fn node ->
      case Nodes.call(node, Ringbus.Groups, :info, [ch], 30_000) do
        {:ok, groups} -> Enum.find(groups, &(&1.name == @group))
        error -> error
      end
    end

    views = for n <- nodes, do: {n.name, view.(n)}
    %{figures: :proplists.get_value(reference.name, views), views: views}
  end

  defp leader?(node, ch),
    do: match?({:ok, %{role: :leader}}, Nodes.call(node, Ringbus, :info, [ch]))

  # The channel's final state on its leader, once every member has applied
  # the same log (the same next seq and length on two reads 500 ms apart),
  # and the members whose messages differ from the leader's.
  defp replicated_final(members, name) do
    deadline = System.monotonic_time(:millisecond) + 60_000
    _ = Nodes.wait_until(deadline, fn -> settled?(members, name) end)

    finals = for n <- members, do: {n, Nodes.call(n, Workload, :final, [name], 60_000)}

    {leader, final} =
      Enum.find(finals, hd(finals), fn {_, f} -> match?(%{info: %{role: :leader}}, f) end)

    divergent =
      for {n, f} <- finals,
          n != leader,
          f.messages != final.messages or f.info == nil,
          do: {name, n.name}

    {final, divergent}
  end

  # Whether a push through `node` gets an answer (`:full` is one) within
  # 15 s: a writer that holds its commands for ever answers only timeouts.
  defp answers?(node, name) do
    deadline = System.monotonic_time(:millisecond) + 15_000
    opts = [producer: {{:probe, node.name}, 1}, timeout: 2_000]

    :ok ==
      Nodes.wait_until(deadline, fn ->
        Nodes.call(node, Ringbus, :push, [name, "probe", opts], 5_000) != {:error, :timeout}
      end)
  end

  defp reasons(history) do
    history
    |> Enum.filter(
      &match?({_, type, op, _, _} when type != :ok and op in [:push, :push_many], &1)
    )
    |> Enum.filter(&match?({_, _, _, {_, _, _}, _}, &1))
    |> Enum.frequencies_by(fn {_, _, _, {_, _, reason}, _} -> reason end)
  end

  defp settled?(members, name) do
    first = positions(members, name)
    Process.sleep(500)
    first != :unsettled and first == positions(members, name)
  end

  defp positions(members, name) do
    infos = for n <- members, do: Nodes.call(n, Ringbus, :info, [name])

    with true <- Enum.all?(infos, &match?({:ok, _}, &1)),
         true <- Enum.any?(infos, &match?({:ok, %{role: :leader}}, &1)),
         [position] <- infos |> Enum.map(fn {:ok, i} -> {i.next_seq, i.len} end) |> Enum.uniq() do
      position
    else
      _ -> :unsettled
    end
  end

  # The history a client node recorded, through a file: it may be large.
  defp history(node) do
    path = Path.join(System.tmp_dir!(), "ringbus_chaos_#{System.unique_integer([:positive])}")

    try do
      Nodes.call(node, Workload, :dump, [@history, path], 60_000)
      History.load(path)
    after
      File.rm(path)
    end
  end

  # Not a Task: a crash in it raises here, so that the reaper is told.
  defp async(fun) do
    spawn_monitor(fn -> exit({:done, fun.()}) end)
  end

  defp await({_pid, ref}) do
    receive do
      {:DOWN, ^ref, _, _, {:done, result}} -> result
      {:DOWN, ^ref, _, _, reason} -> raise "a client node's workload failed: #{inspect(reason)}"
    end
  end

  # A process that outlives the run's caller, whatever its end: it stops
  # every node (restarted ones included) when told or when the caller dies,
  # so that no node is left running, or stopped with SIGSTOP, behind it.
  defp reaper(caller, nodes) do
    spawn(fn ->
      ref = Process.monitor(caller)
      reap(ref, Map.new(nodes, &{&1.name, &1}))
    end)
  end

  defp reap(ref, nodes) do
    receive do
      {:node, node} ->
        reap(ref, Map.put(nodes, node.name, node))

      msg when msg == :stop or elem(msg, 0) == :DOWN ->
        nodes = Map.values(nodes)
        Nodes.stop(nodes)

        # A node that outlived its peer is killed by its OS pid, if that pid
        # is still this node's (a killed node's pid may have been reused).
        for %{os_pid: os_pid, name: name} <- nodes,
            {:ok, cmdline} <- [File.read("/proc/#{os_pid}/cmdline")],
            String.contains?(cmdline, "#{name}@"),
            do: System.cmd("kill", ["-KILL", os_pid], stderr_to_stdout: true)

        :ok
    end
  end

  defp summary(faults, links, history) do
    kinds =
      Enum.frequencies_by(faults, fn {_, step} -> fault_name(step) end) |> Map.delete(:pause)

    "faults: " <>
      Enum.map_join(Enum.sort(kinds), ", ", fn {k, n} -> "#{k} #{n}" end) <>
      "; history: #{Enum.count(history)} entries; links after healing: #{inspect(links)}"
  end

  defp fault_name({:stall, _, ms}) when ms < 1_000, do: :short_stall
  defp fault_name({:stall, _, _}), do: :long_stall
  defp fault_name(step), do: elem(step, 0)
end
