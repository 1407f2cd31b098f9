defmodule Ringbus.Resp.ClaimCommands do
  @moduledoc false
  # XCLAIM for `Ringbus.Resp.Session`, as Redis 7.0's xclaimCommand, on the
  # PEL of `Ringbus.Resp.Groups`: each pending entry whose idle time is at
  # least min-idle goes to the consumer, with its delivery time (now, IDLE
  # or TIME) and count (one more, or RETRYCOUNT; JUSTID leaves it). FORCE
  # claims entries the stream holds that are in no PEL; an ID the stream no
  # longer holds leaves the PEL. LASTID moves the group's position forward.

  alias Ringbus.Resp.{Args, Encoder, Entry, Groups, StreamCommands}

  # XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms]
  #   [TIME ms-unix-time] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID id]
  def xclaim([key, group, consumer, min_idle | rest], s) do
    t = s.context.groups
    {ids, opts} = ids(rest, [])

    with {:ok, _info} <- stream(key, group),
         {:ok, g} <- group(t, key, group),
         {:ok, min_idle} <- long(min_idle, "Invalid min-idle-time argument for XCLAIM"),
         min_idle = max(min_idle, 0),
         {:ok, opts} <-
           options(opts, %{time: nil, retry: nil, force: false, justid: false, last: nil}) do
      now = System.system_time(:millisecond)
      time = delivery_time(opts.time, now)
      if opts.last, do: move_last(t, key, group, g, opts.last)

      claims =
        for id <- ids,
            reply = claim(key, group, consumer, id, min_idle, time, now, opts, t),
            do: reply

      {claims, s}
    else
      {:error, reply} -> {reply, s}
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
        if opts.justid, do: Entry.id(seq), else: hd(StreamCommands.entries([message]))

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
end
