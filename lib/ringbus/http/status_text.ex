defmodule Ringbus.HTTP.StatusText do
  @moduledoc false
  # `/status.txt`, which `Ringbus.Release.stats/1` and `mix ringbus.stats`
  # print: the status (`Ringbus.Metrics.Status`) as tables a person reads
  # in a terminal, one row per channel and per server. Pure.

  import Ringbus.HTTP.Units

  @spec render(map()) :: iodata()
  def render(s) do
    vm = s.vm

    [
      "Ringbus #{s.version} on #{s.node}, up #{duration(s.uptime_seconds)}, #{s.generated_at}\n",
      "VM: memory #{bytes(vm.memory_bytes)}, #{vm.processes} processes, ",
      "run queue #{vm.run_queue}, #{vm.gc_runs} GCs\n\n",
      channels(s.channels),
      "\n",
      replicas(Map.get(s, :replicas, [])),
      subscriptions(s.subscriptions),
      "\n",
      channel_groups(s),
      "\n",
      groups(s.groups),
      "\n",
      servers(s.servers),
      "\n",
      cluster(s.cluster)
    ]
  end

  defp channels([]), do: "No channels.\n"

  defp channels(channels) do
    table(
      ~w(CHANNEL LEN CAPACITY HELD PUSHED PULLED OVERWRITTEN REJECTED PUSH/S PULL/S SUBS MAX_LAG LOST),
      for c <- channels do
        [c.name, c.len, c.capacity, bytes(c.held_bytes), c.pushed, c.pulled, c.overwritten] ++
          [c.rejected, last(c.push_rate), last(c.pull_rate), c.subscriptions, c.max_lag, c.lost]
      end
    )
  end

  # Only a node with replicated channels has this table.
  defp replicas([]), do: []

  defp replicas(members) do
    [
      table(
        ~w(CHANNEL NODE ROLE TERM COMMIT APPLIED APPLIED_SEQ LAG LAG_S ELECTIONS SNAPSHOT LOG) ++
          ~w(SEGMENTS MEM NODE_WAL NODE_ETS),
        for m <- members do
          [m.channel, m.node, m.role, m.term, m.commit_index, m.applied_index, m.applied_seq] ++
            [
              m.lag_entries,
              m.lag_seconds,
              m.elections,
              bytes(m.snapshot_bytes),
              bytes(m.log_bytes),
              bytes(m[:segment_bytes]),
              bytes(m[:mem_bytes]),
              bytes(m[:wal_bytes]),
              bytes(m[:ets_bytes])
            ]
        end
      ),
      "\n"
    ]
  end

  defp subscriptions([]), do: "No subscriptions.\n"

  defp subscriptions(subs) do
    table(
      ~w(CHANNEL SUBSCRIBER VIA LAG CREDIT LOST),
      for(s <- subs, do: [s.channel, s.subscriber, s.via, s.lag, s.credit, s.lost])
    )
  end

  defp channel_groups(%{channel_groups: [], group_omitted: %{groups: 0}}),
    do: "No consumer groups.\n"

  defp channel_groups(%{channel_groups: groups, group_consumers: consumers} = s) do
    [
      table(
        ~w(CHANNEL GROUP DELIVERED PENDING LAG ACKED REDELIVERED DEAD LOST HELD CONSUMERS),
        for g <- groups do
          [g.channel, g.group, g.delivered, g.pending, g.lag, g.acked, g.redelivered, g.dead] ++
            [g.lost, g.held, g.consumers]
        end
      ),
      omitted(s.group_omitted),
      "\n",
      table(
        ~w(CHANNEL GROUP CONSUMER PENDING IDLE),
        for(k <- consumers, do: [k.channel, k.group, k.consumer, k.pending, idle(k.idle_ms)])
      )
    ]
  end

  defp omitted(%{groups: 0, consumers: 0}), do: []

  defp omitted(%{groups: groups, consumers: consumers}),
    do: "Past the bounds: #{groups} groups and #{consumers} consumers not shown.\n"

  defp groups([]), do: "No RESP consumer groups.\n"

  defp groups(groups) do
    table(
      ~w(STREAM GROUP PORT CONSUMERS PENDING LAG MAX_IDLE LOST DROPPED),
      for g <- groups do
        [g.stream, g.group, g.port, g.consumers, g.pending, g.lag, idle(g.idle_ms), g.lost] ++
          [g.dropped]
      end
    )
  end

  defp servers([]), do: "No server listening.\n"

  defp servers(servers) do
    table(
      ~w(SERVER OPEN HANDSHAKING ACCEPTED REFUSED FRAMES_IN FRAMES_OUT BYTES_IN BYTES_OUT ERRORS),
      for s <- servers do
        ["#{s.protocol}:#{s.port}", s.open, s.handshaking, s.accepted, s.refused, s.frames_in] ++
          [s.frames_out, bytes(s.bytes_in), bytes(s.bytes_out), s.errors]
      end
    )
  end

  defp cluster(nil), do: "Not in a cluster.\n"

  defp cluster(%{members: members, links: links}) do
    [
      "Cluster members: #{Enum.join(members, ", ")}\n",
      table(
        ~w(NODE STATE QUEUED BATCHES DROPS SUSPENSIONS CALLS_OK REFUSED TIMEOUT),
        for(
          l <- links,
          do:
            [l.node, l.state, bytes(l.queued_bytes), l.batches, l.drops, l.suspensions] ++
              [l.calls_ok, l.calls_refused, l.calls_timeout]
        )
      )
    ]
  end

  defp last([]), do: 0.0
  defp last(rates), do: List.last(rates)

  # The first column to the left, the others to the right, each as wide as
  # its widest cell.
  defp table(header, rows) do
    rows = Enum.map([header | rows], fn row -> Enum.map(row, &cell/1) end)

    widths =
      rows
      |> Enum.zip_with(& &1)
      |> Enum.map(fn column -> column |> Enum.map(&String.length/1) |> Enum.max() end)

    for [first | rest] <- rows do
      [w | ws] = widths
      cells = Enum.zip_with(rest, ws, &String.pad_leading(&1, &2))
      [Enum.join([String.pad_trailing(first, w) | cells], "  "), "\n"]
    end
  end

  defp cell(nil), do: "-"
  defp cell(value), do: to_string(value)
end
