defmodule Ringbus.Resp.StreamAdmin do
  @moduledoc false
  # XSETID and XINFO STREAM FULL for `Ringbus.Resp.Session`.
  #
  # XSETID. A ring numbers its entries itself, so a stream's last ID is
  # always `<next seq>-0`: XSETID checks its arguments as Redis 7.0 does and
  # accepts the stream's own last ID (what clients that copy a stream's
  # state send), and refuses to move it.

  alias Ringbus.Resp.{Args, Encoder, Entry, Errors, Groups}

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

  defp setid(id, opts, info) do
    last = if info.next_seq > 0, do: Entry.id_of(info.next_seq - 1), else: {0, 0}

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
          Entry.format(last),
          if(info.next_seq > 0,
            do: [", and ENTRIESADDED ", Integer.to_string(info.next_seq)],
            else: []
          )
        ])
    end
  end

  ## XINFO STREAM key FULL [COUNT n]

  @doc "XINFO STREAM FULL: the stream, its first COUNT entries (10; 0 for all) and its groups."
  def full(key, opts, sub, s) do
    with {:ok, count} <- full_count(opts, sub),
         {:ok, info} <- stream(key) do
      full_reply(key, info, count, s)
    else
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

  defp full_reply(key, info, count, s) do
    t = s.context.groups
    len = info.len

    entries =
      case Ringbus.read(key, info.first_seq, min(count, len)) do
        {:ok, messages, _lost} -> for({seq, p} <- messages, do: [Entry.id(seq), Entry.decode(p)])
        _ -> []
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
               {"pending", for({seq, _, time, n} <- mine, do: [Entry.id(seq), time, n])}
             ]}
          end

        {:map,
         [
           {"name", name},
           {"last-delivered-id", if(g.last >= 0, do: Entry.id(g.last), else: "0-0")},
           {"entries-read", g.entries_read},
           {"lag", max(info.next_seq - (g.last + 1), 0)},
           {"pel-count", g.pending},
           {"pending", for({seq, c, time, n} <- pending, do: [Entry.id(seq), c, time, n])},
           {"consumers", consumers}
         ]}
      end

    {:map,
     [
       {"length", len},
       {"radix-tree-keys", 0},
       {"radix-tree-nodes", 0},
       {"last-generated-id", if(info.next_seq > 0, do: Entry.id(info.next_seq - 1), else: "0-0")},
       {"max-deleted-entry-id",
        if(info.first_seq > 0, do: Entry.id(info.first_seq - 1), else: "0-0")},
       {"entries-added", info.next_seq},
       {"recorded-first-entry-id", if(len > 0, do: Entry.id(info.first_seq), else: "0-0")},
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
