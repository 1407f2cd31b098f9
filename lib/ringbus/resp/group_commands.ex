defmodule Ringbus.Resp.GroupCommands do
  @moduledoc false
  # The consumer group commands of `Ringbus.Resp.Session`: XGROUP,
  # XREADGROUP and XACK, on `Ringbus` and the group table of
  # `Ringbus.Resp.Groups` (XPENDING and XAUTOCLAIM are beside XCLAIM, in
  # `Ringbus.Resp.ClaimCommands`). Same shape as `Ringbus.Resp.StreamCommands`.
  #
  # Each command checks its arguments and rights here, and does its work on
  # the groups at the stream's home: the functions named `*_at` take the
  # home's table, the stream and its IDs' tag, and run there
  # (`Ringbus.Resp.GroupHome`). IDs they answer carry the tag; IDs they are
  # given are pinned to it there, so one of another incarnation is refused.
  # XREADGROUP BLOCK waits here, on a subscription to the stream (wherever
  # it lives, as XREAD BLOCK does), and claims what wakes it at the home.
  #
  # A group reads new entries from the seq after its `last`. When the ring
  # has moved past that seq, the entries in between are gone: the group's
  # `lost` counts them (XINFO GROUPS shows it) and it goes on from the oldest
  # entry held.

  alias Ringbus.Resp.{
    Args,
    BlockingRead,
    Encoder,
    Entry,
    Errors,
    GroupHome,
    Groups,
    Keys,
    StreamCommands
  }

  @all 4_611_686_018_427_387_904
  # The access XGROUP and XREADGROUP need on their keys, as the command
  # table (`Ringbus.Resp.Commands`) gives them: they check their keys here.
  @xgroup_access :write
  @read_access :write
  # XREADGROUP > retries when another consumer moved the group first.
  @claim_tries 100

  ## XGROUP

  def xgroup([sub | args], s) do
    upper = Args.upcase(sub)

    case {upper, args} do
      {"HELP", []} ->
        {help(), s}

      {"CREATE", [key, group, id | opts]} ->
        keyed(s, key, fn -> create(key, group, id, opts, s) end)

      {"SETID", [key, group, id | opts]} ->
        keyed(s, key, fn -> at(key, :setid_at, [group, id, opts]) end)

      {"DESTROY", [key, group]} ->
        keyed(s, key, fn -> at(key, :destroy_at, [group]) end)

      {"CREATECONSUMER", [key, group, consumer]} ->
        keyed(s, key, fn -> at(key, :create_consumer_at, [group, consumer]) end)

      {"DELCONSUMER", [key, group, consumer]} ->
        keyed(s, key, fn -> at(key, :delete_consumer_at, [group, consumer]) end)

      {upper, _}
      when upper in ["CREATE", "SETID", "DESTROY", "CREATECONSUMER", "DELCONSUMER", "HELP"] ->
        {Errors.wrong_arity("xgroup|" <> String.downcase(upper)), s}

      _ ->
        {Errors.unknown_subcommand(sub, "XGROUP"), s}
    end
  end

  defp keyed(s, key, fun), do: Keys.keyed(s, @xgroup_access, key, fun)

  # An XGROUP subcommand's work at the home; no stream: the key is required.
  defp at(key, function, args), do: at(key, function, args, key_required())

  defp at(key, function, args, none), do: GroupHome.run(key, __MODULE__, function, args, none)

  @doc false
  def destroy_at(t, key, _tag, group),
    do: existing(key, fn -> if(Groups.destroy(t, key, group), do: 1, else: 0) end)

  defp existing(key, fun) do
    if match?({:ok, _}, Errors.check!(Ringbus.info(key), key)), do: fun.(), else: key_required()
  end

  defp key_required do
    Encoder.error(
      "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
    )
  end

  defp create(key, group, id, opts, s) do
    with {:ok, mkstream, entries_read} <- create_options(opts, false, nil),
         :ok <- ensure_stream(key, mkstream, s) do
      at(key, :create_at, [group, id, entries_read])
    else
      {:error, reply} -> reply
    end
  end

  @doc false
  def create_at(t, key, tag, group, id, entries_read) do
    with :ok <- existing(key, fn -> :ok end) |> ok_or_error(),
         {:ok, last} <- group_position(key, tag, id) do
      read = entries_read || max(last + 1, 0)

      case Groups.create(t, key, group, last, read) do
        :ok ->
          {:simple, "OK"}

        {:error, :exists} ->
          Encoder.error("BUSYGROUP Consumer Group name already exists")

        {:error, :too_many} ->
          Encoder.error([
            "ERR stream '",
            key,
            "' has #{Groups.limits().groups} groups, the most a Ringbus stream keeps"
          ])
      end
    else
      {:error, reply} -> reply
    end
  end

  defp create_options([], mkstream, read), do: {:ok, mkstream, read}

  defp create_options([opt | rest], mkstream, read) do
    case {Args.upcase(opt), rest} do
      {"MKSTREAM", rest} ->
        create_options(rest, true, read)

      {"ENTRIESREAD", [n | rest]} ->
        with {:ok, n} <- entries_read(n), do: create_options(rest, mkstream, n)

      _ ->
        {:error, Errors.syntax_error()}
    end
  end

  defp entries_read(n) do
    case Args.integer(n) do
      {:ok, n} when n >= -1 -> {:ok, max(n, 0)}
      _ -> {:error, Encoder.error("ERR value for ENTRIESREAD must be positive or -1")}
    end
  end

  defp ensure_stream(key, mkstream, s) do
    cond do
      match?({:ok, _}, Errors.check!(Ringbus.info(key), key)) ->
        :ok

      not mkstream ->
        {:error, key_required()}

      true ->
        case Keys.create(key, s) do
          :ok ->
            :ok

          {:error, :no_create} ->
            {:error,
             Encoder.error([
               "ERR no such stream '",
               key,
               "', and this server creates none (auto_create: false)"
             ])}

          {:error, reason} ->
            {:error, Errors.reply(reason, key)}
        end
    end
  end

  # The seq of the last entry a group has had: `$` is the stream's last.
  defp group_position(key, _tag, "$") do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} -> {:ok, info.next_seq - 1}
      _ -> {:ok, -1}
    end
  end

  defp group_position(key, tag, id) do
    case Entry.parse(id) do
      {:ok, id} -> {:ok, Entry.seq_through(StreamCommands.pin!(id, tag, key))}
      :error -> {:error, Args.invalid_id()}
    end
  end

  @doc false
  def setid_at(t, key, tag, group, id, opts) do
    with :ok <- existing(key, fn -> :ok end) |> ok_or_error(),
         {:ok, read} <- setid_options(opts),
         {:ok, last} <- group_position(key, tag, id) do
      if Groups.set_last(t, key, group, last, read),
        do: {:simple, "OK"},
        else: Errors.no_group(key, group)
    else
      {:error, reply} -> reply
    end
  end

  defp ok_or_error(:ok), do: :ok
  defp ok_or_error(reply), do: {:error, reply}

  defp setid_options([]), do: {:ok, nil}

  defp setid_options([opt, n]) do
    if Args.upcase(opt) == "ENTRIESREAD",
      do: entries_read(n),
      else: {:error, Errors.syntax_error()}
  end

  defp setid_options(_opts), do: {:error, Errors.syntax_error()}

  @doc false
  def create_consumer_at(t, key, _tag, group, consumer) do
    existing(key, fn ->
      with {:ok, _} <- Groups.fetch(t, key, group),
           result <- Groups.add_consumer(t, key, group, consumer, now()) do
        case result do
          :created -> 1
          :exists -> 0
          :too_many -> too_many_consumers(group)
        end
      else
        :error -> Errors.no_group(key, group)
      end
    end)
  end

  @doc false
  def delete_consumer_at(t, key, _tag, group, consumer) do
    existing(key, fn ->
      case Groups.fetch(t, key, group) do
        {:ok, _} -> Groups.delete_consumer(t, key, group, consumer)
        :error -> Errors.no_group(key, group)
      end
    end)
  end

  defp too_many_consumers(group),
    do:
      Encoder.error([
        "ERR group '",
        group,
        "' has #{Groups.limits().consumers} consumers, the most a Ringbus group keeps"
      ])

  defp help do
    Enum.map(
      [
        "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CREATE <key> <groupname> <id|$> [option]",
        "    Create a new consumer group. Options are:",
        "    * MKSTREAM",
        "      Create the empty stream if it does not exist.",
        "    * ENTRIESREAD entries_read",
        "      Set the group's entries_read counter (internal use).",
        "CREATECONSUMER <key> <groupname> <consumer>",
        "    Create a new consumer in the specified group.",
        "DELCONSUMER <key> <groupname> <consumer>",
        "    Remove the specified consumer.",
        "DESTROY <key> <groupname>",
        "    Remove the specified group.",
        "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
        "    Set the current group ID and entries_read counter.",
        "HELP",
        "    Print this help."
      ],
      &{:simple, &1}
    )
  end

  ## XREADGROUP

  def xreadgroup(args, s) do
    with {:ok, opts} <-
           Args.read_options(
             args,
             %{count: 0, block: nil, group: nil, noack: false},
             "xreadgroup"
           ),
         {:ok, {group, consumer}} <- group_given(opts),
         :ok <- Args.streams_allowed(opts.streams, @read_access, s),
         {:ok, reads} <- group_reads(opts.streams, group) do
      case Enum.find(reads, fn {key, _} -> not group?(key, group) end) do
        {key, _} ->
          {Encoder.error([
             "NOGROUP No such key '",
             key,
             "' or consumer group '",
             group,
             "' in XREADGROUP with GROUP option"
           ]), s}

        nil ->
          read_group(reads, group, consumer, opts, s)
      end
    else
      {:error, reply} -> {reply, s}
    end
  end

  defp group_given(%{group: nil}),
    do: {:error, Encoder.error("ERR Missing GROUP option for XREADGROUP")}

  defp group_given(%{group: group}), do: {:ok, group}

  defp group_reads(streams, _group) do
    Enum.reduce_while(streams, {:ok, []}, fn {key, id}, {:ok, acc} ->
      case id do
        ">" ->
          {:cont, {:ok, [{key, :new} | acc]}}

        "$" ->
          {:halt,
           {:error,
            Encoder.error(
              "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."
            )}}

        id ->
          case Entry.parse(id) do
            # Pinned to the stream's incarnation at its home (`read_at/9`).
            {:ok, id} ->
              {:cont, {:ok, [{key, {:history, id}} | acc]}}

            :error ->
              {:halt, {:error, Args.invalid_id()}}
          end
      end
    end)
    |> case do
      {:ok, reads} -> {:ok, :lists.reverse(reads)}
      error -> error
    end
  end

  defp group?(key, group), do: GroupHome.run(key, __MODULE__, :group_at, [group], false)

  @doc false
  def group_at(t, key, _tag, group), do: Groups.fetch(t, key, group) != :error

  defp read_group(reads, group, consumer, opts, s) do
    max = if opts.count > 0, do: opts.count, else: @all

    found =
      for {key, read} <- reads do
        {key,
         GroupHome.read(key, __MODULE__, :read_at, [group, consumer, read, max, opts.noack], [])}
      end

    cond do
      Enum.any?(found, fn {_key, entries} -> entries != [] end) ->
        {StreamCommands.streams_reply(found), s}

      opts.block == nil or Enum.any?(reads, &match?({_, {:history, _}}, &1)) ->
        # History reads answer at once, with every stream even when empty.
        if Enum.any?(reads, &match?({_, {:history, _}}, &1)),
          do: {StreamCommands.streams_reply(found), s},
          else: {:null_array, s}

      true ->
        wait(reads, group, consumer, opts, s)
    end
  end

  @doc false
  # One stream's part of an XREADGROUP, at its home: the consumer is seen,
  # and reads new entries or its own pending ones.
  def read_at(t, key, tag, group, consumer, read, max, noack, bytes) do
    now = now()

    # Destroyed since XREADGROUP looked: no consumer row is left behind.
    if Groups.fetch(t, key, group) == :error do
      []
    else
      Groups.add_consumer(t, key, group, consumer, now)
      Groups.seen(t, key, group, consumer, now)

      case read do
        :new ->
          claim(key, tag, group, consumer, {max, bytes}, noack, t)

        {:history, id} ->
          from = Entry.seq_after(StreamCommands.pin!(id, tag, key))
          history(key, tag, group, consumer, from, max, bytes, t)
      end
    end
  end

  @doc false
  def claim_at(t, key, tag, group, consumer, max, noack, bytes),
    do: claim(key, tag, group, consumer, {max, bytes}, noack, t)

  # Takes up to `max` new entries for the group (at least one, then as many
  # as fit in `bytes`), moving its position past them (and past any it
  # lost) with a compare-and-swap.
  defp claim(key, tag, group, consumer, bound, noack, t, tries \\ @claim_tries)

  defp claim(_key, _tag, _group, _consumer, _bound, _noack, _t, 0), do: []

  defp claim(key, tag, group, consumer, {max, bytes} = bound, noack, t, tries) do
    with {:ok, %{last: last}} <- Groups.fetch(t, key, group),
         {:ok, messages, lost} <- Errors.check!(Ringbus.read(key, last + 1, max), key) do
      messages = GroupHome.cut(messages, bytes)
      {count, new_last} = span(messages, last + lost)

      cond do
        count == 0 and lost == 0 ->
          []

        Groups.advance(t, key, group, last, new_last, count, lost) ->
          unless noack,
            do:
              Groups.add_pending(t, key, group, consumer, Enum.map(messages, &elem(&1, 0)), now())

          StreamCommands.entries(messages, tag)

        true ->
          claim(key, tag, group, consumer, bound, noack, t, tries - 1)
      end
    else
      _ -> []
    end
  end

  defp span(messages, last),
    do: Enum.reduce(messages, {0, last}, fn {seq, _}, {n, _} -> {n + 1, seq} end)

  # A consumer's own pending entries after `from`: [id, nil] for one the
  # ring no longer holds, as Redis answers for a deleted entry. Each entry
  # returned is delivered again: its count goes up and its idle time
  # restarts. Those past `bytes` of payloads (after the first) wait for the
  # next read, from the last ID returned.
  defp history(key, tag, group, consumer, from, max, bytes, t) do
    now = now()
    rows = Groups.pending(t, key, group, from, @all, min(max, 10_000), consumer)

    rows
    |> Enum.reduce_while({[], bytes}, fn {seq, _owner, _time, _deliveries}, {acc, left} ->
      case Errors.check!(Ringbus.read(key, seq, 1), key) do
        {:ok, [{^seq, payload}], _} when acc == [] or byte_size(payload) <= left ->
          Groups.redeliver(t, key, group, seq, consumer, now)
          {:cont, {[[Entry.id(seq, tag), Entry.decode(payload)] | acc], less(left, payload)}}

        {:ok, [{^seq, _payload}], _} ->
          {:halt, {acc, left}}

        _ ->
          {:cont, {[[Entry.id(seq, tag), nil] | acc], left}}
      end
    end)
    |> elem(0)
    |> :lists.reverse()
  end

  defp less(:infinity, _payload), do: :infinity
  defp less(left, payload), do: left - byte_size(payload)

  defp wait(reads, group, consumer, opts, s) do
    starts =
      for {key, :new} <- reads do
        case GroupHome.run(key, __MODULE__, :last_at, [group], :error) do
          {:ok, last} -> {key, last + 1}
          # Destroyed meanwhile: wait from the start; a claim finds no group.
          :error -> {key, 0}
        end
      end

    block = %{
      module: __MODULE__,
      timeout: BlockingRead.timeout(opts.block),
      group: group,
      consumer: consumer,
      count: if(opts.count > 0, do: opts.count, else: @all),
      noack: opts.noack
    }

    BlockingRead.block(starts, opts.count, block, s)
  end

  @doc false
  def last_at(t, key, _tag, group) do
    case Groups.fetch(t, key, group) do
      {:ok, %{last: last}} -> {:ok, last}
      :error -> :error
    end
  end

  @doc false
  # New entries on a stream the XREADGROUP waits on: claim them for the
  # group, at the stream's home. Another consumer may have had them first;
  # then wait on.
  def woken(block, sub, messages, _lost, s) do
    {key, _tag} = Map.fetch!(block.subs, sub)
    args = [block.group, block.consumer, block.count, block.noack]

    case GroupHome.read(key, __MODULE__, :claim_at, args, []) do
      [] ->
        n = Enum.count(messages)
        if n > 0, do: Ringbus.ack(sub, n)
        {:wait, block}

      entries ->
        {:reply, StreamCommands.streams_reply([{key, entries}]), s}
    end
  end

  ## XACK

  def xack([key, group | ids], s) do
    case parse_ids(ids) do
      {:ok, ids} -> {GroupHome.run(key, __MODULE__, :ack_at, [group, ids], 0), s}
      :error -> {Args.invalid_id(), s}
    end
  end

  defp parse_ids(ids) do
    Enum.reduce_while(ids, {:ok, []}, fn text, {:ok, acc} ->
      case Entry.parse(text) do
        {:ok, id} -> {:cont, {:ok, [id | acc]}}
        :error -> {:halt, :error}
      end
    end)
  end

  @doc false
  # An ID of another incarnation names no entry of this one: it acks nothing.
  def ack_at(t, key, tag, group, ids) do
    seqs = for id <- ids, {:ok, seq} <- [Entry.seq(Entry.local(id, tag))], do: seq

    Groups.ack(t, key, group, seqs)
  end

  defp now, do: System.system_time(:millisecond)
end
