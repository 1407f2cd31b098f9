defmodule Ringbus.Resp.ClaimCommands do
  @moduledoc false
  # The pending entries commands of `Ringbus.Resp.Session`: XPENDING,
  # XAUTOCLAIM and XCLAIM, as Redis 7.0's, on the PEL of the stream's group
  # (`Ringbus.Group`, whose `:pending`, `:autoclaim` and `:claim` requests
  # they are). Each parses its arguments here and runs one request at the
  # stream's home (`Ringbus.Resp.GroupRequest`); an argument's error is
  # answered after the group's checks, as Redis orders them.

  alias Ringbus.Resp.{Args, Encoder, Entry, Errors, GroupRequest, StreamCommands}

  ## XPENDING, XAUTOCLAIM

  def xpending([key, group | []], s) do
    reply =
      run(key, group, {:pending, group}, fn
        nil ->
          [0, nil, nil, :null_array]

        {total, low, high, counts} ->
          consumers = for {name, n} <- counts, do: [name, Integer.to_string(n)]
          [total, Entry.format(low), Entry.format(high), consumers]
      end)

    {reply, s}
  end

  def xpending([key, group | rest], s), do: {pending_range(key, group, rest), s}

  # XPENDING key group [IDLE ms] start end count [consumer]
  defp pending_range(key, group, args) do
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
         {:ok, low} <- pending_bound(start, :start),
         {:ok, high} <- pending_bound(stop, :end) do
      # A count that is no integer is answered once the IDs are found of the
      # stream's incarnation, as Redis checks them first: asked for none.
      {count, reply} =
        case Args.integer(count) do
          {:ok, n} -> {n, &pending_rows/1}
          :error -> {0, fn _rows -> Errors.not_integer() end}
        end

      run(key, group, {:pending, group, low, high, count, List.first(consumer), idle}, reply)
    else
      :error -> unless_no_group(key, group, Errors.not_integer())
      {:error, reply} -> unless_no_group(key, group, reply)
      _ -> unless_no_group(key, group, Errors.syntax_error())
    end
  end

  # A bound of XPENDING's range as a position where the stream lives
  # (`Ringbus.Group.ByIds`): XRANGE's (`Args.range_id/2`), taking `(-` and
  # `(+` as well.
  defp pending_bound("(" <> text, side), do: position(Args.range_id("(" <> strip(text), side))
  defp pending_bound(text, side), do: position(Args.range_id(text, side))

  defp position({:ok, {bound, id}}), do: {:ok, {:id, bound, id}}
  defp position(error), do: error

  defp pending_rows(rows),
    do: for({id, owner, idle, n} <- rows, do: [Entry.format(id), owner, idle, n])

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
      request = {:autoclaim, group, consumer, min_idle, {:id, :from, start}, count, justid}

      reply =
        run(key, group, request, fn {next, claimed, deleted} ->
          [
            if(next, do: Entry.format(next), else: "0-0"),
            claimed(claimed, justid),
            Enum.map(deleted, &Entry.format/1)
          ]
        end)

      {reply, s}
    else
      {:error, reply} -> {reply, s}
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

  ## XCLAIM

  # XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms]
  #   [TIME ms-unix-time] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID id]
  def xclaim([key, group, consumer, min_idle | rest], s) do
    {ids, opts} = ids(rest, [])

    parsed =
      with {:ok, min_idle} <- long(min_idle, "Invalid min-idle-time argument for XCLAIM"),
           {:ok, opts} <-
             options(opts, %{time: nil, retry: nil, force: false, justid: false, last: nil}),
           do: {:ok, max(min_idle, 0), opts}

    case parsed do
      {:ok, min_idle, opts} ->
        # An ID names the entry stored under it, if any; LASTID is a
        # position, as XGROUP SETID's.
        refs = for id <- ids, do: {:entry, id}
        opts = %{opts | last: opts.last && {:id, :through, opts.last}}
        request = {:claim, group, consumer, refs, min_idle, opts}
        {run(key, group, request, &claimed(&1, opts.justid)), s}

      {:error, reply} ->
        {unless_no_group(key, group, reply), s}
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

  # What a claim took: IDs with JUSTID, else entries (with their IDs).
  defp claimed(claimed, true), do: Enum.map(claimed, &Entry.format/1)
  defp claimed(claimed, false), do: StreamCommands.entries(claimed)

  # A request at the home: its answer, or NOGROUP without the stream or the group.
  defp run(key, group, request, reply) do
    GroupRequest.run(key, request, no_group(key, group), fn
      {:ok, answer} -> reply.(answer)
      {:error, :no_group} -> no_group(key, group)
      {:error, reason} -> Errors.fail!(reason, key)
    end)
  end

  defp unless_no_group(key, group, reply),
    do: if(GroupRequest.group?(key, group), do: reply, else: no_group(key, group))

  defp no_group(key, group),
    do: Encoder.error(["NOGROUP No such key '", key, "' or consumer group '", group, "'"])
end
