defmodule Ringbus.Metrics.Prometheus do
  @moduledoc false
  # Renders a `Ringbus.Metrics` snapshot in the Prometheus text format
  # (version 0.0.4): for each family with samples, a HELP line, a TYPE line
  # and its samples. Pure: a snapshot in, iodata out.
  #
  # A source of figures is one function here, `samples(section, snapshot)`,
  # which returns `{family, labels, value}` triples (or `{family, name,
  # labels, value}` for a histogram's `_bucket`, `_sum` and `_count`), and
  # its families in `@families`. A value that is not a number (a figure a subscription did
  # not give in time, a field an older info map lacks) is left out.

  # {name, type, help, labels}, in the order they are written.
  @families [
    # Channels: Ringbus.info/1, by field name.
    {"ringbus_channel_len", :gauge, "Messages the channel holds now.", ~w(channel)},
    {"ringbus_channel_capacity", :gauge, "The most messages the channel holds.", ~w(channel)},
    {"ringbus_channel_held_bytes", :gauge, "Payload bytes the channel holds now.", ~w(channel)},
    {"ringbus_channel_max_bytes", :gauge,
     "The most payload bytes the channel holds, for a channel with that bound.", ~w(channel)},
    {"ringbus_channel_pushed_total", :counter, "Messages the channel took in.", ~w(channel)},
    {"ringbus_channel_pushed_bytes_total", :counter, "Payload bytes the channel took in.",
     ~w(channel)},
    {"ringbus_channel_pulled_total", :counter, "Messages handed out by pull.", ~w(channel)},
    {"ringbus_channel_overwritten_total", :counter,
     "Messages dropped to make room for newer ones.", ~w(channel)},
    {"ringbus_channel_rejected_total", :counter, "Messages refused because the channel was full.",
     ~w(channel)},
    {"ringbus_channel_expired_total", :counter,
     "Messages that left because they were older than the channel's max_age.", ~w(channel)},
    {"ringbus_channel_deleted_total", :counter,
     "Messages deleted by seq (Ringbus.delete_messages/2, RESP XDEL).", ~w(channel)},
    {"ringbus_channel_skipped", :gauge,
     "Seqs given up on because their producer stalled; a late producer settles them.",
     ~w(channel)},
    {"ringbus_channel_subscriptions", :gauge, "Subscriptions to the channel.", ~w(channel)},
    {"ringbus_channel_subscriptions_unanswered", :gauge,
     "Subscriptions that did not give their figures within this scrape's deadline.", ~w(channel)},
    # Replicated channels: this node's member, from Ringbus.info/1's :replication.
    {"ringbus_replica_role", :gauge,
     "1 for the role this node's member of the channel is in: leader, follower, candidate, " <>
       "down (no Raft server running) or unknown.", ~w(channel role)},
    {"ringbus_replica_term", :gauge, "The Raft term this node's member is in.", ~w(channel)},
    {"ringbus_replica_commit_index", :gauge, "The highest log index this member knows committed.",
     ~w(channel)},
    {"ringbus_replica_applied_index", :gauge,
     "The highest log index this member applied to its ring.", ~w(channel)},
    {"ringbus_replica_lag_entries", :gauge,
     "Log entries committed that this member had not applied at its last report, " <>
       "as the leader's node computed them.", ~w(channel)},
    {"ringbus_replica_lag_seconds", :gauge,
     "Age of the oldest log entry committed that this member had not applied at its last " <>
       "report (0 when none), as the leader's node computed it: up to about 1 s high " <>
       "for a member that keeps up, about 2 s low for one behind.", ~w(channel)},
    {"ringbus_replica_elections_total", :counter,
     "Elections this member saw (terms it went through) since this node started or the channel was created.",
     ~w(channel)},
    {"ringbus_replica_snapshot_bytes", :gauge, "Bytes of this member's Raft snapshots on disk.",
     ~w(channel)},
    {"ringbus_replica_log_bytes", :gauge,
     "Bytes in this member's Raft directory on disk (segments, snapshots), " <>
       "not counting the node's shared WAL.", ~w(channel)},
    {"ringbus_replica_segment_bytes", :gauge,
     "Bytes of this member's Raft segment files on disk.", ~w(channel)},
    {"ringbus_replica_mem_bytes", :gauge,
     "Bytes of Ra's ETS tables of this member's log: the entries the node's WAL holds " <>
       "that no segment of this member does yet.", ~w(channel)},
    # This node's Raft system, shared by its replicated channels.
    {"ringbus_replica_wal_bytes", :gauge,
     "Bytes of this node's Raft WAL files, which every replicated channel of the node " <>
       "writes to, until Ra rolls them over into each channel's segments.", []},
    {"ringbus_replica_ets_bytes", :gauge,
     "Bytes of Ra's ETS tables on this node: the log entries the WAL holds that no " <>
       "segment does yet, and their indexes (not the binaries over 64 bytes they refer to).", []},
    # Subscriptions: Ringbus.subscriptions/2.
    {"ringbus_subscription_lag_messages", :gauge,
     "Messages pushed to the channel that the subscription has not sent yet.",
     ~w(channel subscriber)},
    {"ringbus_subscription_credit_messages", :gauge,
     "Messages the subscription may still send before its subscriber acks.",
     ~w(channel subscriber)},
    {"ringbus_subscription_lost_total", :counter,
     "Messages the subscription missed: overwritten or pulled before it read them.",
     ~w(channel subscriber)},
    # Every subscription of the node, by how its subscriber gets messages.
    {"ringbus_subscription_delivery_seconds", :histogram,
     "Time from a message's push to its subscription's send to the subscriber " <>
       "(embedded), or to the server connection that writes it (binary, resp); " <>
       "buckets are powers of 2 microseconds.", ~w(protocol)},
    # Servers: Ringbus.Server.Stats, one set per listening port.
    {"ringbus_server_connections", :gauge,
     "Connections now, by state: handshaking (before HELLO) or open.", ~w(protocol port state)},
    {"ringbus_server_accepted_total", :counter, "Connections accepted.", ~w(protocol port)},
    {"ringbus_server_refused_total", :counter, "Connections refused at max_connections.",
     ~w(protocol port)},
    {"ringbus_server_accept_errors_total", :counter, "Accepts that failed.", ~w(protocol port)},
    {"ringbus_server_closed_total", :counter,
     "Connections closed, by reason: peer_closed, socket_error, send_timeout, crashed, " <>
       "or the connection error the server sent.", ~w(protocol port reason)},
    {"ringbus_server_frames_received_total", :counter, "Frames read from clients.",
     ~w(protocol port)},
    {"ringbus_server_frames_sent_total", :counter, "Frames written to clients.",
     ~w(protocol port)},
    {"ringbus_server_received_bytes_total", :counter, "Bytes read from clients.",
     ~w(protocol port)},
    {"ringbus_server_sent_bytes_total", :counter, "Bytes written to clients.", ~w(protocol port)},
    {"ringbus_server_push_ack_seconds", :histogram,
     "Server time from the read that carried a push (binary PUSH, RESP XADD) to the write " <>
       "of its ack; buckets are powers of 2 microseconds.", ~w(protocol port)},
    {"ringbus_server_errors_total", :counter,
     "Errors sent to clients, by error code: the binary protocol's ERROR frames and " <>
       "failed push acks, RESP's error replies (ERR, NOGROUP, ...; other for the rest).",
     ~w(protocol port code)},
    # Consumer groups, per channel and group (Ringbus.Groups.info/1), any front end's.
    {"ringbus_group_pending_messages", :gauge, "Messages delivered and not acked.",
     ~w(channel group)},
    {"ringbus_group_lag_messages", :gauge,
     "Messages in the channel after the last one the group delivered.", ~w(channel group)},
    {"ringbus_group_consumers", :gauge, "Consumers of the group.", ~w(channel group)},
    {"ringbus_group_acked_total", :counter, "Messages acked: they left the group.",
     ~w(channel group)},
    {"ringbus_group_redelivered_total", :counter,
     "Deliveries after a message's first (ack_wait passed, nacked, its consumer gone, claimed).",
     ~w(channel group)},
    {"ringbus_group_dead_total", :counter,
     "Messages given up after max_deliver deliveries (pushed to the dead-letter channel, if any).",
     ~w(channel group)},
    {"ringbus_group_lost_total", :counter,
     "Messages the ring overwrote or trimmed before the group delivered them (again).",
     ~w(channel group)},
    {"ringbus_group_held_total", :counter,
     "Fetches that took fewer new messages than asked: max_pending were pending.",
     ~w(channel group)},
    {"ringbus_group_delivered_seq", :gauge,
     "Seq of the last new message the group delivered (-1: none yet).", ~w(channel group)},
    {"ringbus_group_consumer_pending_messages", :gauge,
     "Messages delivered to the consumer and not acked.", ~w(channel group consumer)},
    {"ringbus_group_consumer_idle_seconds", :gauge,
     "Seconds since the consumer last fetched, read or claimed.", ~w(channel group consumer)},
    {"ringbus_group_omitted", :gauge,
     "Consumer groups this scrape left out: past its bound of groups.", []},
    {"ringbus_group_consumers_omitted", :gauge,
     "Consumers this scrape left out: past its bound of consumers (ringbus_group_consumers counts them).",
     []},
    # RESP consumer groups, per RESP listener (port), stream and group.
    {"ringbus_resp_group_pending_entries", :gauge,
     "Entries delivered to the group's consumers and not acked (its PEL).",
     ~w(port stream group)},
    {"ringbus_resp_group_lag_messages", :gauge,
     "Entries in the stream after the last one delivered to the group.", ~w(port stream group)},
    {"ringbus_resp_group_consumers", :gauge, "Consumers of the group.", ~w(port stream group)},
    {"ringbus_resp_group_max_idle_seconds", :gauge,
     "Seconds since the group's least recently active consumer last read or claimed.",
     ~w(port stream group)},
    {"ringbus_resp_group_lost_total", :counter,
     "Entries that left the stream before the group read them.", ~w(port stream group)},
    {"ringbus_resp_group_pending_dropped_total", :counter,
     "Pending entries dropped, oldest first, to keep the PEL within its bound.",
     ~w(port stream group)},
    # The VM.
    {"ringbus_vm_memory_bytes", :gauge,
     "Memory the VM uses, by kind (:erlang.memory/0; total = processes + system).", ~w(kind)},
    {"ringbus_vm_run_queue", :gauge, "Processes and ports ready to run, on all run queues.", []},
    {"ringbus_vm_processes", :gauge, "Processes alive.", []},
    {"ringbus_vm_process_limit", :gauge, "The most processes the VM allows.", []},
    {"ringbus_vm_ports", :gauge, "Ports open (sockets, files).", []},
    {"ringbus_vm_schedulers_online", :gauge, "Schedulers online.", []},
    {"ringbus_vm_gc_runs_total", :counter, "Garbage collections.", []},
    {"ringbus_vm_gc_reclaimed_bytes_total", :counter, "Bytes reclaimed by garbage collections.",
     []},
    {"ringbus_vm_uptime_seconds", :gauge, "Seconds since the VM started.", []},
    # The cluster, when the node runs the cluster layer: Ringbus.cluster_info/0.
    {"ringbus_cluster_members", :gauge, "Nodes in the cluster's membership.", []},
    {"ringbus_cluster_link_state", :gauge, "1 for the state each link to a node is in.",
     ~w(node state)},
    {"ringbus_cluster_link_queued_bytes", :gauge, "Bytes queued on the link to a node.",
     ~w(node)},
    {"ringbus_cluster_link_batches_total", :counter, "Batches sent on the link to a node.",
     ~w(node)},
    {"ringbus_cluster_link_drops_total", :counter,
     "Batches the link to a node dropped (not connected, or busy).", ~w(node)},
    {"ringbus_cluster_link_suspensions_total", :counter,
     "Times the link to a node was suspended (the distribution buffer was full).", ~w(node)},
    {"ringbus_cluster_calls_total", :counter,
     "Calls from this node to the channels of a node, by outcome: ok (answered), refused (node_busy or node_down: not carried out), timeout (unknown outcome).",
     ~w(node outcome)}
  ]

  @sections [
    :channels,
    :replicas,
    :raft,
    :subscriptions,
    :consumer_groups,
    :delivery,
    :servers,
    :groups,
    :vm,
    :cluster
  ]

  @group_fields [
    {"ringbus_group_pending_messages", :pending},
    {"ringbus_group_lag_messages", :lag},
    {"ringbus_group_acked_total", :acked},
    {"ringbus_group_redelivered_total", :redelivered},
    {"ringbus_group_dead_total", :dead},
    {"ringbus_group_lost_total", :lost},
    {"ringbus_group_held_total", :held},
    {"ringbus_group_delivered_seq", :delivered}
  ]

  @channel_fields [
    {"ringbus_channel_len", :len},
    {"ringbus_channel_capacity", :capacity},
    {"ringbus_channel_held_bytes", :bytes},
    {"ringbus_channel_max_bytes", :max_bytes},
    {"ringbus_channel_pushed_total", :pushed},
    {"ringbus_channel_pushed_bytes_total", :bytes_pushed},
    {"ringbus_channel_pulled_total", :pulled},
    {"ringbus_channel_overwritten_total", :overwritten},
    {"ringbus_channel_rejected_total", :rejected},
    {"ringbus_channel_expired_total", :expired},
    {"ringbus_channel_deleted_total", :deleted},
    {"ringbus_channel_skipped", :skipped}
  ]

  @replica_fields [
    {"ringbus_replica_term", :term},
    {"ringbus_replica_commit_index", :commit_index},
    {"ringbus_replica_applied_index", :applied_index},
    {"ringbus_replica_lag_entries", :lag_entries},
    {"ringbus_replica_elections_total", :elections},
    {"ringbus_replica_snapshot_bytes", :snapshot_bytes},
    {"ringbus_replica_log_bytes", :log_bytes},
    {"ringbus_replica_segment_bytes", :segment_bytes},
    {"ringbus_replica_mem_bytes", :mem_bytes}
  ]

  @server_fields [
    {"ringbus_server_accepted_total", :accepted},
    {"ringbus_server_refused_total", :refused},
    {"ringbus_server_accept_errors_total", :accept_errors},
    {"ringbus_server_frames_received_total", :frames_in},
    {"ringbus_server_frames_sent_total", :frames_out},
    {"ringbus_server_received_bytes_total", :bytes_in},
    {"ringbus_server_sent_bytes_total", :bytes_out}
  ]

  @link_fields [
    {"ringbus_cluster_link_queued_bytes", :queued_bytes},
    {"ringbus_cluster_link_batches_total", :batches},
    {"ringbus_cluster_link_drops_total", :drops},
    {"ringbus_cluster_link_suspensions_total", :suspensions}
  ]

  @call_outcomes [{"ok", :calls_ok}, {"refused", :calls_refused}, {"timeout", :calls_timeout}]

  @doc "The families as a Markdown table, for `Ringbus.Metrics`'s docs."
  @spec families_doc() :: String.t()
  def families_doc do
    rows =
      for {name, type, help, labels} <- @families do
        "| `#{name}` | #{type} | #{Enum.join(labels, ", ")} | #{help} |\n"
      end

    "| Family | Type | Labels | Meaning |\n|---|---|---|---|\n" <> Enum.join(rows)
  end

  @doc "The names of every family, in order."
  @spec family_names() :: [String.t()]
  def family_names, do: for({name, _, _, _} <- @families, do: name)

  @doc "Renders a snapshot."
  @spec render(map()) :: iodata()
  def render(snapshot) do
    samples =
      @sections
      |> Enum.flat_map(&samples(&1, snapshot))
      |> Enum.map(fn
        {family, labels, value} -> {family, family, labels, value}
        named -> named
      end)
      |> Enum.filter(fn {_family, _name, _labels, value} -> is_number(value) end)
      |> Enum.group_by(&elem(&1, 0), &Tuple.delete_at(&1, 0))

    for {name, type, help, _labels} <- @families, family = samples[name], family != nil do
      [
        ["# HELP ", name, " ", help, "\n# TYPE ", name, " ", Atom.to_string(type), "\n"]
        | Enum.map(family, &sample/1)
      ]
    end
  end

  ## Sources

  defp samples(:channels, snapshot) do
    Enum.flat_map(snapshot.channels, fn %{label: label, info: info, subscriptions: subs} ->
      labels = [channel: label]
      unanswered = Enum.count(subs, &is_nil(&1.lag))

      [
        {"ringbus_channel_subscriptions", labels, length(subs)},
        {"ringbus_channel_subscriptions_unanswered", labels, unanswered}
        | for({family, field} <- @channel_fields, do: {family, labels, Map.get(info, field)})
      ]
    end)
  end

  defp samples(:replicas, snapshot) do
    for %{label: label, info: info} <- snapshot.channels,
        %{node: node} = member <- Map.get(info, :replication) || [],
        node == snapshot.node,
        labels = [channel: label],
        sample <-
          [
            {"ringbus_replica_role", labels ++ [role: member.role], 1}
            | for(
                {family, field} <- @replica_fields,
                do: {family, labels, Map.get(member, field)}
              )
          ] ++ [{"ringbus_replica_lag_seconds", labels, member.lag_ms && member.lag_ms / 1000}],
        do: sample
  end

  # The node's figures, which each of its members carries: the first's.
  defp samples(:raft, snapshot) do
    local =
      for %{info: info} <- snapshot.channels,
          %{node: node} = member <- Map.get(info, :replication) || [],
          node == snapshot.node,
          is_integer(Map.get(member, :wal_bytes)),
          do: member

    case local do
      [member | _] ->
        [
          {"ringbus_replica_wal_bytes", [], member.wal_bytes},
          {"ringbus_replica_ets_bytes", [], Map.get(member, :ets_bytes)}
        ]

      [] ->
        []
    end
  end

  defp samples(:subscriptions, snapshot) do
    for %{label: label, subscriptions: subs} <- snapshot.channels,
        sub <- subs,
        labels = [channel: label, subscriber: sub.label],
        {family, field} <- [
          {"ringbus_subscription_lag_messages", :lag},
          {"ringbus_subscription_credit_messages", :credit},
          {"ringbus_subscription_lost_total", :lost}
        ],
        do: {family, labels, Map.get(sub, field)}
  end

  defp samples(:delivery, snapshot) do
    delivery = Map.get(snapshot, :delivery, %{})

    for protocol <- Ringbus.Channel.Delivery.protocols(),
        sample <-
          histogram(
            "ringbus_subscription_delivery_seconds",
            [protocol: protocol],
            delivery[protocol]
          ),
        do: sample
  end

  defp samples(:servers, snapshot) do
    Enum.flat_map(snapshot.servers, fn %{protocol: protocol, port: port, counts: counts} ->
      labels = [protocol: protocol, port: port]

      Enum.concat([
        for(state <- [:handshaking, :open], do: conns(labels, state, counts[state])),
        for({family, field} <- @server_fields, do: {family, labels, counts[field]}),
        for({reason, n} <- Enum.sort(counts.closed), do: closed(labels, reason, n)),
        for({code, n} <- Enum.sort(counts.errors), do: errors(labels, code, n)),
        histogram("ringbus_server_push_ack_seconds", labels, counts[:push_ack])
      ])
    end)
  end

  defp samples(:consumer_groups, snapshot) do
    omitted = Map.get(snapshot, :group_omitted, %{groups: 0, consumers: 0})

    groups =
      for %{label: channel} = c <- snapshot.channels,
          g <- Map.get(c, :groups, []),
          labels = [channel: channel, group: label(g.name)],
          consumers = Enum.count(g.consumers) + Map.get(g, :consumers_omitted, 0),
          sample <-
            [
              {"ringbus_group_consumers", labels, consumers}
              | for({family, key} <- @group_fields, do: {family, labels, g[key]})
            ] ++ consumer_samples(labels, g.consumers),
          do: sample

    groups ++
      [
        {"ringbus_group_omitted", [], omitted.groups},
        {"ringbus_group_consumers_omitted", [], omitted.consumers}
      ]
  end

  defp samples(:groups, snapshot) do
    for g <- Map.get(snapshot, :groups, []),
        labels = [port: g.port, stream: g.stream, group: g.group],
        {family, value} <- [
          {"ringbus_resp_group_pending_entries", g.pending},
          {"ringbus_resp_group_lag_messages", g.lag},
          {"ringbus_resp_group_consumers", g.consumers},
          {"ringbus_resp_group_max_idle_seconds", g.idle_ms && g.idle_ms / 1000},
          {"ringbus_resp_group_lost_total", g.lost},
          {"ringbus_resp_group_pending_dropped_total", g.dropped}
        ],
        do: {family, labels, value}
  end

  defp samples(:vm, %{vm: vm}) do
    memory =
      for {kind, bytes} <- Enum.sort(vm.memory),
          do: {"ringbus_vm_memory_bytes", [kind: kind], bytes}

    memory ++
      [
        {"ringbus_vm_run_queue", [], vm.run_queue},
        {"ringbus_vm_processes", [], vm.processes},
        {"ringbus_vm_process_limit", [], vm.process_limit},
        {"ringbus_vm_ports", [], vm.ports},
        {"ringbus_vm_schedulers_online", [], vm.schedulers},
        {"ringbus_vm_gc_runs_total", [], vm.gc_runs},
        {"ringbus_vm_gc_reclaimed_bytes_total", [], vm.gc_reclaimed_bytes},
        {"ringbus_vm_uptime_seconds", [], vm.uptime_ms / 1000}
      ]
  end

  defp samples(:cluster, %{cluster: nil}), do: []

  defp samples(:cluster, %{cluster: cluster}) do
    %{members: members, links: links} = Ringbus.Metrics.Cluster.normalize(cluster)

    [
      {"ringbus_cluster_members", [], length(members)}
      | Enum.flat_map(links, fn link ->
          labels = [node: link.node]

          [
            {"ringbus_cluster_link_state", [node: link.node, state: link.state], 1}
            | for({family, field} <- @link_fields, do: {family, labels, Map.get(link, field)})
          ] ++
            for {outcome, field} <- @call_outcomes,
                do:
                  {"ringbus_cluster_calls_total", labels ++ [outcome: outcome],
                   Map.get(link, field)}
        end)
    ]
  end

  defp consumer_samples(labels, consumers) do
    for c <- consumers,
        labels = labels ++ [consumer: label(c.name)],
        sample <- [
          {"ringbus_group_consumer_pending_messages", labels, c.pending},
          {"ringbus_group_consumer_idle_seconds", labels, c.idle_ms / 1000}
        ],
        do: sample
  end

  # A histogram of µs counts, in seconds: cumulative buckets, sum, count.
  defp histogram(_family, _labels, nil), do: []

  defp histogram(family, labels, %{buckets: buckets, sum_us: sum, count: count}) do
    Enum.map(buckets, fn {le, n} ->
      {family, family <> "_bucket", labels ++ [le: le(le)], n}
    end) ++
      [
        {family, family <> "_sum", labels, sum / 1_000_000},
        {family, family <> "_count", labels, count}
      ]
  end

  defp le(:infinity), do: "+Inf"
  defp le(us), do: :erlang.float_to_binary(us / 1_000_000, [:short])

  defp conns(labels, state, n), do: {"ringbus_server_connections", labels ++ [state: state], n}

  defp closed(labels, reason, n),
    do: {"ringbus_server_closed_total", labels ++ [reason: reason], n}

  defp errors(labels, code, n), do: {"ringbus_server_errors_total", labels ++ [code: code], n}

  ## Text

  defp sample({name, [], value}), do: [name, " ", number(value), "\n"]

  defp sample({name, labels, value}) do
    pairs =
      Enum.map_intersperse(labels, ",", fn {k, v} ->
        [Atom.to_string(k), "=\"", escape(v), "\""]
      end)

    [name, "{", pairs, "} ", number(value), "\n"]
  end

  defp number(n) when is_integer(n), do: Integer.to_string(n)
  defp number(n) when is_float(n), do: Float.to_string(n)

  # A label value: backslash, double quote and newline are escaped.
  defp escape(value) when is_binary(value) do
    value
    |> String.replace("\\", "\\\\")
    |> String.replace("\"", "\\\"")
    |> String.replace("\n", "\\n")
  end

  defp escape(value) when is_atom(value), do: value |> Atom.to_string() |> escape()
  defp escape(value), do: value |> to_string() |> escape()

  @doc """
  A name (a channel's, a group's, a consumer's) as labels and pages show
  it: UTF-8 without control characters as is; any other term as Elixir
  prints it.
  """
  @spec label(term()) :: String.t()
  def label(name) do
    if is_binary(name) and String.valid?(name) and not String.match?(name, ~r/[\x00-\x1f\x7f]/),
      do: name,
      else: inspect(name)
  end
end
