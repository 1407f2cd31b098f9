defmodule Ringbus.Chaos.GroupChecker do
  @moduledoc """
  The consumer-group half of the checker (`Ringbus.Chaos.Checker`): reads
  what the group consumers (`Ringbus.Chaos.GroupConsumer`) recorded
  against each group's final figures (`Ringbus.Groups.info/1`). Pure
  functions: no process, no node.

  A group's final state (`t:final/0`):

    * `:figures` - the group's figures as the reference node sees them
      (the channel's home, or a replicated channel's leader), `nil` when
      the group is not there;
    * `:views` - `[{node, figures | nil | {:error, reason}}]`, the group as
      each member sees it once the cluster healed (the home only, for a
      channel in memory).

  A delivery is one message in the answer of a fetch or an autoclaim:
  `{seq, key, deliveries}`. Counts:

    * `:group_lost` - messages a producer's push put in the group's
      channel (answered `:ok`) that no consumer's ack took (an ack of that
      seq answered `{:ok, 1}`), beyond what the group counts `dead` and
      `lost` (to the ring), and beyond those whose ack had an unknown
      outcome (`:info`), as many of them as the group counts acked more
      than the acks answered `{:ok, 1}`; messages still pending or unread
      at the end are not excused, and are shown as `:group_left`;
      `:group_unacked` names up to five of the unacked seqs of a group
      with losses, `{channel, group, seq}`, to look for in the history;
    * `:acked_redelivered` - messages delivered by a fetch or claim
      invoked after an ack of them was answered `{:ok, 1}`;
    * `:delivery_count_down` - messages delivered with a count not above
      that of a delivery of theirs that was answered before it was
      invoked (the group forgot a delivery, or gave one message out twice);
    * `:members_disagreeing` - `{channel, group, node}` whose view differs
      from the reference's, `idle_ms` aside;
    * `:redeliveries` - deliveries with a count above 1 (expected: crashes,
      claims and faults cause them; not an error);
    * `:group_deliveries`, `:group_acks`, `:group_acks_unknown` -
      deliveries, acks answered `{:ok, 1}`, and acks of unknown outcome;
    * `:group_counted` - what the groups' figures count `acked`, `dead`
      and `lost` (to the ring), summed;
    * `:group_errors` - fetches, claims and acks answered an error, by
      reason.
  """

  @type final :: %{figures: map() | nil, views: [{term(), map() | nil | {:error, term()}}]}

  @type report :: %{
          group_deliveries: non_neg_integer(),
          group_acks: non_neg_integer(),
          group_acks_unknown: non_neg_integer(),
          group_errors: %{term() => pos_integer()},
          group_lost: non_neg_integer(),
          group_left: non_neg_integer(),
          group_counted: %{
            acked: non_neg_integer(),
            dead: non_neg_integer(),
            lost: non_neg_integer()
          },
          group_unacked: [{term(), binary(), non_neg_integer()}],
          acked_redelivered: non_neg_integer(),
          delivery_count_down: non_neg_integer(),
          members_disagreeing: [{term(), term(), term()}],
          redeliveries: non_neg_integer()
        }

  @push_ops [:push, :push_many]
  @deliver_ops [:fetch, :autoclaim]
  @group_ops [:group_ack | @deliver_ops]

  @doc "Checks `history` against each group's final state (`%{{channel, group} => final}`)."
  @spec check([Ringbus.Chaos.History.entry()], %{{term(), binary()} => final()}) :: report()
  def check(history, groups) do
    {stored, acks, unknown, deliveries} = scan(history, groups)
    by_message = Enum.group_by(deliveries, &elem(&1, 0))
    {lost, unacked} = lost(groups, stored, acks, unknown)

    %{
      group_deliveries: Enum.count(deliveries),
      group_acks: acks |> Map.values() |> Enum.map(&Enum.count/1) |> Enum.sum(),
      group_acks_unknown: MapSet.size(unknown),
      group_errors: errors(history),
      group_lost: lost,
      group_unacked: unacked,
      group_left: left(groups),
      group_counted: counted(groups),
      acked_redelivered: Enum.count(by_message, &acked_redelivered?(&1, acks)),
      delivery_count_down: Enum.count(by_message, fn {_, ds} -> count_down?(ds) end),
      members_disagreeing: disagreeing(groups),
      redeliveries: Enum.count(deliveries, fn {_, n, _, _} -> n > 1 end)
    }
  end

  # The seqs producers' acked pushes put in each group's channel, the
  # times each `{channel, group, seq}` was acked `{:ok, 1}`, those with an
  # ack of unknown outcome, and every delivery as `{{channel, group, seq},
  # deliveries, invoked, answered}`.
  defp scan(history, groups) do
    channels = MapSet.new(Map.keys(groups), &elem(&1, 0))
    empty = %{invoked: %{}, stored: %{}, acks: %{}, unknown: MapSet.new(), deliveries: []}

    scan =
      Enum.reduce(history, empty, fn entry, scan ->
        case entry do
          {_, :ok, op, {ch, keys, seq}, _} when op in @push_ops and is_integer(seq) ->
            if MapSet.member?(channels, ch) do
              seqs = seq..(seq + Enum.count(keys) - 1)

              %{
                scan
                | stored: Map.update(scan.stored, ch, MapSet.new(seqs), &Enum.into(seqs, &1))
              }
            else
              scan
            end

          {process, :invoke, op, _, time} when op in @deliver_ops ->
            %{scan | invoked: Map.put(scan.invoked, process, time)}

          {process, :ok, op, {ch, group, _consumer, messages}, time} when op in @deliver_ops ->
            since = Map.get(scan.invoked, process, time)
            new = for {seq, _key, n} <- messages, do: {{ch, group, seq}, n, since, time}
            %{scan | deliveries: new ++ scan.deliveries}

          {_, :ok, :group_ack, {ch, group, seq, 1}, time} ->
            %{scan | acks: Map.update(scan.acks, {ch, group, seq}, [time], &[time | &1])}

          {_, :info, :group_ack, {ch, group, seq, _reason}, _} ->
            %{scan | unknown: MapSet.put(scan.unknown, {ch, group, seq})}

          _ ->
            scan
        end
      end)

    {scan.stored, scan.acks, scan.unknown, scan.deliveries}
  end

  defp errors(history) do
    history
    |> Enum.filter(&match?({_, type, op, _, _} when type != :invoke and op in @group_ops, &1))
    |> Enum.reject(&match?({_, :ok, _, _, _}, &1))
    |> Enum.frequencies_by(fn {_, _, _, value, _} -> elem(value, 3) end)
  end

  defp lost(groups, stored, acks, unknown) do
    Enum.reduce(groups, {0, []}, fn {{ch, group}, final}, {sum, examples} ->
      unacked = Enum.reject(Map.get(stored, ch, []), &Map.has_key?(acks, {ch, group, &1}))
      maybe = Enum.count(unacked, &MapSet.member?(unknown, {ch, group, &1}))
      oks = Enum.count(acks, &match?({{^ch, ^group, _}, _}, &1))

      excused =
        case final.figures do
          %{dead: dead, lost: lost, acked: acked} -> dead + lost + min(maybe, max(acked - oks, 0))
          _ -> 0
        end

      n = Enum.count(unacked)
      lost = n - min(n, excused)

      named =
        if lost > 0,
          do: for(seq <- Enum.take(Enum.sort(unacked), 5), do: {ch, group, seq}),
          else: []

      {sum + lost, Enum.take(examples ++ named, 5)}
    end)
  end

  defp left(groups) do
    Enum.reduce(groups, 0, fn
      {_, %{figures: %{pending: pending, lag: lag}}}, sum -> sum + pending + lag
      _, sum -> sum
    end)
  end

  defp counted(groups) do
    for {_, %{figures: %{} = figures}} <- groups,
        key <- [:acked, :dead, :lost],
        reduce: %{acked: 0, dead: 0, lost: 0},
        do: (counts -> Map.update!(counts, key, &(&1 + figures[key])))
  end

  defp acked_redelivered?({message, deliveries}, acks) do
    case Map.fetch(acks, message) do
      {:ok, times} ->
        first_ack = Enum.min(times)
        Enum.any?(deliveries, fn {_, _, invoked, _} -> invoked > first_ack end)

      :error ->
        false
    end
  end

  defp count_down?(deliveries) do
    Enum.any?(deliveries, fn {_, n, invoked, _} ->
      Enum.any?(deliveries, fn {_, m, _, answered} -> answered < invoked and n <= m end)
    end)
  end

  defp disagreeing(groups) do
    Enum.flat_map(groups, fn {{ch, group}, final} ->
      reference = comparable(final.figures)
      for {node, view} <- final.views, comparable(view) != reference, do: {ch, group, node}
    end)
  end

  # A view with what differs between two reads of one state taken apart.
  defp comparable(%{consumers: consumers} = figures),
    do: %{figures | consumers: consumers |> Enum.map(&Map.delete(&1, :idle_ms)) |> Enum.sort()}

  defp comparable(other), do: other

  @doc "The report's rows for `Ringbus.Chaos.Checker.table/1`: `{name, count, meaning}`."
  @spec rows(map()) :: [{String.t(), non_neg_integer(), String.t()}]
  def rows(report) do
    disagreeing = Enum.map_join(report.members_disagreeing, ", ", &inspect/1)
    unacked = Enum.map_join(report.group_unacked, ", ", &inspect/1)
    counted = report.group_counted
    errors = Enum.map_join(Enum.sort(report.group_errors), ", ", fn {r, n} -> "#{r}: #{n}" end)

    [
      {"group deliveries", report.group_deliveries, "messages a group fetch or claim answered"},
      {"group acks", report.group_acks, "consumer acks answered {:ok, 1}"},
      {"group acks unknown", report.group_acks_unknown, "consumer acks of unknown outcome"},
      {"group errors", report.group_errors |> Map.values() |> Enum.sum(),
       "fetches, claims and acks answered an error (#{errors})"},
      {"group lost", report.group_lost,
       "pushed to a group's channel, never acked, beyond dead + lost to the ring (#{unacked})"},
      {"group left", report.group_left, "pending + lag of the groups at the end"},
      {"group dead + lost", counted.dead + counted.lost,
       "what the groups count dead (#{counted.dead}) and lost to the ring (#{counted.lost}); " <>
         "acked #{counted.acked}"},
      {"acked redelivered", report.acked_redelivered, "messages delivered after an ack of them"},
      {"delivery count down", report.delivery_count_down,
       "messages delivered with a count not above an earlier delivery's"},
      {"members disagreeing", Enum.count(report.members_disagreeing),
       "members whose view of a group differs (#{disagreeing})"},
      {"redeliveries", report.redeliveries, "deliveries after the first (expected)"}
    ]
  end
end
