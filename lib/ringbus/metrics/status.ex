defmodule Ringbus.Metrics.Status do
  @moduledoc false
  # What the status views show (`/status`, `/status.json`, `/status.txt`),
  # built once from a snapshot and the last minute of history: plain maps of
  # strings and numbers, so the HTML page, the JSON and the terminal table
  # hold the same data by construction.

  alias Ringbus.Metrics.{Cluster, History, Prometheus}

  @doc "The status of a snapshot, with the history recorded every `interval_ms`."
  @spec build(map(), History.t(), pos_integer()) :: map()
  def build(snapshot, history, interval_ms) do
    %{
      node: Atom.to_string(snapshot.node),
      version: snapshot.version,
      generated_at: snapshot.at |> DateTime.from_unix!(:millisecond) |> DateTime.to_iso8601(),
      uptime_seconds: div(snapshot.vm.uptime_ms, 1000),
      sample_interval_ms: interval_ms,
      vm: %{
        memory_bytes: snapshot.vm.memory[:total],
        processes: snapshot.vm.processes,
        run_queue: snapshot.vm.run_queue,
        gc_runs: snapshot.vm.gc_runs,
        schedulers: snapshot.vm.schedulers
      },
      channels: Enum.map(snapshot.channels, &channel(&1, history)),
      replicas: replicas(snapshot.channels),
      subscriptions: subscriptions(snapshot.channels),
      servers: Enum.map(snapshot.servers, &server(&1, history)),
      groups: Map.get(snapshot, :groups, []),
      channel_groups: channel_groups(snapshot.channels),
      group_consumers: group_consumers(snapshot.channels),
      group_omitted: Map.get(snapshot, :group_omitted, %{groups: 0, consumers: 0}),
      clients: snapshot |> Map.get(:connections, []) |> Enum.map(&client/1),
      cluster: cluster(snapshot.cluster, history)
    }
  end

  defp channel(%{label: label, info: info, subscriptions: subs}, history) do
    series = Map.get(history, {:channel, label}, [])
    lags = for %{lag: lag} when is_integer(lag) <- subs, do: lag

    %{
      name: label,
      overflow: to_string(info[:overflow]),
      len: info[:len],
      capacity: info[:capacity],
      held_bytes: info[:bytes],
      max_bytes: info[:max_bytes],
      pushed: info[:pushed],
      pulled: info[:pulled],
      overwritten: info[:overwritten],
      rejected: info[:rejected],
      skipped: info[:skipped],
      subscriptions: length(subs),
      max_lag: Enum.max(lags, fn -> nil end),
      lost: subs |> Enum.map(&(&1.lost || 0)) |> Enum.sum(),
      push_rate: History.rates(series, 0),
      pull_rate: History.rates(series, 1),
      lag: History.values(series, 2)
    }
  end

  # Every member of each replicated channel, as this node's reports know it,
  # with its node's WAL and Ra ETS bytes (shared by that node's channels).
  defp replicas(channels) do
    for %{label: label, info: info} <- channels, m <- Map.get(info, :replication) || [] do
      m
      |> Map.take(~w(term commit_index applied_index applied_seq lag_entries elections age_ms)a)
      |> Map.merge(%{
        channel: label,
        node: Atom.to_string(m.node),
        role: Atom.to_string(m.role),
        lag_seconds: m.lag_ms && m.lag_ms / 1000,
        snapshot_bytes: m.snapshot_bytes,
        log_bytes: m.log_bytes,
        segment_bytes: Map.get(m, :segment_bytes),
        mem_bytes: Map.get(m, :mem_bytes),
        wal_bytes: Map.get(m, :wal_bytes),
        ets_bytes: Map.get(m, :ets_bytes)
      })
    end
  end

  defp subscriptions(channels) do
    for %{label: label, subscriptions: subs} <- channels, sub <- subs do
      %{
        channel: label,
        subscriber: sub.label,
        via: Atom.to_string(sub.via),
        lag: sub.lag,
        credit: sub.credit,
        lost: sub.lost
      }
    end
  end

  # Every consumer group of a channel (`Ringbus.Groups.info/1`), whichever
  # front end made it, and then its consumers.
  defp channel_groups(channels) do
    for %{label: label} = c <- channels, g <- Map.get(c, :groups, []) do
      g
      |> Map.take(~w(delivered pending lag acked redelivered dead lost held)a)
      |> Map.merge(%{
        channel: label,
        group: Prometheus.label(g.name),
        consumers: Enum.count(g.consumers) + Map.get(g, :consumers_omitted, 0)
      })
    end
  end

  defp group_consumers(channels) do
    for %{label: label} = c <- channels, g <- Map.get(c, :groups, []), k <- g.consumers do
      %{
        channel: label,
        group: Prometheus.label(g.name),
        consumer: Prometheus.label(k.name),
        pending: k.pending,
        idle_ms: k.idle_ms
      }
    end
  end

  @doc "A connection of `Ringbus.Server.clients/0` as the views show it: no pid, no socket."
  @spec client(map()) :: map()
  def client(c) do
    c
    |> Map.take(
      ~w(id port peer age_ms idle_ms frames_in frames_out bytes_in bytes_out pending_bytes)a
    )
    |> Map.merge(%{
      protocol: Atom.to_string(c.protocol),
      kind: Atom.to_string(c.kind),
      state: Atom.to_string(c.state)
    })
  end

  defp server(%{protocol: protocol, port: port, counts: counts}, history) do
    series = Map.get(history, {:server, protocol, port}, [])

    %{
      protocol: Atom.to_string(protocol),
      port: port,
      handshaking: counts.handshaking,
      open: counts.open,
      accepted: counts.accepted,
      refused: counts.refused,
      frames_in: counts.frames_in,
      frames_out: counts.frames_out,
      bytes_in: counts.bytes_in,
      bytes_out: counts.bytes_out,
      errors: counts.errors |> Map.values() |> Enum.sum(),
      connections: History.values(series, 0)
    }
  end

  defp cluster(nil, _history), do: nil

  defp cluster(info, history) do
    %{members: members, links: links} = Cluster.normalize(info)
    %{members: members, links: links, links_up: History.values(Map.get(history, :links, []), 0)}
  end
end
