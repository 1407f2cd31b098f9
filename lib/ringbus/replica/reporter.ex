defmodule Ringbus.Replica.Reporter do
  @moduledoc false
  # What each member of this node's replicated channels is doing, for
  # `Ringbus.info/1`, `Ringbus.cluster_info/0`, `/status` and `/metrics`,
  # read from an ETS table in the caller: no read asks a process, here or
  # on another node, so a silent node never holds a reader up.
  #
  # Every second this process reads each local member's figures (Ra's
  # `ra_state` and `ra_metrics` tables, its ring, its server's directory on
  # disk; `Ringbus.Replica.Member.figures/3`), writes them to the table and
  # sends them, one message per node, to the reporters of the other
  # members' nodes with `[:noconnect, :nosuspend]`: a node that is not
  # connected or whose buffer is full misses that report. Reports received
  # are kept with their arrival time; a reader shows one older than
  # `@stale_ms` as `:unknown` and a member whose node is not connected as
  # `:down` (`Member.views/4`). The table holds one row per member of the
  # channels this node is a member of, swept each second:
  # `{{cluster, node}, figures, %{applied: index, lags: lags}, at}`.
  #
  # Lag. For each channel this process keeps when it first saw each commit
  # index (`Ringbus.Replica.Commits`), from its own member's figures and
  # every report received, and drops the samples every member has applied.
  # When its member leads, it computes every member's lag from them
  # (`Member.lags/2`) and sends the lags with its figures; readers take
  # them from the leader's row.

  use GenServer

  alias Ringbus.Store
  alias Ringbus.Channel.Ring
  alias Ringbus.Replica.{Commits, Footprint, Member}

  @table :ringbus_replica_reports
  @interval_ms 1_000
  # A report older than two periods missed at least one: its member (or
  # the member's node) is silent, and its figures are shown as unknown.
  @stale_ms 2 * @interval_ms
  # At most this many samples of a channel's commit index: past it, the
  # old ones thin out.
  @max_commits 64

  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Each member of a replicated channel (its handle's `:replica` map), in
  the order of its members, as this node knows it (`Member.t()`).
  """
  @spec members(map()) :: [Member.t()]
  def members(%{cluster: cluster, members: members}) do
    connected = MapSet.new([node() | Node.list()])
    now = now()
    nodes = for {_server, n} <- members, do: n

    reports =
      for n <- nodes,
          [{_, figures, %{lags: lags}, at}] <- [lookup({cluster, n})],
          into: %{},
          do: {n, {figures, lags, max(now - at, 0)}}

    Member.views(nodes, reports, connected, @stale_ms)
  end

  @doc """
  This node's replicated channels, by name, each with `members/1`:
  `[%{channel: name, members: [Member.t()]}]`.
  """
  @spec channels() :: [%{channel: term(), members: [Member.t()]}]
  def channels do
    for {name, %{replica: replica}} <- Enum.sort(Store.replicated()),
        do: %{channel: name, members: members(replica)}
  end

  defp lookup(key) do
    :ets.lookup(@table, key)
  rescue
    # The reporter is restarting: nothing known yet.
    ArgumentError -> []
  end

  @impl true
  def init(:ok) do
    :ets.new(@table, [:named_table, :protected, read_concurrency: true])
    {:ok, _} = :timer.send_interval(@interval_ms, :tick)
    send(self(), :tick)
    {:ok, %{seen: %{}, commits: %{}}}
  end

  @impl true
  def handle_info(:tick, state), do: {:noreply, report(state)}

  # Another node's figures, for the channels this node is a member of too.
  def handle_info({:ringbus_replica_report, from, reports}, state) do
    now = now()

    commits =
      for {cluster, figures, extra} <- reports,
          :ets.member(@table, {cluster, node()}),
          reduce: state.commits do
        commits ->
          :ets.insert(@table, {{cluster, from}, figures, extra, now})
          history = Map.get(commits, cluster, Commits.new())
          Map.put(commits, cluster, Commits.observe(history, figures.commit_index, now))
      end

    {:noreply, %{state | commits: commits}}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp report(state) do
    now = now()
    replicas = for {_name, %{replica: r} = ch} <- Store.replicated(), do: {r, ch}
    system = Footprint.system()
    # The node's, shared by its channels: measured once, given to each member.
    shared = Footprint.node(system)

    reports =
      for {replica, channel} <- replicas do
        cluster = replica.cluster
        ra = ra(replica)

        {figures, kept} =
          Member.figures(
            ra,
            Map.get(state.seen, cluster, %{}),
            Map.merge(extra(replica, channel, system), shared)
          )

        commits =
          Commits.observe(Map.get(state.commits, cluster, Commits.new()), ra[:commit_index], now)

        applied = kept[:applied]

        # Every member's applied index: this one's now, the others' as of
        # their last report here.
        members =
          for {_, n} <- replica.members,
              member <- applied_of(cluster, n, applied, now),
              do: member

        lags = if figures.role == :leader, do: Member.lags(commits, members)
        extra = %{applied: applied, lags: lags}
        :ets.insert(@table, {{cluster, node()}, figures, extra, now})

        floor = for({_, a, _} <- members, a != nil, do: a) |> Enum.min(fn -> nil end)
        {replica, figures, extra, kept, Commits.prune(commits, floor, @max_commits, now)}
      end

    # One message per node, with every channel it shares with this one.
    outbox =
      for {r, figures, extra, _, _} <- reports,
          {_, n} <- r.members,
          n != node(),
          do: {n, {r.cluster, figures, extra}}

    outbox = Enum.group_by(outbox, &elem(&1, 0), &elem(&1, 1))

    for {n, list} <- outbox do
      message = {:ringbus_replica_report, node(), list}
      :erlang.send({__MODULE__, n}, message, [:noconnect, :nosuspend])
    end

    sweep(replicas)

    %{
      state
      | seen: Map.new(reports, fn {r, _, _, kept, _} -> {r.cluster, kept} end),
        commits: Map.new(reports, fn {r, _, _, _, commits} -> {r.cluster, commits} end)
    }
  end

  defp applied_of(_cluster, n, applied, now) when n == node(), do: [{n, applied, now}]

  defp applied_of(cluster, n, _applied, _now) do
    for {_, _, %{applied: a}, at} <- :ets.lookup(@table, {cluster, n}), do: {n, a, at}
  end

  # Rows of channels this node left, or of members no longer listed.
  defp sweep(replicas) do
    keep = MapSet.new(for {r, _} <- replicas, {_, n} <- r.members, do: {r.cluster, n})

    for key <- :ets.select(@table, [{{:"$1", :_, :_, :_}, [], [:"$1"]}]),
        not MapSet.member?(keep, key),
        do: :ets.delete(@table, key)
  end

  # Ra's figures of this node's server, as of Ra's last tick (1 s).
  defp ra(%{server: {local, _}}) do
    with [{_, role}] <- :ets.lookup(:ra_state, local),
         [{_, term, snapshot, applied, commit, _written, _latency}] <-
           :ets.lookup(:ra_metrics, local) do
      %{
        role: role,
        term: term,
        snapshot_index: snapshot,
        applied_index: applied,
        commit_index: commit
      }
    else
      _ -> nil
    end
  rescue
    ArgumentError -> nil
  end

  defp extra(%{server: {local, _}}, channel, system) do
    local
    |> Footprint.member(system)
    |> Map.put(:applied_seq, Ring.next_seq(channel) - 1)
  end

  defp now, do: System.monotonic_time(:millisecond)
end
