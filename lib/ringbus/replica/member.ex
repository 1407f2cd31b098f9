defmodule Ringbus.Replica.Member do
  @moduledoc false
  # The figures of one member of a replicated channel, as `Ringbus.info/1`
  # (`:replication`), `/status` and `/metrics` show them. Pure: the
  # reporter (`Ringbus.Replica.Reporter`) gathers the inputs on the
  # member's node and calls `figures/3`; readers on any node call `view/4`
  # on the last report they hold.
  #
  # Lag: `lag_entries` is the leader's commit index (the highest this node
  # knows: its own, else the leader's last report, which is at most
  # `stale_ms` old) minus this member's applied index; nil when no fresh
  # figure of the leader is at hand. `lag_ms` is how long the member has
  # been behind: the time since a report last found it caught up (0 when
  # it is), so its resolution is Ra's metrics tick plus the report
  # interval, about 2 s.

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
          age_ms: non_neg_integer() | nil
        }

  @numbers [
    :term,
    :commit_index,
    :applied_index,
    :applied_seq,
    :snapshot_index,
    :lag_entries,
    :lag_ms,
    :elections,
    :snapshot_bytes,
    :log_bytes
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
  A member's figures on its own node. `ra` holds Ra's (`role`, `term`,
  `commit_index`, `applied_index`, `snapshot_index`, or nil with no
  server), `leader_commit` the leader's commit index as known (nil:
  unknown), `seen` what the reporter kept from its last report
  (`:first_term`, `:caught_up_at`), and `extra` the rest (`applied_seq`,
  `snapshot_bytes`, `log_bytes`). Returns the figures and what to keep.
  """
  @spec figures(map() | nil, non_neg_integer() | nil, map(), map(), integer()) :: {t(), map()}
  def figures(ra, leader_commit, seen, extra, now) do
    base = Map.merge(empty(node()), Map.take(extra, [:applied_seq, :snapshot_bytes, :log_bytes]))

    case ra do
      nil ->
        {%{base | role: :down, lag_ms: lag_ms(seen, now)}, seen}

      %{term: term, applied_index: applied, commit_index: commit} ->
        first_term = Map.get(seen, :first_term) || term
        # Its own commit index came from the leader: it bounds the leader's from below.
        known = if leader_commit, do: max(leader_commit, commit)
        lag = if known, do: max(known - applied, 0)
        caught_up_at = if lag == 0, do: now, else: Map.get(seen, :caught_up_at, now)

        figures = %{
          base
          | role: role(ra.role),
            term: term,
            commit_index: commit,
            applied_index: applied,
            snapshot_index: ra[:snapshot_index],
            lag_entries: lag,
            lag_ms: now - caught_up_at,
            elections: term - first_term
        }

        {figures, %{first_term: first_term, caught_up_at: caught_up_at}}
    end
  end

  defp lag_ms(%{caught_up_at: at}, now), do: now - at
  defp lag_ms(_seen, _now), do: nil

  @doc """
  A member as a reader on this node shows it: the last report it holds
  (`nil`: none yet) received `age_ms` ago. A member whose node is not
  connected is `:down`; one whose report is older than `stale_ms`, or that
  never reported, is `:unknown`; either has no figures but its node.
  """
  @spec view(node(), {t(), non_neg_integer()} | nil, boolean(), pos_integer()) :: t()
  def view(node, report, connected?, stale_ms) do
    case report do
      _ when not connected? -> %{empty(node) | role: :down}
      {figures, age} when age <= stale_ms -> %{figures | node: node, age_ms: age}
      {_figures, age} -> %{empty(node) | age_ms: age}
      nil -> empty(node)
    end
  end

  defp empty(node) do
    @numbers
    |> Map.new(&{&1, nil})
    |> Map.merge(%{node: node, role: :unknown, age_ms: nil})
  end
end
