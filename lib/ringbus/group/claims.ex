defmodule Ringbus.Group.Claims do
  @moduledoc false
  # A group's pending entries (`Ringbus.Group`'s `:pending`) and their
  # claims (`:autoclaim`, `:claim`), as Redis 7.0's XPENDING, XAUTOCLAIM and
  # XCLAIM: each pending entry idle at least `min_idle` ms goes to the
  # consumer, with its delivery time (now, or the one given) and count (one
  # more, or the one given; JUSTID leaves it). FORCE claims entries the
  # ring holds that are in no PEL; an entry the ring no longer holds leaves
  # the PEL. `last` moves the group's position forward.

  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{At, Table}

  @doc "How many entries are pending, the lowest and highest, and each consumer's count."
  def summary(%{table: t, c: c} = at, group) do
    with {:ok, _} <- At.fetch(at, group) do
      case Table.pending_bounds(t, c, group) do
        nil ->
          {:ok, nil}

        {low, high} ->
          counts = Table.pending_by_consumer(t, c, group)
          {:ok, {counts |> Map.values() |> Enum.sum(), low, high, Enum.sort(counts)}}
      end
    end
  end

  @doc "Up to `count` PEL rows from `from` through `to`, idle `min_idle` ms or more."
  def pending(%{table: t, c: c} = at, group, {from, to}, count, consumer, min_idle) do
    with {:ok, _} <- At.fetch(at, group),
         {:ok, low} <- At.position(at, from),
         {:ok, high} <- At.position(at, to) do
      now = at.now

      rows = if count > 0, do: Table.pending(t, c, group, low, high, count, consumer), else: []

      idle =
        for {seq, owner, time, deliveries} <- rows,
            now - time >= min_idle,
            do: {seq, owner, max(now - time, 0), deliveries}

      {:ok, idle}
    end
  end

  @doc """
  Claims for `consumer` up to `count` entries idle `min_idle` ms, from seq
  `from`, looking at no more than ten times `count` pending entries, as Redis.
  """
  def autoclaim(%{table: t, c: c} = at, group, consumer, min_idle, from, count, justid) do
    with {:ok, _} <- At.fetch(at, group),
         {:ok, from} <- At.position(at, from) do
      Table.add_consumer(t, c, group, consumer, at.now)
      {:ok, claim_idle(at, group, consumer, min_idle, from, count, justid)}
    end
  end

  # As Redis's XAUTOCLAIM: looks at up to `count * 10` pending entries from
  # `from`, until `count` are claimed or found gone; the cursor is the
  # pending entry after the last looked at (nil: none left).
  defp claim_idle(%{table: t, c: c} = at, group, consumer, min_idle, from, count, justid) do
    rows = Table.pending(t, c, group, from, At.all(), count * 10 + 1)
    claim = %{consumer: consumer, min_idle: min_idle, justid: justid}
    {claimed, deleted, rest} = claim_idle(at, group, claim, rows, count * 10, count, [], [])
    next = with [{seq, _, _, _} | _] <- rest, do: seq, else: (_ -> nil)
    {next, :lists.reverse(claimed), :lists.reverse(deleted)}
  end

  defp claim_idle(_at, _group, _claim, rows, attempts, left, claimed, deleted)
       when rows == [] or attempts == 0 or left == 0,
       do: {claimed, deleted, rows}

  defp claim_idle(
         %{table: t, c: c} = at,
         group,
         claim,
         [row | rows],
         attempts,
         left,
         claimed,
         deleted
       ) do
    {seq, _, time, _} = row
    next = &claim_idle(at, group, claim, rows, attempts - 1, &1, &2, &3)

    # As Redis, an entry gone leaves the PEL whatever its idle time.
    case Ring.read(at.channel, seq, 1) do
      {[{^seq, _payload}], _, _, _} when at.now - time < claim.min_idle ->
        next.(left, claimed, deleted)

      {[{^seq, payload}], _, _, _} ->
        if claim_row(t, c, group, row, claim.consumer, at.now, not claim.justid),
          do: next.(left - 1, [claimed(seq, payload, claim.justid) | claimed], deleted),
          else: next.(left, claimed, deleted)

      _ ->
        Table.forget(t, c, group, seq)
        next.(left - 1, claimed, [seq | deleted])
    end
  end

  defp claimed(seq, _payload, true), do: seq
  defp claimed(seq, payload, false), do: {seq, payload}

  @doc "Claims the pending entries `refs` names for `consumer` (see `Ringbus.Group`)."
  def claim(%{table: t, c: c} = at, group, consumer, refs, min_idle, opts) do
    with {:ok, g} <- At.fetch(at, group),
         {:ok, last} <- last(at, opts.last) do
      now = at.now
      time = delivery_time(opts.time, now)
      if last != nil and last > g.last, do: Table.set_last(t, c, group, last, nil)
      claim = %{consumer: consumer, min_idle: min_idle, time: time, now: now, opts: opts}
      {:ok, for(ref <- refs, claimed = claim_one(at, group, ref, claim), do: claimed)}
    end
  end

  defp last(_at, nil), do: {:ok, nil}
  defp last(at, ref), do: At.position(at, ref)

  # As Redis: a time in the future, or before 1970, is now.
  defp delivery_time(nil, now), do: now
  defp delivery_time({:idle, idle}, now), do: delivery_time({:at, now - idle}, now)
  defp delivery_time({:at, at}, now) when at < 0 or at > now, do: now
  defp delivery_time({:at, at}, _now), do: at

  # What one entry gives, or nil when it is not claimed.
  defp claim_one(%{table: t, c: c} = at, group, ref, claim) do
    with {:ok, seq} <- At.entry(at, ref) do
      case Ring.read(at.channel, seq, 1) do
        {[{^seq, payload}], _, _, _} ->
          row =
            case Table.pending(t, c, group, seq, seq, 1) do
              [row] ->
                row

              # A FORCE-made row has no idle time to check.
              [] when claim.opts.force ->
                Table.add_pending(t, c, group, claim.consumer, [seq], claim.now)
                {:forced, {seq, claim.consumer, claim.now, 1}}

              [] ->
                nil
            end

          take(at, group, row, payload, claim)

        _ ->
          # Not in the ring: it leaves the PEL, if it is there.
          Table.forget(t, c, group, seq)
          nil
      end
    else
      :none -> nil
    end
  end

  defp take(_at, _group, nil, _payload, _claim), do: nil

  defp take(%{table: t, c: c}, group, row, payload, claim) do
    {check?, {seq, owner, delivered, deliveries}} =
      case row do
        {:forced, row} -> {false, row}
        row -> {true, row}
      end

    deliveries =
      cond do
        claim.opts.retry != nil -> claim.opts.retry
        claim.opts.justid -> deliveries
        true -> deliveries + 1
      end

    cond do
      check? and claim.min_idle > 0 and claim.now - delivered < claim.min_idle ->
        nil

      claim_row(
        t,
        c,
        group,
        {seq, owner, delivered, deliveries},
        claim.consumer,
        claim.time,
        false
      ) ->
        # As Redis 7.0: the consumer is made by its first claim.
        Table.add_consumer(t, c, group, claim.consumer, claim.now)
        claimed(seq, payload, claim.opts.justid)

      true ->
        nil
    end
  end

  # Gives a PEL row to `consumer` if it is still as read (same owner and
  # delivery time), delivered at `at` and due `ack_wait` after: true if this
  # caller got it.
  defp claim_row(t, c, group, {seq, owner, delivered, deliveries}, consumer, at, count?) do
    deliveries = if count?, do: deliveries + 1, else: deliveries

    case Table.row(t, c, group, seq) do
      {^seq, ^owner, ^delivered, _n, _due} = row ->
        due = at + Table.config_of(t, c, group).ack_wait
        Table.replace(t, c, group, row, {seq, consumer, at, deliveries, due})

      _ ->
        false
    end
  end
end
