defmodule Ringbus.Chaos.Checker do
  @moduledoc """
  Reads a history (`Ringbus.Chaos.History`) and the final state of every
  channel, and counts what went wrong. Pure functions: no process, no node.

  The final state of a channel, read at its home once the cluster healed:

    * `:messages` - every message still readable, `[{seq, key}]` in seq
      order (keys from `Ringbus.Chaos.Payload.key/1`);
    * `:info` - `Ringbus.info/1` of the channel (or `nil` if it could not
      be read);
    * `:restarts` - the times (`System.os_time(:microsecond)`) at which its
      home node was started again after a kill. A channel lives in memory,
      so each restart begins a new incarnation, numbered from 0.

  What a message is stored as comes from the final reads and from what the
  consumers saw (reads, pulls, deliveries): a *copy* is one key at one
  `{channel, seq}`. Counts are of messages (keys), not of operations, so a
  `push_many` of ten counts ten.

    * `:lost` - an acked message of the channel's current incarnation whose
      seq is still in the held range but holds something else, or more
      acked messages below the held range than `pulled + overwritten`.
    * `:lost_to_crash` - acked messages of an earlier incarnation that are
      not readable, by `{channel, incarnation}`: memory-only channels lose
      them by design.
    * `:duplicated` - copies beyond the first of one key.
    * `:unexpected` - copies of payloads no producer pushed, or more copies
      than the key had attempts to account for them.
    * `:false_failures` - copies not acked that a `:fail` attempt of the key
      must have stored (`:false_failures_by_reason` by error; when a key
      failed for several reasons, the likeliest is named: `node_busy`,
      then `node_down`, then the others).
    * `:info_stored` / `:info_not_stored` - `:info` attempts (unknown
      outcome) with and without a copy to show for them.
    * `:order` - a producer's acked pushes to one channel in one
      incarnation whose seqs do not increase, a producer's messages read
      back with counters going down (first copies only: a batch stored
      twice is duplicated, not disordered), or a subscriber sent a seq
      again.
    * `:subscriber_gaps` - messages a subscription skipped without counting
      them in `lost`.
    * `:counter_mismatches` - channels where `pushed != pulled +
      overwritten + len`, or `len` differs from the messages read.
    * `:unchecked` - acked messages of a channel with no final state.

  With the final state of consumer groups (`check/3`), the report adds
  `Ringbus.Chaos.GroupChecker`'s counts: `:group_lost`,
  `:acked_redelivered`, `:delivery_count_down`, `:members_disagreeing`,
  `:redeliveries` and the figures beside them.
  """

  alias Ringbus.Chaos.{GroupChecker, History}

  @type final :: %{
          messages: [{non_neg_integer(), term()}],
          info: map() | nil,
          restarts: [integer()]
        }

  @type report :: %{
          ok: non_neg_integer(),
          fail: non_neg_integer(),
          info: non_neg_integer(),
          held: non_neg_integer(),
          gone: non_neg_integer(),
          lost: non_neg_integer(),
          lost_to_crash: %{{term(), non_neg_integer()} => pos_integer()},
          duplicated: non_neg_integer(),
          unexpected: non_neg_integer(),
          false_failures: non_neg_integer(),
          false_failures_by_reason: %{atom() => pos_integer()},
          info_stored: non_neg_integer(),
          info_not_stored: non_neg_integer(),
          order: non_neg_integer(),
          subscriber_gaps: non_neg_integer(),
          counter_mismatches: [term()],
          unchecked: non_neg_integer(),
          examples: %{order: [tuple()]},
          group_deliveries: non_neg_integer(),
          group_acks: non_neg_integer(),
          group_lost: non_neg_integer(),
          group_left: non_neg_integer(),
          acked_redelivered: non_neg_integer(),
          delivery_count_down: non_neg_integer(),
          members_disagreeing: [{term(), term(), term()}],
          redeliveries: non_neg_integer()
        }

  @push_ops [:push, :push_many]

  # `:examples` holds up to five order violations: `{:acked, process,
  # channel, {last_seq, time}, {first_seq, time}}`, `{:read, producer,
  # channel, {seq, counter}, {seq, counter}}` or `{:delivered, {process,
  # sub}, expected_seq, first_seq}`.

  @doc """
  Checks `history` against the final state of each channel (`%{channel =>
  final}`) and of each consumer group (`%{{channel, group} =>
  GroupChecker.final()}`).
  """
  @spec check([History.entry()], %{term() => final()}, %{term() => GroupChecker.final()}) ::
          report()
  def check(history, finals, groups \\ %{}) do
    {attempts, observed, deliveries} = scan(history)
    finals = Map.new(finals, fn {ch, final} -> {ch, prepare(final)} end)
    observed = observed ++ for({ch, f} <- finals, {seq, key} <- f.messages, do: {ch, seq, key})

    copies =
      Enum.reduce(observed, %{}, fn {ch, seq, key}, acc ->
        Map.update(acc, key, MapSet.new([{ch, seq}]), &MapSet.put(&1, {ch, seq}))
      end)

    by_key = attempts_by_key(attempts)

    report =
      %{
        ok: 0,
        fail: 0,
        info: 0,
        held: 0,
        gone: 0,
        lost: 0,
        lost_to_crash: %{},
        duplicated: 0,
        unexpected: 0,
        false_failures: 0,
        false_failures_by_reason: %{},
        info_stored: 0,
        info_not_stored: 0,
        order: 0,
        subscriber_gaps: 0,
        counter_mismatches: [],
        unchecked: 0,
        examples: %{order: []}
      }
      |> count_attempts(attempts)
      |> check_copies(copies, by_key)
      |> check_acked(attempts, finals)
      |> check_order(attempts, finals)
      |> check_deliveries(deliveries)
      |> check_counters(finals)

    report
    |> Map.put(:info_not_stored, report.info - report.info_stored)
    |> Map.merge(GroupChecker.check(history, groups))
  end

  # Attempts of pushes (completed, or invoked and never completed: :info),
  # what the consumers saw, and the deliveries by subscription.
  defp scan(history) do
    {pending, attempts, observed, deliveries} =
      Enum.reduce(history, {%{}, [], [], %{}}, fn entry,
                                                  {pending, attempts, observed, deliveries} ->
        case entry do
          {process, :invoke, op, value, time} when op in @push_ops ->
            {Map.put(pending, process, {op, value, time}), attempts, observed, deliveries}

          {process, type, op, {ch, keys, result}, time} when op in @push_ops ->
            attempt = %{
              process: process,
              ch: ch,
              keys: keys,
              type: type,
              result: result,
              time: time
            }

            {Map.delete(pending, process), [attempt | attempts], observed, deliveries}

          {_, :ok, :read, {ch, _from, messages, _lost}, _} ->
            {pending, attempts, seen(ch, messages, observed), deliveries}

          {_, :ok, :pull, {ch, messages}, _} ->
            {pending, attempts, seen(ch, messages, observed), deliveries}

          # A delivery of no message only counts what the subscription lost.
          {process, :ok, :deliver, {_ch, sub, [], lost}, _} ->
            batch = {:lost, lost}
            deliveries = Map.update(deliveries, {process, sub}, [batch], &[batch | &1])
            {pending, attempts, observed, deliveries}

          {process, :ok, :deliver, {ch, sub, messages, lost}, _} ->
            [{first, _} | _] = messages
            {last, _} = List.last(messages)
            batch = {first, last, lost}
            deliveries = Map.update(deliveries, {process, sub}, [batch], &[batch | &1])
            {pending, attempts, seen(ch, messages, observed), deliveries}

          _ ->
            {pending, attempts, observed, deliveries}
        end
      end)

    never_completed =
      for {process, {_op, {ch, keys}, time}} <- pending,
          do: %{
            process: process,
            ch: ch,
            keys: keys,
            type: :info,
            result: :no_completion,
            time: time
          }

    deliveries = Map.new(deliveries, fn {sub, batches} -> {sub, lost_forward(batches, [])} end)
    {Enum.reverse(attempts) ++ never_completed, observed, deliveries}
  end

  # Newest first in, oldest first out: a lost-only delivery's count joins the
  # next batch's, which must then start that much further on.
  defp lost_forward([{:lost, n} | rest], acc), do: lost_forward(rest, add_lost(acc, n))
  defp lost_forward([batch | rest], acc), do: lost_forward(rest, [batch | acc])
  defp lost_forward([], acc), do: acc

  defp add_lost([{first, last, lost} | rest], n), do: [{first, last, lost + n} | rest]
  defp add_lost([], _n), do: []

  defp seen(ch, messages, observed),
    do: Enum.reduce(messages, observed, fn {seq, key}, acc -> [{ch, seq, key} | acc] end)

  defp prepare(final) do
    final = Map.merge(%{messages: [], info: nil, restarts: []}, final)

    first =
      case final.messages do
        [{seq, _} | _] -> seq
        [] -> if final.info, do: final.info.next_seq, else: 0
      end

    Map.merge(final, %{
      held: Map.new(final.messages),
      first: first,
      incarnation: Enum.count(final.restarts)
    })
  end

  # Per key: the positions its acks name, and its failed and unknown attempts.
  defp attempts_by_key(attempts) do
    Enum.reduce(attempts, %{}, fn attempt, acc ->
      attempt.keys
      |> Enum.with_index()
      |> Enum.reduce(acc, fn {key, i}, acc ->
        stats = Map.get(acc, key, %{acked: MapSet.new(), fails: [], infos: 0})

        stats =
          case attempt.type do
            :ok -> %{stats | acked: MapSet.put(stats.acked, {attempt.ch, attempt.result + i})}
            :fail -> %{stats | fails: [attempt.result | stats.fails]}
            :info -> %{stats | infos: stats.infos + 1}
          end

        Map.put(acc, key, stats)
      end)
    end)
  end

  defp count_attempts(report, attempts) do
    Enum.reduce(attempts, report, fn %{type: type, keys: keys}, report ->
      Map.update!(report, type, &(&1 + Enum.count(keys)))
    end)
  end

  defp check_copies(report, copies, by_key) do
    Enum.reduce(copies, report, fn {key, positions}, report ->
      n = MapSet.size(positions)
      report = %{report | duplicated: report.duplicated + n - 1}

      case Map.fetch(by_key, key) do
        :error ->
          %{report | unexpected: report.unexpected + n}

        {:ok, stats} ->
          unacked = MapSet.size(MapSet.difference(positions, stats.acked))
          info_stored = min(unacked, stats.infos)
          false_failures = min(unacked - info_stored, Enum.count(stats.fails))
          # Which failed attempt stored a copy is not known: the likeliest first.
          reasons = stats.fails |> Enum.sort_by(&likelihood/1) |> Enum.take(false_failures)

          %{
            report
            | info_stored: report.info_stored + info_stored,
              false_failures: report.false_failures + false_failures,
              false_failures_by_reason:
                Enum.reduce(reasons, report.false_failures_by_reason, fn reason, acc ->
                  Map.update(acc, reason, 1, &(&1 + 1))
                end),
              unexpected: report.unexpected + unacked - info_stored - false_failures
          }
      end
    end)
  end

  defp likelihood(:node_busy), do: 0
  defp likelihood(:node_down), do: 1
  defp likelihood(_), do: 2

  # Every acked message is held where its ack said, or gone and counted, or
  # went with an earlier incarnation.
  defp check_acked(report, attempts, finals) do
    {report, gone} =
      for %{type: :ok} = attempt <- attempts,
          {key, i} <- Enum.with_index(attempt.keys),
          reduce: {report, %{}} do
        {report, gone} ->
          seq = attempt.result + i

          case Map.fetch(finals, attempt.ch) do
            :error ->
              {%{report | unchecked: report.unchecked + 1}, gone}

            {:ok, final} ->
              incarnation = Enum.count(final.restarts, &(&1 < attempt.time))

              cond do
                Map.get(final.held, seq) == key ->
                  {%{report | held: report.held + 1}, gone}

                incarnation < final.incarnation ->
                  crash =
                    Map.update(report.lost_to_crash, {attempt.ch, incarnation}, 1, &(&1 + 1))

                  {%{report | lost_to_crash: crash}, gone}

                seq < final.first ->
                  {report, Map.update(gone, attempt.ch, 1, &(&1 + 1))}

                true ->
                  {%{report | lost: report.lost + 1}, gone}
              end
          end
      end

    Enum.reduce(gone, report, fn {ch, n}, report ->
      counted =
        case finals[ch].info do
          nil -> n
          info -> min(n, info.pulled + info.overwritten)
        end

      %{report | gone: report.gone + counted, lost: report.lost + n - counted}
    end)
  end

  defp check_order(report, attempts, finals) do
    acked =
      for %{type: :ok} = a <- attempts do
        restarts = get_in(finals, [a.ch, :restarts]) || []
        incarnation = Enum.count(restarts, &(&1 < a.time))
        {{a.process, a.ch, incarnation}, {a.result, a.result + Enum.count(a.keys) - 1, a.time}}
      end

    acked_violations =
      for {{process, ch, _}, ranges} <- Enum.group_by(acked, &elem(&1, 0), &elem(&1, 1)),
          [{_, last, t0}, {first, _, t1}] <- Enum.chunk_every(ranges, 2, 1, :discard),
          first <= last,
          do: {:acked, process, ch, {last, t0}, {first, t1}}

    read_violations =
      for {ch, final} <- finals,
          {producer, seqs} <-
            final.messages
            |> Enum.filter(&match?({_, {p, _}} when is_integer(p), &1))
            |> Enum.group_by(fn {_, {p, _}} -> p end, fn {seq, {_, c}} -> {seq, c} end),
          # A retried message stored twice is a duplicate, not disorder: first copies only.
          [{s0, c0}, {s1, c1}] <-
            seqs |> Enum.uniq_by(&elem(&1, 1)) |> Enum.chunk_every(2, 1, :discard),
          c1 < c0,
          do: {:read, producer, ch, {s0, c0}, {s1, c1}}

    violations = acked_violations ++ read_violations

    %{
      report
      | order: report.order + Enum.count(violations),
        examples: Map.update!(report.examples, :order, &Enum.take(&1 ++ violations, 5))
    }
  end

  defp check_deliveries(report, deliveries) do
    Enum.reduce(deliveries, report, fn {sub, batches}, report ->
      batches
      |> Enum.chunk_every(2, 1, :discard)
      |> Enum.reduce(report, fn [{_, prev_last, _}, {first, _, lost}], report ->
        expected = prev_last + 1 + lost

        cond do
          first > expected ->
            %{report | subscriber_gaps: report.subscriber_gaps + first - expected}

          first < expected ->
            example = {:delivered, sub, expected, first}
            examples = Map.update!(report.examples, :order, &Enum.take(&1 ++ [example], 5))
            %{report | order: report.order + 1, examples: examples}

          true ->
            report
        end
      end)
    end)
  end

  defp check_counters(report, finals) do
    mismatches =
      for {ch, %{info: info} = final} <- finals,
          info != nil,
          info.pushed != info.pulled + info.overwritten + info.len or
            info.len != Enum.count(final.messages),
          do: ch

    %{report | counter_mismatches: Enum.sort(mismatches)}
  end

  @doc "The report as a table, one line per count, with what it means."
  @spec table(report()) :: String.t()
  def table(report) do
    crash = report.lost_to_crash |> Map.values() |> Enum.sum()

    crash_detail =
      report.lost_to_crash
      |> Enum.sort()
      |> Enum.map_join(", ", fn {{ch, inc}, n} -> "#{ch}##{inc}: #{n}" end)

    reasons =
      Enum.map_join(Enum.sort(report.false_failures_by_reason), ", ", fn {r, n} ->
        "#{r}: #{n}"
      end)

    rows = [
      {"acked (ok)", report.ok, "messages pushed and acked"},
      {"failed (fail)", report.fail, "message attempts answered an error that means not applied"},
      {"unknown (info)", report.info, "message attempts of unknown outcome"},
      {"held", report.held, "acked messages readable where their ack said"},
      {"gone, counted", report.gone,
       "acked messages below the held range, within pulled + overwritten"},
      {"lost", report.lost, "acked messages neither readable nor counted"},
      {"lost to a crash", crash, "acked messages of an earlier incarnation (#{crash_detail})"},
      {"duplicated", report.duplicated, "extra copies of one producer message"},
      {"unexpected", report.unexpected, "copies nobody pushed (or more than the attempts)"},
      {"false failures", report.false_failures, "failed attempts that were stored (#{reasons})"},
      {"info stored", report.info_stored, "unknown attempts that were stored"},
      {"info not stored", report.info_not_stored, "unknown attempts with no copy seen"},
      {"order", report.order, "a producer's messages or a subscription's batches out of order"},
      {"subscriber gaps", report.subscriber_gaps,
       "messages a subscription skipped without counting"},
      {"counter mismatches", Enum.count(report.counter_mismatches),
       "channels where pushed != pulled + overwritten + len (#{Enum.join(report.counter_mismatches, ", ")})"},
      {"unchecked", report.unchecked, "acked messages of a channel with no final read"}
      | GroupChecker.rows(report)
    ]

    lines =
      Enum.map(rows, fn {name, count, meaning} ->
        String.pad_trailing(name, 20) <>
          String.pad_leading(to_string(count), 9) <> "  " <> meaning
      end)

    examples = for e <- report.examples.order, do: "  order: " <> inspect(e)
    Enum.join(lines ++ examples, "\n")
  end
end
