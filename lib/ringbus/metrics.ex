defmodule Ringbus.Metrics do
  @moduledoc """
  What a running Ringbus is doing: its channels, their subscriptions, its
  servers' connections, the VM, and the cluster's links when there is one.

  `snapshot/1` gathers it all as data; `prometheus/1` renders a snapshot in
  the Prometheus text format, which `Ringbus.HTTP` serves on `/metrics`:

      Ringbus.Metrics.snapshot() |> Ringbus.Metrics.prometheus() |> IO.puts()

  ## Cost

  Nothing here goes through a shared process. Channel figures are read from
  their `:atomics`; server figures from each server's `:counters`, found in
  `Ringbus.Server.Directory`; each connection's from the counters it
  publishes there (`Ringbus.Server.clients/0`), so a busy connection is
  never waited for; consumer groups from the node's group table, in the
  scraping process: each group's row and its consumers' rows, and one pass
  over a group's pending entries for its consumers' pending counts when it
  shows any consumer and has entries pending, within the bounds of
  `snapshot/1`'s `:groups` and `:consumers`; RESP consumer groups from
  their ETS table, through the RESP listener's entry in the directory; VM
  figures from `:erlang`. Subscriptions
  register nowhere, so each is asked for its lag and losses
  (`Ringbus.subscriptions/2`), all of a snapshot's within one deadline
  (`:timeout`): a busy subscription is listed without figures rather than
  waited for. The cluster's figures come from `Ringbus.cluster_info/0` when
  the node runs the cluster layer. A replicated channel's `ringbus_replica_*`
  families are its member on this node, from `Ringbus.info/1`'s
  `:replication` (an ETS read: the figures its node's reporter wrote last,
  each second, and its lag as the leader's node last sent it); each node
  exports its own member.

  ## Metric families

  Counters end in `_total`; every family has HELP and TYPE lines. Labels:
  `channel` (a binary name as is, any other name inspected), `subscriber`
  (the name a subscription was given, else its client's `ip:port` for a
  network subscriber; see `subscriber_labels/2`), `protocol` and `port` (a
  listening server),
  `code` (an error's name), `role` (this node's member of a replicated
  channel: `leader`, `follower`, `candidate`, `down`, `unknown`), `reason`,
  `state`, `kind`, `node`, `outcome`
  (a cluster call's: `ok`, `refused` or `timeout`), `stream` and `group` (a
  RESP consumer group; `group` also names a channel's consumer group in the
  `ringbus_group_*` families, and `consumer` one of its consumers), and `le`
  (a histogram's bucket).

  ## Histograms

  `ringbus_server_push_ack_seconds` is a Prometheus histogram
  (`_bucket{le=...}`, `_sum`, `_count`) with a fixed layout: one bucket per
  power of 2 microseconds, from 1 µs to 2^24 µs (about 17 s), then `+Inf`.
  Its buckets are `:counters` slots in the server's array, bumped by the
  connection process itself, once per read: a read's pushes share its
  arrival time, so the observation counts as many times as the read had
  acks, at the cost of one clock read and three counter adds.

  `ringbus_subscription_delivery_seconds` has the same layout, one series
  per `protocol` a subscriber gets its messages by: `embedded` (a process
  that called `Ringbus.subscribe/2`), `binary` or `resp` (a server
  connection that subscribed for its client). It counts every message a
  subscription sends, timed from the push that stored it (a batch pushed at
  once shares one time) to the subscription's send: to an embedded
  subscriber that is delivery; to a connection it is the hand-over, before
  the connection encodes and writes the batch, which the time leaves out.
  A message read from `:earliest` counts the time it waited in the channel
  before the subscription began. Its buckets are `:counters` slots in one
  array for the node, made when Ringbus starts and bumped by each
  subscription once per batch (a clock read, and a counter add per bucket
  the batch's messages fall in); it restarts from zero when Ringbus does.

  #{Ringbus.Metrics.Prometheus.families_doc()}
  """

  alias Ringbus.Server.{Directory, Stats}

  @snapshot_defaults [timeout: 100, subscriptions: 1000, groups: 1000, consumers: 1000]

  @typedoc "A snapshot; see `snapshot/1`."
  @type snapshot :: %{
          node: node(),
          version: String.t(),
          at: integer(),
          channels: [channel()],
          servers: [server()],
          connections: [map()],
          groups: [group()],
          group_omitted: %{groups: non_neg_integer(), consumers: non_neg_integer()},
          delivery: %{atom() => map()},
          vm: map(),
          cluster: map() | nil
        }

  @typedoc """
  One channel: its name, the name as labels and pages show it (a binary as
  is, any other term inspected), its `Ringbus.info/1` map (read by field
  name, so fields added later pass through) and its subscriptions' figures
  (`Ringbus.subscriptions/2`), each with the `:label` it is shown by (see
  `subscriber_labels/2`) and `:via`, how its subscriber gets its messages
  (`:binary`, `:resp` or `:embedded`), and its consumer groups' figures
  (`Ringbus.Groups.info/1`, whichever front end made them, each with
  `:consumers_omitted`, its consumers past the snapshot's bound).
  """
  @type channel :: %{
          name: Ringbus.name(),
          label: String.t(),
          info: map(),
          subscriptions: [map()],
          groups: [map()]
        }

  @typedoc """
  One RESP consumer group (`docs/RESP.md`) of a RESP listener on `port`:
  its stream and name, its pending entries, its lag (entries in the stream
  after the last one it was given; nil when the stream is gone), its
  consumers, and how long ago its least recently active consumer was seen
  (ms; nil with no consumer).
  """
  @type group :: %{
          port: :inet.port_number(),
          stream: String.t(),
          group: String.t(),
          pending: non_neg_integer(),
          lag: non_neg_integer() | nil,
          consumers: non_neg_integer(),
          idle_ms: non_neg_integer() | nil,
          lost: non_neg_integer(),
          dropped: non_neg_integer()
        }

  @typedoc "One listening server: its protocol, port and `Ringbus.Server.stats/1`-like counts."
  @type server :: %{protocol: atom(), port: :inet.port_number(), counts: map()}

  # The cluster layer's figures, when it is part of this build.

  @doc """
  Gathers every figure now.

  ## Options

    * `:timeout` - ms within which all subscriptions must answer. Default `100`.
    * `:subscriptions` - subscriptions asked per channel, at most. Default `1000`.
    * `:groups` - consumer groups given, at most, of all channels (in the
      order of their channels' labels, then by name); the rest are counted
      in `:groups_omitted`. Default `1000`.
    * `:consumers` - their consumers given, at most, the same way; the
      rest are counted in `:consumers_omitted`. Default `1000`.
  """
  @spec snapshot(
          timeout: non_neg_integer(),
          subscriptions: pos_integer(),
          groups: non_neg_integer(),
          consumers: non_neg_integer()
        ) :: snapshot()
  def snapshot(opts \\ []) do
    opts = Ringbus.Options.validate!(opts, @snapshot_defaults, "metrics")

    for key <- [:groups, :consumers],
        do:
          Ringbus.Options.check!(key, opts[key], &(is_integer(&1) and &1 >= 0), "an integer >= 0")

    deadline = System.monotonic_time(:millisecond) + opts[:timeout]
    connections = Ringbus.Server.clients()
    budget = %{groups: opts[:groups], consumers: opts[:consumers]}
    {channels, omitted} = channels(deadline, opts[:subscriptions], connections, budget)

    %{
      node: node(),
      version: to_string(Application.spec(:ringbus, :vsn) || "unknown"),
      at: System.system_time(:millisecond),
      channels: channels,
      servers: servers(),
      connections: connections,
      groups: groups(channels),
      group_omitted: omitted,
      delivery: Ringbus.Channel.Delivery.histograms(),
      vm: vm(),
      cluster: cluster()
    }
  end

  @doc "A snapshot in the Prometheus text format (version 0.0.4)."
  @spec prometheus(snapshot()) :: iodata()
  def prometheus(snapshot \\ snapshot()), do: Ringbus.Metrics.Prometheus.render(snapshot)

  ## Sources

  # The channels, and what the budget of groups and consumers left out.
  defp channels(deadline, limit, connections, budget) do
    peers = Map.new(connections, &{&1.pid, {&1.protocol, &1.peer}})
    none = %{groups: 0, consumers: 0}

    Ringbus.channels()
    |> Enum.map(&{label(&1), &1})
    |> Enum.sort()
    |> Enum.flat_map_reduce({budget, none}, fn {label, name}, {budget, omitted} ->
      # A channel deleted meanwhile is left out.
      with {:ok, info} <- Ringbus.info(name),
           timeout = max(deadline - System.monotonic_time(:millisecond), 0),
           {:ok, subs} <- Ringbus.subscriptions(name, timeout: timeout, limit: limit) do
        subs = subscriber_labels(subs, peers)
        {groups, budget, omitted} = groups_of(name, budget, omitted)
        channel = %{name: name, label: label, info: info, subscriptions: subs, groups: groups}
        {[channel], {budget, omitted}}
      else
        _ -> {[], {budget, omitted}}
      end
    end)
    |> then(fn {channels, {_budget, omitted}} -> {channels, omitted} end)
  end

  # Its consumer groups' figures (`Ringbus.Groups.info/1`), within what is
  # left of the budget: read from the node's group table in this process,
  # as a fetch would.
  defp groups_of(name, %{groups: g, consumers: c} = budget, omitted) do
    case Ringbus.run(name, {:group, {:figures, g, c}}) do
      {:ok, groups, left_out} ->
        shown = Enum.sum(for group <- groups, do: Enum.count(group.consumers))
        budget = %{groups: g - Enum.count(groups), consumers: c - shown}
        {groups, budget, Map.merge(omitted, left_out, fn _, a, b -> a + b end)}

      _gone ->
        {[], budget, omitted}
    end
  end

  defp label(name), do: Ringbus.Metrics.Prometheus.label(name)

  @doc """
  Names a channel's subscriptions (`Ringbus.subscriptions/2`) the way an
  operator knows them, never by a pid: by the `:name` given to
  `Ringbus.subscribe/2`; else, for a subscriber that is a server
  connection, by its client's address (`peers` maps connection pids to
  `{protocol, "ip:port"}`); else by the subscriber's registered name, or
  `"embedded"` (`"unanswered"` for one that gave no figures). Where two
  subscriptions of the channel get the same name, the later ones (by
  process) get `" #2"`, `" #3"`, ..., so each labels one series.
  """
  @spec subscriber_labels([map()], %{pid() => {atom(), String.t()}}) :: [map()]
  def subscriber_labels(subs, peers) do
    subs
    |> Enum.map(&Map.merge(&1, name_of(&1, peers)))
    |> Enum.sort_by(&{&1.label, &1.subscription})
    |> Enum.chunk_by(& &1.label)
    |> Enum.flat_map(fn [_ | rest] = same ->
      numbered = Enum.with_index(rest, 2)
      [hd(same) | Enum.map(numbered, fn {sub, i} -> %{sub | label: "#{sub.label} ##{i}"} end)]
    end)
  end

  defp name_of(%{subscriber: pid} = sub, peers) do
    case peers do
      %{^pid => {protocol, peer}} -> %{label: sub[:name] || peer, via: protocol}
      _ -> %{label: sub[:name] || process_name(pid), via: :embedded}
    end
  end

  defp process_name(nil), do: "unanswered"

  defp process_name(pid) when node(pid) == node() do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) and name != [] -> inspect(name)
      _ -> "embedded"
    end
  end

  defp process_name(pid), do: "embedded on #{node(pid)}"

  defp servers do
    for %{protocol: protocol, port: port, counters: counters} <- Directory.servers() do
      %{protocol: protocol, port: port, counts: Stats.counts(counters, protocol)}
    end
  end

  defp groups(channels) do
    next = Map.new(channels, &{&1.name, &1.info[:next_seq]})
    now = System.system_time(:millisecond)

    # The RESP front end gives its groups through its listener's figures.
    for %{port: port, figures: figures} <- Directory.servers(),
        figures != nil,
        g <- Map.get(figures.(), :groups, []) do
      %{
        port: port,
        stream: label(g.stream),
        group: label(g.group),
        pending: g.pending,
        lag: if(n = next[g.stream], do: max(n - (g.last + 1), 0)),
        consumers: g.consumers,
        idle_ms: if(g.oldest_seen, do: max(now - g.oldest_seen, 0)),
        lost: g.lost,
        dropped: g.dropped
      }
    end
    |> Enum.sort_by(&{&1.port, &1.stream, &1.group})
  end

  defp vm do
    {gc_runs, gc_words, _} = :erlang.statistics(:garbage_collection)

    %{
      memory: Map.new(:erlang.memory()),
      run_queue: :erlang.statistics(:total_run_queue_lengths_all),
      processes: :erlang.system_info(:process_count),
      process_limit: :erlang.system_info(:process_limit),
      ports: :erlang.system_info(:port_count),
      schedulers: :erlang.system_info(:schedulers_online),
      gc_runs: gc_runs,
      gc_reclaimed_bytes: gc_words * :erlang.system_info(:wordsize),
      uptime_ms: :erlang.statistics(:wall_clock) |> elem(0)
    }
  end

  # A node that is not distributed is in no cluster: no cluster figures.
  defp cluster, do: if(Node.alive?(), do: Ringbus.cluster_info())
end
