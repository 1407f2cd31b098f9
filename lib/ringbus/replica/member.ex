defmodule Ringbus.Replica.Member do
  @moduledoc false
  # The figures of one member of a replicated channel, as `Ringbus.info/1`
  # (`:replication`), `/status` and `/metrics` show them. Pure: the
  # reporter (`Ringbus.Replica.Reporter`) gathers the inputs on the
  # member's node and calls `figures/3`, the leader's node calls `lags/2`,
  # and readers on any node call `views/4` on the last reports they hold.
  #
  # Lag is the leader's word. The node whose member leads computes every
  # member's, each report, from the commit indexes its node has seen and
  # when (`Ringbus.Replica.Commits`) and each member's applied index (its
  # own, or the one in that member's last report, received at `at`): as of
  # `at`, `lag_entries` is the highest commit index known minus the applied
  # index, and `lag_ms` how long ago the commit index first reached the
  # applied index + 1, the oldest entry committed and not applied (0 when
  # there is none). A reader takes every member's lag from the freshest
  # leader it hears (the highest term); with none, lag is nil. A stalled
  # member's lag grows with the time it is stalled, whatever its own node
  # believes (a suspended ex-leader's Ra still says it leads).

  alias Ringbus.Replica.Commits

  @type role :: :leader | :follower | :candidate | :down | :unknown

  @type t :: %{
          node: node(),
          role: role(),
          term: non_neg_integer() | nil,
          commit_index: non_neg_integer() | nil,
          applied_index: non_neg_integer() | nil,
          applied_seq: integer() | nil,
          snapshot_index: non_neg_integer() | nil,
          lag_entries: non_neg_integer() | nil,
          lag_ms: non_neg_integer() | nil,
          elections: non_neg_integer() | nil,
          snapshot_bytes: non_neg_integer() | nil,
          log_bytes: non_neg_integer() | nil,
          segment_bytes: non_neg_integer() | nil,
          mem_bytes: non_neg_integer() | nil,
          wal_bytes: non_neg_integer() | nil,
          ets_bytes: non_neg_integer() | nil,
          age_ms: non_neg_integer() | nil
        }

  @typedoc "A member's lag as the leader's node computed it: `{lag_entries, lag_ms}`."
  @type lag :: {non_neg_integer(), non_neg_integer()}

  @typedoc """
  What a reader holds of a member: its figures, the lags its node computed
  (when it leads, else nil) and how old the report is (ms).
  """
  @type report :: {t(), %{node() => lag()} | nil, non_neg_integer()}

  # What the reporter measures beside Ra: the ring's newest seq, the
  # member's directory on disk and mem tables, and its node's WAL and Ra's
  # ETS tables.
  @extra [
    :applied_seq,
    :snapshot_bytes,
    :log_bytes,
    :segment_bytes,
    :mem_bytes,
    :wal_bytes,
    :ets_bytes
  ]

  @numbers [
    :term,
    :commit_index,
    :applied_index,
    :snapshot_index,
    :lag_entries,
    :lag_ms,
    :elections
    | @extra
  ]

  @doc "Ra's state names as the four roles a reader needs (`:down`: no server)."
  @spec role(atom() | nil) :: role()
  def role(:leader), do: :leader
  def role(state) when state in [:candidate, :pre_vote], do: :candidate

  def role(state)
      when state in [:follower, :await_condition, :receive_snapshot, :recover, :recovered],
      do: :follower

  def role(_stopped), do: :down

  @doc """
  A member's figures on its own node, without its lag (the leader's node
  gives it: `lags/2`). `ra` holds Ra's (`role`, `term`, `commit_index`,
  `applied_index`, `snapshot_index`, or nil with no server), `seen` what
  the reporter kept from its last report, and `extra` the rest
  (`applied_seq`, `snapshot_bytes`, `log_bytes`, `segment_bytes`,
  `mem_bytes`, and its node's
  `wal_bytes` and `ets_bytes`). Returns the figures and
  what to keep: `:first_term`, and `:applied`, the last applied index
  known (kept while the server is down, so its lag still counts).
  """
  @spec figures(map() | nil, map(), map()) :: {t(), map()}
  def figures(ra, seen, extra) do
    base = Map.merge(empty(node()), Map.take(extra, @extra))

    case ra do
      nil ->
        {%{base | role: :down}, seen}

      %{term: term, applied_index: applied, commit_index: commit} ->
        first_term = Map.get(seen, :first_term) || term

        figures = %{
          base
          | role: role(ra.role),
            term: term,
            commit_index: commit,
            applied_index: applied,
            snapshot_index: ra[:snapshot_index],
            elections: term - first_term
        }

        {figures, %{first_term: first_term, applied: applied}}
    end
  end

  @doc """
  Each member's lag, on the leader's node: `members` lists `{node,
  applied_index, at}` (the applied index as of `at`, this node's
  monotonic ms; nil when never known), `commits` what this node knows of
  the commit index. A member with no applied index, or before any commit
  index is known, has none.
  """
  @spec lags(Commits.t(), [{node(), non_neg_integer() | nil, integer()}]) :: %{node() => lag()}
  def lags(commits, members) do
    for {node, applied, at} <- members,
        lag = lag(commits, applied, at),
        into: %{},
        do: {node, lag}
  end

  @doc """
  A member's lag as of `at`: the entries committed (as known at `at`) that
  it had not applied, and the age at `at` of the oldest of them, 0 when
  there is none. Nil when its applied index or every commit index is
  unknown.
  """
  @spec lag(Commits.t(), non_neg_integer() | nil, integer()) :: lag() | nil
  def lag(_commits, nil, _at), do: nil
  def lag([], _applied, _at), do: nil

  def lag(commits, applied, at) do
    # Samples older than `at` that were pruned were at or below every
    # member's applied index: nothing the member lacked.
    entries = max((Commits.known_at(commits, at) || applied) - applied, 0)

    ms =
      case Commits.reached(commits, applied + 1) do
        reached when is_integer(reached) and reached <= at -> at - reached
        _not_committed_as_of_at -> 0
      end

    {entries, ms}
  end

  @doc """
  Every member of `nodes` as a reader on this node shows it, from the
  reports it holds (`%{node => report()}`), the nodes connected, and
  `stale_ms`: a report older than that is a silent member's. Each member's
  lag is the one the freshest leader (not stale, connected, the highest
  term) computed; nil without one.
  """
  @spec views([node()], %{node() => report()}, MapSet.t(node()), pos_integer()) :: [t()]
  def views(nodes, reports, connected, stale_ms) do
    lags =
      reports
      |> Enum.filter(fn {node, {figures, lags, age}} ->
        figures.role == :leader and is_map(lags) and age <= stale_ms and
          MapSet.member?(connected, node)
      end)
      |> Enum.max_by(fn {_node, {figures, _lags, _age}} -> figures.term end, fn -> nil end)
      |> case do
        {_node, {_figures, lags, _age}} -> lags
        nil -> %{}
      end

    for node <- nodes do
      report =
        case reports do
          %{^node => {figures, _lags, age}} -> {figures, age}
          _ -> nil
        end

      view(node, report, MapSet.member?(connected, node), Map.get(lags, node), stale_ms)
    end
  end

  @doc """
  A member as a reader on this node shows it: the last report it holds
  (`nil`: none yet) received `age_ms` ago, and its lag as the leader gave
  it (nil: no leader gave one). A member whose node is not connected is
  `:down`; one whose report is older than `stale_ms`, or that never
  reported, is `:unknown`; either has no figures but its node (and the
  age of its last report).
  """
  @spec view(node(), {t(), non_neg_integer()} | nil, boolean(), lag() | nil, pos_integer()) ::
          t()
  def view(node, report, connected?, lag, stale_ms) do
    case report do
      _ when not connected? ->
        %{empty(node) | role: :down}

      {figures, age} when age <= stale_ms ->
        {entries, ms} = lag || {nil, nil}
        %{figures | node: node, age_ms: age, lag_entries: entries, lag_ms: ms}

      {_figures, age} ->
        %{empty(node) | age_ms: age}

      nil ->
        empty(node)
    end
  end

  defp empty(node) do
    @numbers
    |> Map.new(&{&1, nil})
    |> Map.merge(%{node: node, role: :unknown, age_ms: nil})
  end
end
