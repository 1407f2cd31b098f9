defmodule Ringbus.Resp.ClaimCommands do
  @moduledoc false
  # The pending entries commands of `Ringbus.Resp.Session`: XPENDING,
  # XAUTOCLAIM and XCLAIM.
  #
  # XCLAIM, as Redis 7.0's xclaimCommand, on the PEL of
  # `Ringbus.Resp.Groups`: each pending entry whose idle time is at least
  # min-idle goes to the consumer, with its delivery time (now, IDLE
  # or TIME) and count (one more, or RETRYCOUNT; JUSTID leaves it). FORCE
  # claims entries the stream holds that are in no PEL; an ID the stream no
  # longer holds leaves the PEL. LASTID moves the group's position forward.
  #
  # Each command's work runs at the stream's home, on its group table
  # (`Ringbus.Resp.GroupHome`): the functions named `*_at`.

  alias Ringbus.Resp.{Args, Encoder, Entry, Errors, GroupHome, Groups, StreamCommands}

  @all 4_611_686_018_427_387_904

  ## XPENDING, XAUTOCLAIM

  def xpending([key, group | rest], s),
    do: {GroupHome.run(key, __MODULE__, :xpending_at, [group, rest], no_group(key, group)), s}

  @doc false
  def xpending_at(t, key, tag, group, rest) do
    cond do
      not match?({:ok, _}, Errors.check!(Ringbus.info(key), key)) or
          Groups.fetch(t, key, group) == :error ->
        no_group(key, group)

      rest == [] ->
        pending_summary(key, group, t, tag)

      true ->
        pending_range(key, group, rest, t, tag)
    end
  end

  defp pending_summary(key, group, t, tag) do
    case Groups.pending_bounds(t, key, group) do
      nil ->
        [0, nil, nil, :null_array]

      {low, high} ->
        counts = Groups.pending_by_consumer(t, key, group)
        total = counts |> Map.values() |> Enum.sum()
        consumers = for {name, n} <- Enum.sort(counts), do: [name, Integer.to_string(n)]
        [total, Entry.id(low, tag), Entry.id(high, tag), consumers]
    end
  end

  # XPENDING key group [IDLE ms] start end count [consumer]
  defp pending_range(key, group, args, t, tag) do
    {idle, args} =
      case args do
        [opt, ms | rest] ->
          if Args.upcase(opt) == "IDLE",
            do: {Args.integer(ms), rest},
            else: {{:ok, 0}, args}

        _ ->
          {{:ok, 0}, args}
      end

    with {:ok, idle} <- idle,
         [start, stop, count | consumer] when length(consumer) <= 1 <- args,
         {:ok, low} <- Entry.parse(strip(start), 0) |> id_or_bound(start),
         {:ok, high} <- Entry.parse(strip(stop), Entry.max_u64()) |> id_or_bound(stop),
         low = StreamCommands.pin!(low, tag, key),
         high = StreamCommands.pin!(high, tag, key),
         {:ok, count} <- Args.integer(count) do
      now = now()

      if count <= 0 do
        []
      else
        for {seq, owner, time, deliveries} <-
              Groups.pending(
                t,
                key,
                group,
                Entry.seq_from(low),
                Entry.seq_through(high),
                count,
                List.first(consumer)
              ),
            now - time >= idle,
            do: [Entry.id(seq, tag), owner, max(now - time, 0), deliveries]
      end
    else
      :error -> Errors.not_integer()
      {:error, reply} -> reply
      _ -> Errors.syntax_error()
    end
  end

  defp strip("-"), do: "0-0"
  defp strip("+"), do: "18446744073709551615-18446744073709551615"
  defp strip(text), do: text

  defp id_or_bound({:ok, id}, _text), do: {:ok, id}
  defp id_or_bound(:error, _text), do: {:error, Args.invalid_id()}

  # XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
  def xautoclaim([key, group, consumer, min_idle, start | opts], s) do
    with {:ok, min_idle} <- idle_arg(min_idle),
         {:ok, start} <- Entry.parse(strip(start)) |> id_or_bound(start),
         {:ok, count, justid} <- autoclaim_options(opts, 100, false) do
      args = [group, consumer, min_idle, start, count, justid]
      {GroupHome.run(key, __MODULE__, :xautoclaim_at, args, no_group(key, group)), s}
    else
      {:error, reply} -> {reply, s}
    end
  end

  @doc false
  def xautoclaim_at(t, key, tag, group, consumer, min_idle, start, count, justid) do
    with {:ok, _info} <- stream_of(key, group),
         {:ok, _group} <- Groups.fetch(t, key, group) |> group_or_error(key, group) do
      # The cursor of an XAUTOCLAIM before is of the stream's incarnation.
      from = Entry.seq_from(StreamCommands.pin!(start, tag, key))
      Groups.add_consumer(t, key, group, consumer, now())
      autoclaim(key, group, consumer, min_idle, {from, tag}, count, justid, t)
    else
      {:error, reply} -> reply
    end
  end

  defp idle_arg(text) do
    case Args.integer(text) do
      {:ok, n} -> {:ok, max(n, 0)}
      :error -> {:error, Encoder.error("ERR Invalid min-idle-time argument for XAUTOCLAIM")}
    end
  end

  defp autoclaim_options([], count, justid), do: {:ok, count, justid}

  defp autoclaim_options([opt | rest], count, justid) do
    case {Args.upcase(opt), rest} do
      {"COUNT", [n | rest]} ->
        case Args.integer(n) do
          {:ok, n} when n >= 1 and n <= 70_368_744_177_664 -> autoclaim_options(rest, n, justid)
          _ -> {:error, Encoder.error("ERR COUNT must be > 0")}
        end

      {"JUSTID", rest} ->
        autoclaim_options(rest, count, true)

      _ ->
        {:error, Errors.syntax_error()}
    end
  end

  defp stream_of(key, group) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        {:ok, info}

      _ ->
        {:error,
         Encoder.error(["NOGROUP No such key '", key, "' or consumer group '", group, "'"])}
    end
  end

  defp group_or_error({:ok, g}, _key, _group), do: {:ok, g}

  defp group_or_error(:error, key, group),
    do:
      {:error, Encoder.error(["NOGROUP No such key '", key, "' or consumer group '", group, "'"])}

  defp autoclaim(key, group, consumer, min_idle, {from, tag}, count, justid, t) do
    now = now()
    # As Redis: look at no more than ten times COUNT pending entries.
    rows = Groups.pending(t, key, group, from, @all, count * 10 + 1)

    {rows, next} =
      if Enum.count(rows) > count * 10,
        do: {Enum.take(rows, count * 10), elem(List.last(rows), 0)},
        else: {rows, nil}

    {claimed, deleted, _n} =
      Enum.reduce(rows, {[], [], 0}, fn {seq, _, time, _} = row, {claimed, deleted, n} ->
        cond do
          n >= count or now - time < min_idle ->
            {claimed, deleted, n}

          true ->
            case Errors.check!(Ringbus.read(key, seq, 1), key) do
              {:ok, [{^seq, payload}], _} ->
                if Groups.claim(t, key, group, row, consumer, now, not justid),
                  do: {[{seq, payload} | claimed], deleted, n + 1},
                  else: {claimed, deleted, n}

              _ ->
                Groups.forget(t, key, group, seq)
                {claimed, [Entry.id(seq, tag) | deleted], n + 1}
            end
        end
      end)

    claimed = :lists.reverse(claimed)

    entries =
      if justid,
        do: Enum.map(claimed, fn {seq, _} -> Entry.id(seq, tag) end),
        else: StreamCommands.entries(claimed, tag)

    [if(next, do: Entry.id(next, tag), else: "0-0"), entries, :lists.reverse(deleted)]
  end

  ## XCLAIM

  # XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms]
  #   [TIME ms-unix-time] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID id]
  def xclaim([key, group, consumer, min_idle | rest], s) do
    {ids, opts} = ids(rest, [])

    # Parsed here, answered at the home after the group checks, as Redis orders them.
    parsed =
      with {:ok, min_idle} <- long(min_idle, "Invalid min-idle-time argument for XCLAIM"),
           {:ok, opts} <-
             options(opts, %{time: nil, retry: nil, force: false, justid: false, last: nil}),
           do: {:ok, max(min_idle, 0), opts}

    args = [group, consumer, ids, parsed]
    {GroupHome.run(key, __MODULE__, :xclaim_at, args, no_group(key, group)), s}
  end

  @doc false
  def xclaim_at(t, key, tag, group, consumer, ids, parsed) do
    with {:ok, _info} <- stream(key, group),
         {:ok, g} <- group(t, key, group),
         {:ok, min_idle, opts} <- parsed do
      # IDs of another incarnation name no entry of this one.
      ids = Enum.map(ids, &Entry.local(&1, tag))
      # LASTID is a position, as XGROUP SETID's: of this incarnation or none.
      opts = %{opts | last: opts.last && StreamCommands.pin!(opts.last, tag, key)}
      opts = Map.put(opts, :tag, tag)
      now = System.system_time(:millisecond)
      time = delivery_time(opts.time, now)
      if opts.last, do: move_last(t, key, group, g, opts.last)

      for id <- ids,
          reply = claim(key, group, consumer, id, min_idle, time, now, opts, t),
          do: reply
    else
      {:error, reply} -> reply
    end
  end

  # IDs until the first argument that is not one: the options start there.
  defp ids([text | rest] = args, acc) do
    case Entry.parse(text) do
      {:ok, id} -> ids(rest, [id | acc])
      :error -> {:lists.reverse(acc), args}
    end
  end

  defp ids([], acc), do: {:lists.reverse(acc), []}

  defp options([], acc), do: {:ok, acc}

  defp options([opt | rest], acc) do
    case {Args.upcase(opt), rest} do
      {"FORCE", rest} ->
        options(rest, %{acc | force: true})

      {"JUSTID", rest} ->
        options(rest, %{acc | justid: true})

      {"IDLE", [n | rest]} ->
        with {:ok, n} <- long(n, "Invalid IDLE option argument for XCLAIM"),
             do: options(rest, %{acc | time: {:idle, n}})

      {"TIME", [n | rest]} ->
        with {:ok, n} <- long(n, "Invalid TIME option argument for XCLAIM"),
             do: options(rest, %{acc | time: {:at, n}})

      {"RETRYCOUNT", [n | rest]} ->
        with {:ok, n} <- long(n, "Invalid RETRYCOUNT option argument for XCLAIM"),
             do: options(rest, %{acc | retry: n})

      {"LASTID", [id | rest]} ->
        case Entry.parse(id) do
          {:ok, id} -> options(rest, %{acc | last: id})
          :error -> {:error, Args.invalid_id()}
        end

      _ ->
        {:error, Encoder.error(["ERR Unrecognized XCLAIM option '", opt, "'"])}
    end
  end

  defp long(text, message) do
    case Args.integer(text) do
      {:ok, n} -> {:ok, n}
      :error -> {:error, Encoder.error(["ERR ", message])}
    end
  end

  # As Redis: a time in the future, or before 1970, is now.
  defp delivery_time(nil, now), do: now
  defp delivery_time({:idle, idle}, now), do: delivery_time({:at, now - idle}, now)
  defp delivery_time({:at, at}, now) when at < 0 or at > now, do: now
  defp delivery_time({:at, at}, _now), do: at

  defp move_last(t, key, group, g, id) do
    last = Entry.seq_through(id)
    if last > g.last, do: Groups.set_last(t, key, group, last, nil)
  end

  # The reply for one ID, or nil when it is not claimed.
  defp claim(key, group, consumer, id, min_idle, time, now, opts, t) do
    with {:ok, seq} <- Entry.seq(id),
         {:ok, [{^seq, payload}], _} <- Ringbus.read(key, seq, 1) do
      row =
        case Groups.pending(t, key, group, seq, seq, 1) do
          [row] ->
            row

          [] when opts.force ->
            Groups.add_pending(t, key, group, consumer, [seq], now)
            {seq, consumer, now, 1} |> forced()

          [] ->
            nil
        end

      take(row, key, group, consumer, {seq, payload}, min_idle, time, now, opts, t)
    else
      _ ->
        # Not in the stream: it leaves the PEL, if it is there.
        with {:ok, seq} <- Entry.seq(id), do: Groups.forget(t, key, group, seq)
        nil
    end
  end

  # A FORCE-made row has no idle time to check.
  defp forced(row), do: {:forced, row}

  defp take(nil, _key, _group, _consumer, _message, _min_idle, _time, _now, _opts, _t), do: nil

  defp take(row, key, group, consumer, message, min_idle, time, now, opts, t) do
    {check?, {seq, owner, delivered, deliveries}} =
      case row do
        {:forced, row} -> {false, row}
        row -> {true, row}
      end

    deliveries =
      cond do
        opts.retry != nil -> opts.retry
        opts.justid -> deliveries
        true -> deliveries + 1
      end

    cond do
      check? and min_idle > 0 and now - delivered < min_idle ->
        nil

      Groups.claim(t, key, group, {seq, owner, delivered, deliveries}, consumer, time, false) ->
        # As Redis 7.0: the consumer is made by its first claim.
        Groups.add_consumer(t, key, group, consumer, now)

        if opts.justid,
          do: Entry.id(seq, opts.tag),
          else: hd(StreamCommands.entries([message], opts.tag))

      true ->
        nil
    end
  end

  defp stream(key, group) do
    case Ringbus.info(key) do
      {:ok, info} -> {:ok, info}
      _ -> {:error, no_group(key, group)}
    end
  end

  defp group(t, key, group) do
    case Groups.fetch(t, key, group) do
      {:ok, g} -> {:ok, g}
      :error -> {:error, no_group(key, group)}
    end
  end

  defp no_group(key, group),
    do: Encoder.error(["NOGROUP No such key '", key, "' or consumer group '", group, "'"])

  defp now, do: System.system_time(:millisecond)
end
