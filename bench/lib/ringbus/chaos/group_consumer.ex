defmodule Ringbus.Chaos.GroupConsumer do
  @moduledoc """
  A consumer of a consumer group (`Ringbus.Groups`) in the chaos workload
  (`Ringbus.Chaos.Workload`): it fetches (a long poll), acks each message
  on its own, now and then takes over others' messages idle
  `@min_idle_ms` (`autoclaim/5`), works long enough on one for the others
  to claim it, or crashes before it acks: its process exits and a new one
  goes on under the same consumer name, so the group delivers what the
  dead one held again.

  What it records (`{process, type, op, value, time}`, see
  `Ringbus.Chaos.History`):

    * `:fetch`, `:autoclaim` - invoked with `{channel, group, consumer}`,
      completed with `{channel, group, consumer, [{seq, key, deliveries}]}`
      (`:ok`) or `{channel, group, consumer, reason}`;
    * `:group_ack` - one seq: `{channel, group, seq}`, completed with
      `{channel, group, seq, n}` (`:ok`: `n` is 1 when the seq was
      pending, else 0) or `{channel, group, seq, reason}`;
    * `:crash` - an unpaired `:info` of `{channel, group, consumer, seqs}`:
      the process exits holding `seqs`, unacked.

  After the producers stop (and the workload's `:drain_ms`), it stops once
  a fetch finds nothing (or fails) and the group has nothing pending nor
  unread (or is gone), or at `:group_drain_ms` after the producers
  stopped.
  """

  alias Ringbus.Chaos.{History, Payload}

  @max 4
  @wait_ms 200
  @crash_ratio 0.03
  @claim_ratio 0.05
  @slow_ratio 0.01
  @min_idle_ms 500

  @doc "Consumes `group` of `ch` as consumer `id`, one process a life; returns the ops made."
  @spec run(map(), term(), term(), binary()) :: non_neg_integer()
  def run(spec, id, ch, group),
    do: lives(spec, %{id: id, ch: ch, group: group, consumer: "consumer-#{id}"}, 0, 0)

  defp lives(spec, who, life, ops) do
    {pid, ref} = spawn_monitor(fn -> live(spec, who, life) end)

    receive do
      {:DOWN, ^ref, :process, ^pid, {:crashed, made}} -> lives(spec, who, life + 1, ops + made)
      {:DOWN, ^ref, :process, ^pid, {:done, made}} -> ops + made
      {:DOWN, ^ref, :process, ^pid, reason} -> exit({:group_consumer, who.id, reason})
    end
  end

  defp live(spec, who, life) do
    :rand.seed(:exsss, {spec.seed, who.id, 2 + life})
    exit(loop(spec, who, 0))
  end

  defp loop(spec, who, ops) do
    now = System.os_time(:millisecond)

    cond do
      ops >= spec.max_ops or History.full?(spec.history) -> {:done, ops}
      now >= spec.until + spec.group_drain_ms -> {:done, ops}
      true -> take(spec, who, ops, now > spec.until + spec.drain_ms)
    end
  end

  defp take(spec, who, ops, draining) do
    op = if :rand.uniform() < @claim_ratio, do: :autoclaim, else: :fetch
    consumer = who.consumer
    History.record(spec.history, who.id, :invoke, op, {who.ch, who.group, consumer})
    result = take_op(op, who, consumer)
    type = History.classify(result)

    case result do
      {:ok, messages} ->
        keys = for {seq, payload, n} <- messages, do: {seq, Payload.key(payload), n}
        History.record(spec.history, who.id, :ok, op, {who.ch, who.group, consumer, keys})
        work(spec, who, messages, ops + 1, draining)

      {:error, reason} ->
        History.record(spec.history, who.id, type, op, {who.ch, who.group, consumer, reason})

        if draining and drained?(who) do
          {:done, ops + 1}
        else
          Process.sleep(50)
          loop(spec, who, ops + 1)
        end
    end
  end

  defp take_op(:fetch, who, consumer),
    do: Ringbus.Groups.fetch(who.ch, who.group, consumer, @max, timeout: @wait_ms)

  defp take_op(:autoclaim, who, consumer),
    do: Ringbus.Groups.autoclaim(who.ch, who.group, consumer, @min_idle_ms, @max)

  defp work(spec, who, [], ops, true) do
    if drained?(who), do: {:done, ops}, else: loop(spec, who, ops)
  end

  defp work(spec, who, messages, ops, _draining) do
    r = :rand.uniform()

    cond do
      messages == [] ->
        loop(spec, who, ops)

      r < @crash_ratio ->
        seqs = for {seq, _, _} <- messages, do: seq

        History.record(
          spec.history,
          who.id,
          :info,
          :crash,
          {who.ch, who.group, who.consumer, seqs}
        )

        {:crashed, ops}

      true ->
        # Long enough for another consumer's autoclaim to take them.
        if r < @crash_ratio + @slow_ratio, do: Process.sleep(2 * @min_idle_ms)
        acks = for {seq, _, _} <- messages, do: ack(spec, who, seq)
        loop(spec, who, ops + Enum.sum(acks))
    end
  end

  defp ack(spec, who, seq) do
    History.record(spec.history, who.id, :invoke, :group_ack, {who.ch, who.group, seq})

    case Ringbus.Groups.ack(who.ch, who.group, [seq]) do
      {:ok, n} ->
        History.record(spec.history, who.id, :ok, :group_ack, {who.ch, who.group, seq, n})

      {:error, reason} = error ->
        type = History.classify(error)
        History.record(spec.history, who.id, type, :group_ack, {who.ch, who.group, seq, reason})
    end

    1
  end

  # Nothing pending nor unread in the group, or no group to drain.
  defp drained?(who) do
    case Ringbus.Groups.info(who.ch) do
      {:ok, groups} ->
        case Enum.find(groups, &(&1.name == who.group)) do
          %{pending: 0, lag: 0} -> true
          nil -> true
          _ -> false
        end

      {:error, _} ->
        false
    end
  end
end
