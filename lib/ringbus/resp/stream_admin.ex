defmodule Ringbus.Resp.StreamAdmin do
  @moduledoc false
  # XSETID and XINFO (STREAM, STREAM FULL, GROUPS, CONSUMERS) for
  # `Ringbus.Resp.Session`.
  #
  # XSETID moves a stream's last ID (`Ringbus.Channel.Ids`), so that the
  # next XADD's ID is above it.
  #
  # XINFO reads a stream's groups at its home, one group request each
  # (`Ringbus.Resp.GroupRequest`).

  alias Ringbus.Channel.{Ids, Trim}

  alias Ringbus.Resp.{
    Args,
    Encoder,
    Entry,
    Errors,
    GroupRequest,
    Keys,
    StreamCommands
  }

  @all 4_611_686_018_427_387_904
  # XINFO STREAM FULL reads again a stream created again meanwhile, this often.
  @full_tries 3

  # XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
  def xsetid([key, id | opts], s) do
    with {:ok, id} <- parse_id(id),
         {:ok, opts} <- setid_options(opts, %{added: nil, max_deleted: nil}),
         {:ok, info} <- stream(key) do
      {setid(key, id, opts, info), s}
    else
      {:error, reply} -> {reply, s}
    end
  end

  defp parse_id(text) do
    case Entry.parse(text) do
      {:ok, id} ->
        {:ok, id}

      :error ->
        {:error, Encoder.error("ERR Invalid stream ID specified as stream command argument")}
    end
  end

  defp setid_options([], acc), do: {:ok, acc}

  defp setid_options([opt, value | rest], acc) do
    case Args.upcase(opt) do
      "ENTRIESADDED" ->
        case Args.integer(value) do
          {:ok, n} when n >= 0 ->
            setid_options(rest, %{acc | added: n})

          _ ->
            {:error, Encoder.error("ERR entries_added must be positive")}
        end

      "MAXDELETEDID" ->
        with {:ok, id} <- parse_id(value), do: setid_options(rest, %{acc | max_deleted: id})

      _ ->
        {:error, Errors.syntax_error()}
    end
  end

  defp setid_options(_opts, _acc), do: {:error, Errors.syntax_error()}

  defp stream(key) do
    case Ringbus.info(key) do
      {:ok, info} -> {:ok, info}
      _ -> {:error, Encoder.error("ERR no such key")}
    end
  end

  # Redis 7.0's checks, then the last ID set where the stream lives. A
  # ring counts what was added itself: ENTRIESADDED and MAXDELETEDID are
  # checked and not kept.
  defp setid(key, id, opts, info) do
    cond do
      opts.max_deleted != nil and Ids.above?(opts.max_deleted, id) ->
        Encoder.error(
          "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
        )

      opts.added != nil and info.len > opts.added ->
        Encoder.error(
          "ERR The entries_added specified in XSETID is smaller than the target stream length"
        )

      true ->
        case Ringbus.run(key, {:set_id, id}) do
          :ok -> {:simple, "OK"}
          {:error, :below_top} -> smaller()
          {:error, :no_channel} -> no_key()
          {:error, reason} -> Errors.reply(reason, key)
        end
    end
  end

  defp smaller,
    do: Encoder.error("ERR The ID specified in XSETID is smaller than the target stream top item")

  ## XINFO

  def xinfo([sub | args], s) do
    case {Args.upcase(sub), args} do
      {"STREAM", [key]} ->
        guarded(s, key, fn -> stream_info(key) end)

      {"STREAM", [key, full | opts]} ->
        guarded(s, key, fn -> full(key, [full | opts], sub) end)

      {"GROUPS", [key]} ->
        guarded(s, key, fn -> groups(key) end)

      {"CONSUMERS", [key, group]} ->
        guarded(s, key, fn -> consumers(key, group) end)

      {"HELP", []} ->
        {xinfo_help(), s}

      {upper, _} when upper in ["STREAM", "GROUPS", "CONSUMERS", "HELP"] ->
        {Errors.wrong_arity("xinfo|" <> String.downcase(upper)), s}

      _ ->
        {Errors.unknown_subcommand(sub, "XINFO"), s}
    end
  end

  defp guarded(s, key, fun), do: Keys.keyed(s, :read, key, fun)

  defp no_key, do: Encoder.error("ERR no such key")

  defp stream_info(key) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        first_seq = Map.fetch!(info, :first_seq)
        next_seq = Map.fetch!(info, :next_seq)
        len = Map.fetch!(info, :len)

        edge = fn seq ->
          case StreamCommands.read(key, seq, 1) do
            [message] -> hd(StreamCommands.entries([message]))
            [] -> nil
          end
        end

        {:map,
         [
           {"length", len},
           {"radix-tree-keys", Trim.nodes(first_seq, next_seq)},
           {"radix-tree-nodes", Trim.nodes(first_seq, next_seq)},
           {"last-generated-id", Entry.format(info.last_id)},
           {"max-deleted-entry-id", max_deleted(info)},
           {"entries-added", next_seq},
           {"recorded-first-entry-id", first_id(info)},
           {"groups", GroupRequest.run(key, :count, 0, fn {:ok, n} -> n end)},
           {"first-entry", if(len > 0, do: edge.(first_seq), else: nil)},
           {"last-entry", if(len > 0, do: edge.(next_seq - 1), else: nil)},
           {"capacity", Map.fetch!(info, :capacity)},
           {"overflow", Atom.to_string(Map.fetch!(info, :overflow))},
           {"max-bytes", Map.fetch!(info, :max_bytes)},
           {"bytes", Map.fetch!(info, :bytes)},
           {"overwritten", Map.fetch!(info, :overwritten)},
           {"pulled", Map.fetch!(info, :pulled)},
           {"deleted", Map.fetch!(info, :deleted)}
         ]}

      {:error, :no_channel} ->
        Encoder.error("ERR no such key")
    end
  end

  defp groups(key) do
    GroupRequest.run(key, {:groups, 0}, no_key(), fn {:ok, groups} ->
      for g <- groups do
        {:map,
         [
           {"name", g.name},
           {"consumers", Enum.count(g.consumers)},
           {"pending", g.pending},
           {"last-delivered-id", last_id(g)},
           {"entries-read", entries_read(g)},
           {"lag", lag(g)}
         ]}
      end
    end)
  end

  # -1: a count Redis does not know yet (`Ringbus.Group`'s `:create`).
  defp entries_read(%{entries_read: -1}), do: nil
  defp entries_read(%{entries_read: read}), do: read

  # Redis 7.0's lag (streamReplyWithCGLag): entries added less the group's
  # entries read, or, that unknown, less what Redis can tell of the group's
  # position (streamEstimateDistanceFromFirstEverEntry); nil when it cannot.
  # A ring has no deleted entries between its first and last, so none of
  # Redis's tombstones.
  defp lag(%{next: 0}), do: 0
  defp lag(%{entries_read: read, next: next}) when read >= 0, do: next - read

  defp lag(%{last: last, first: first, next: next}) do
    cond do
      last == next - 1 -> 0
      last > next - 1 -> nil
      first == next -> 0
      last < first -> next - first
      last == first -> next - first - 1
      true -> nil
    end
  end

  # A group's last delivered entry's ID: `0-0` before any.
  defp last_id(%{last_id: nil}), do: "0-0"
  defp last_id(%{last_id: id}), do: Entry.format(id)

  defp first_id(%{first_id: nil}), do: "0-0"
  defp first_id(%{first_id: id}), do: Entry.format(id)

  # The highest ID XTRIM or XDEL removed.
  defp max_deleted(%{max_removed_id: id}), do: Entry.format(id)

  defp consumers(key, group) do
    GroupRequest.run(key, {:consumers, group}, no_key(), fn
      {:ok, consumers} ->
        for {name, pending, idle} <- consumers,
            do: {:map, [{"name", name}, {"pending", pending}, {"idle", idle}]}

      {:error, :no_group} ->
        Errors.no_group(key, group)
    end)
  end

  defp xinfo_help do
    [
      {:simple, "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"},
      {:simple, "CONSUMERS <key> <groupname>"},
      {:simple, "    Show consumers of <groupname>."},
      {:simple, "GROUPS <key>"},
      {:simple, "    Show the stream consumer groups."},
      {:simple, "STREAM <key>"},
      {:simple, "    Show information about the stream."},
      {:simple, "HELP"},
      {:simple, "    Print this help."}
    ]
  end

  ## XINFO STREAM key FULL [COUNT n]

  # XINFO STREAM FULL: the stream, its first COUNT entries (10; 0 for all)
  # and its groups, of one incarnation. Through another node, the entries
  # stop where a read through the link stops.
  defp full(key, opts, sub) do
    case full_count(opts, sub) do
      {:ok, count} -> full_reply(key, count, @full_tries)
      {:error, reply} -> reply
    end
  end

  # As Redis: [FULL] or [FULL COUNT n], else the subcommand's syntax error.
  defp full_count(opts, sub) do
    case Enum.map(opts, &Args.upcase/1) do
      ["FULL"] ->
        {:ok, 10}

      ["FULL", "COUNT", _] ->
        case Args.integer(List.last(opts)) do
          {:ok, n} -> {:ok, if(n <= 0, do: @all, else: n)}
          :error -> {:error, Errors.not_integer()}
        end

      _ ->
        {:error,
         Encoder.error([
           "ERR unknown subcommand or wrong number of arguments for '",
           sub,
           "'. Try XINFO HELP."
         ])}
    end
  end

  # Created again between two of its reads: read all again.
  defp full_reply(key, _count, 0), do: Errors.fail!(:new_incarnation, key)

  defp full_reply(key, count, tries) do
    with {:ok, info} <- Errors.check!(Ringbus.info(key), key),
         {:ok, entries} <- full_entries(key, info, count),
         {:ok, groups} <- full_groups(key, info, count) do
      full_map(info, entries, groups)
    else
      {:error, :no_channel} -> no_key()
      {:error, :new_incarnation} -> full_reply(key, count, tries - 1)
    end
  end

  defp full_entries(key, info, count) do
    op = {:read, info.first_seq, min(count, info.len), info.incarnation, :ids}

    case Ringbus.run(key, op) do
      {:ok, messages, _lost} ->
        {:ok, StreamCommands.entries(messages)}

      {:error, :new_incarnation} ->
        {:error, :new_incarnation}

      _ ->
        {:ok, []}
    end
  end

  defp full_groups(key, %{incarnation: incarnation}, count) do
    case Ringbus.run(key, {:stamped, {:ids, {:group, {:groups, count}}}}) do
      {:ok, ^incarnation, {:ok, groups}} -> {:ok, full_groups(groups)}
      {:ok, _other, _answer} -> {:error, :new_incarnation}
      {:error, :no_channel} -> {:error, :no_channel}
      {:error, reason} -> Errors.fail!(reason, key)
    end
  end

  defp full_groups(groups) do
    for g <- groups do
      consumers =
        for c <- g.consumers do
          {:map,
           [
             {"name", c.name},
             {"seen-time", c.seen},
             {"pel-count", c.pending},
             {"pending", for({id, time, n} <- c.entries, do: [Entry.format(id), time, n])}
           ]}
        end

      {:map,
       [
         {"name", g.name},
         {"last-delivered-id", last_id(g)},
         {"entries-read", entries_read(g)},
         {"lag", lag(g)},
         {"pel-count", g.pending},
         {"pending", for({id, c, time, n} <- g.entries, do: [Entry.format(id), c, time, n])},
         {"consumers", consumers},
         {"lost", g.lost},
         {"pending-dropped", g.dropped}
       ]}
    end
  end

  # Redis's fields only, as clients and Redis's tests count them; XINFO
  # STREAM has the ring's figures.
  defp full_map(info, entries, groups) do
    len = info.len

    {:map,
     [
       {"length", len},
       {"radix-tree-keys", Trim.nodes(info.first_seq, info.next_seq)},
       {"radix-tree-nodes", Trim.nodes(info.first_seq, info.next_seq)},
       {"last-generated-id", Entry.format(info.last_id)},
       {"max-deleted-entry-id", max_deleted(info)},
       {"entries-added", info.next_seq},
       {"recorded-first-entry-id", first_id(info)},
       {"entries", entries},
       {"groups", groups}
     ]}
  end
end
