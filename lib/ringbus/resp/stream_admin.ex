defmodule Ringbus.Resp.StreamAdmin do
  @moduledoc false
  # XSETID and XINFO (STREAM, STREAM FULL, GROUPS, CONSUMERS) for
  # `Ringbus.Resp.Session`.
  #
  # XSETID. A ring numbers its entries itself, so a stream's last ID is
  # always `<next seq>-<tag>`: XSETID checks its arguments as Redis 7.0 does and
  # accepts the stream's own last ID (what clients that copy a stream's
  # state send), and refuses to move it.
  #
  # XINFO reads a stream's groups at its home (`Ringbus.Resp.GroupHome`):
  # the functions named `*_at` run there.

  alias Ringbus.Resp.{Args, Encoder, Entry, Errors, GroupHome, Groups, Keys, StreamCommands}

  @all 4_611_686_018_427_387_904

  # XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
  def xsetid([key, id | opts], s) do
    with {:ok, id} <- parse_id(id),
         {:ok, opts} <- setid_options(opts, %{added: nil, max_deleted: nil}),
         {:ok, info} <- stream(key) do
      {setid(id, opts, info), s}
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

  # IDs compared without the stream's tag (`Ringbus.Resp.Entry.local/2`).
  defp setid(id, opts, info) do
    tag = Entry.tag(info.incarnation)
    id = Entry.local(id, tag)
    opts = %{opts | max_deleted: opts.max_deleted && Entry.local(opts.max_deleted, tag)}
    last = if info.next_seq > 0, do: {info.next_seq, 0}, else: {0, 0}

    cond do
      opts.max_deleted != nil and id < opts.max_deleted ->
        Encoder.error(
          "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
        )

      info.len > 0 and id < last ->
        Encoder.error("ERR The ID specified in XSETID is smaller than the target stream top item")

      opts.added != nil and info.len > opts.added ->
        Encoder.error(
          "ERR The entries_added specified in XSETID is smaller than the target stream length"
        )

      id == last and opts.added in [nil, info.next_seq] ->
        {:simple, "OK"}

      true ->
        Encoder.error([
          "ERR a Ringbus stream numbers its entries itself: XSETID can only give its last ID, ",
          if(last == {0, 0}, do: "0-0", else: Entry.id(info.next_seq - 1, tag)),
          if(info.next_seq > 0,
            do: [", and ENTRIESADDED ", Integer.to_string(info.next_seq)],
            else: []
          )
        ])
    end
  end

  ## XINFO

  def xinfo([sub | args], s) do
    case {Args.upcase(sub), args} do
      {"STREAM", [key]} ->
        guarded(s, key, fn -> stream_info(key) end)

      {"STREAM", [key, full | opts]} ->
        guarded(s, key, fn -> full(key, [full | opts], sub) end)

      {"GROUPS", [key]} ->
        guarded(s, key, fn -> GroupHome.run(key, __MODULE__, :groups_at, [], no_key()) end)

      {"CONSUMERS", [key, group]} ->
        guarded(s, key, fn ->
          GroupHome.run(key, __MODULE__, :consumers_at, [group], no_key())
        end)

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
        tag = Entry.tag(info.incarnation)
        first_seq = Map.fetch!(info, :first_seq)
        next_seq = Map.fetch!(info, :next_seq)
        len = Map.fetch!(info, :len)
        last = if next_seq > 0, do: Entry.id(next_seq - 1, tag), else: "0-0"
        deleted = if first_seq > 0, do: Entry.id(first_seq - 1, tag), else: "0-0"

        edge = fn seq ->
          case StreamCommands.read(key, seq, 1) do
            [message] -> hd(StreamCommands.entries([message], tag))
            [] -> nil
          end
        end

        {:map,
         [
           {"length", len},
           {"radix-tree-keys", 0},
           {"radix-tree-nodes", 0},
           {"last-generated-id", last},
           {"max-deleted-entry-id", deleted},
           {"entries-added", next_seq},
           {"recorded-first-entry-id", if(len > 0, do: Entry.id(first_seq, tag), else: "0-0")},
           {"groups", GroupHome.run(key, __MODULE__, :group_count_at, [], 0)},
           {"first-entry", if(len > 0, do: edge.(first_seq), else: nil)},
           {"last-entry", if(len > 0, do: edge.(next_seq - 1), else: nil)},
           {"capacity", Map.fetch!(info, :capacity)},
           {"overflow", Atom.to_string(Map.fetch!(info, :overflow))},
           {"max-bytes", Map.fetch!(info, :max_bytes)},
           {"bytes", Map.fetch!(info, :bytes)},
           {"overwritten", Map.fetch!(info, :overwritten)},
           {"pulled", Map.fetch!(info, :pulled)}
         ]}

      {:error, :no_channel} ->
        Encoder.error("ERR no such key")
    end
  end

  @doc false
  def group_count_at(t, key, _tag), do: Groups.group_count(t, key)

  @doc false
  def groups_at(t, key, tag) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        for {name, g} <- Groups.groups(t, key) do
          {:map,
           [
             {"name", name},
             {"consumers", Enum.count(Groups.consumers(t, key, name))},
             {"pending", g.pending},
             {"last-delivered-id", if(g.last >= 0, do: Entry.id(g.last, tag), else: "0-0")},
             {"entries-read", g.entries_read},
             {"lag", max(info.next_seq - (g.last + 1), 0)},
             {"lost", g.lost},
             {"pending-dropped", g.dropped}
           ]}
        end

      {:error, :no_channel} ->
        Encoder.error("ERR no such key")
    end
  end

  @doc false
  def consumers_at(t, key, _tag, group) do
    with {:ok, _info} <- Errors.check!(Ringbus.info(key), key),
         {:ok, _group} <- Groups.fetch(t, key, group) do
      now = System.system_time(:millisecond)

      for {name, seen, pending} <- Groups.consumers(t, key, group),
          do: {:map, [{"name", name}, {"pending", pending}, {"idle", max(now - seen, 0)}]}
    else
      {:error, :no_channel} ->
        Encoder.error("ERR no such key")

      :error ->
        Errors.no_group(key, group)
    end
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

  # XINFO STREAM FULL: the stream, its first COUNT entries (10; 0 for all) and its groups.
  defp full(key, opts, sub) do
    case full_count(opts, sub) do
      {:ok, count} -> GroupHome.read(key, __MODULE__, :full_at, [count], no_key())
      {:error, reply} -> reply
    end
  end

  @doc false
  # The whole reply at the home, the entries with it: one answer to carry
  # back, whose entries stop at `bytes` of payloads (the first one aside).
  def full_at(t, key, tag, count, bytes) do
    case stream(key) do
      {:ok, info} -> full_reply(t, key, tag, info, count, bytes)
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

  defp full_reply(t, key, tag, info, count, bytes) do
    len = info.len

    entries =
      case Ringbus.read(key, info.first_seq, min(count, len)) do
        {:ok, messages, _lost} ->
          for {seq, p} <- GroupHome.cut(messages, bytes),
              do: [Entry.id(seq, tag), Entry.decode(p)]

        _ ->
          []
      end

    groups =
      for {name, g} <- Groups.groups(t, key) do
        pending = Groups.pending(t, key, name, 0, @all, count)

        consumers =
          for {consumer, seen, pel} <- Groups.consumers(t, key, name) do
            mine = Groups.pending(t, key, name, 0, @all, count, consumer)

            {:map,
             [
               {"name", consumer},
               {"seen-time", seen},
               {"pel-count", pel},
               {"pending", for({seq, _, time, n} <- mine, do: [Entry.id(seq, tag), time, n])}
             ]}
          end

        {:map,
         [
           {"name", name},
           {"last-delivered-id", if(g.last >= 0, do: Entry.id(g.last, tag), else: "0-0")},
           {"entries-read", g.entries_read},
           {"lag", max(info.next_seq - (g.last + 1), 0)},
           {"pel-count", g.pending},
           {"pending", for({seq, c, time, n} <- pending, do: [Entry.id(seq, tag), c, time, n])},
           {"consumers", consumers}
         ]}
      end

    {:map,
     [
       {"length", len},
       {"radix-tree-keys", 0},
       {"radix-tree-nodes", 0},
       {"last-generated-id",
        if(info.next_seq > 0, do: Entry.id(info.next_seq - 1, tag), else: "0-0")},
       {"max-deleted-entry-id",
        if(info.first_seq > 0, do: Entry.id(info.first_seq - 1, tag), else: "0-0")},
       {"entries-added", info.next_seq},
       {"recorded-first-entry-id", if(len > 0, do: Entry.id(info.first_seq, tag), else: "0-0")},
       {"entries", entries},
       {"groups", groups},
       {"capacity", info.capacity},
       {"overflow", Atom.to_string(info.overflow)},
       {"max-bytes", info.max_bytes},
       {"bytes", info.bytes},
       {"overwritten", info.overwritten},
       {"pulled", info.pulled}
     ]}
  end
end
