defmodule Ringbus.Resp.GroupCommands do
  @moduledoc false
  # The consumer group commands of `Ringbus.Resp.Session`: XGROUP,
  # XREADGROUP and XACK, on the stream's groups (`Ringbus.Group`; XPENDING
  # and XAUTOCLAIM are beside XCLAIM, in `Ringbus.Resp.ClaimCommands`).
  # Same shape as `Ringbus.Resp.StreamCommands`.
  #
  # Each command checks its arguments and rights here, and runs its work as
  # one group request at the stream's home (`Ringbus.Resp.GroupRequest`):
  # IDs given go as the seqs they bound (`Ringbus.Resp.StreamIds`), and
  # messages answered come with their IDs. XREADGROUP BLOCK waits here, on
  # a subscription to the stream (wherever it lives, as XREAD BLOCK does),
  # and takes what wakes it at the home.

  alias Ringbus.Resp.{
    Args,
    BlockingRead,
    Encoder,
    Entry,
    Errors,
    GroupRequest,
    Keys,
    StreamCommands
  }

  alias Ringbus.Server.Directory

  @all 4_611_686_018_427_387_904
  # The access XGROUP and XREADGROUP need on their keys, as the command
  # table (`Ringbus.Resp.Commands`) gives them: they check their keys here.
  @xgroup_access :write
  @read_access :write

  ## XGROUP

  def xgroup([sub | args], s) do
    upper = Args.upcase(sub)

    case {upper, args} do
      {"HELP", []} ->
        {help(), s}

      {"CREATE", [key, group, id | opts]} ->
        keyed(s, key, fn -> create(key, group, id, opts, s) end)

      {"SETID", [key, group, id | opts]} ->
        keyed(s, key, fn -> setid(key, group, id, opts) end)

      {"DESTROY", [key, group]} ->
        keyed(s, key, fn -> destroy(key, group) end)

      {"CREATECONSUMER", [key, group, consumer]} ->
        keyed(s, key, fn -> create_consumer(key, group, consumer) end)

      {"DELCONSUMER", [key, group, consumer]} ->
        keyed(s, key, fn -> delete_consumer(key, group, consumer) end)

      {upper, _}
      when upper in ["CREATE", "SETID", "DESTROY", "CREATECONSUMER", "DELCONSUMER", "HELP"] ->
        {Errors.wrong_arity("xgroup|" <> String.downcase(upper)), s}

      _ ->
        {Errors.unknown_subcommand(sub, "XGROUP"), s}
    end
  end

  defp keyed(s, key, fun), do: Keys.keyed(s, @xgroup_access, key, fun)

  # An XGROUP subcommand's request at the home; no stream: the key is required.
  defp run(key, request, reply), do: GroupRequest.run(key, request, key_required(), reply)

  defp key_required do
    Encoder.error(
      "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
    )
  end

  # As Redis orders its checks: an argument's error once the key is known to exist.
  defp unless_missing(key, reply) do
    if match?({:ok, _}, Errors.check!(Ringbus.info(key), key)), do: reply, else: key_required()
  end

  defp destroy(key, group) do
    run(key, {:destroy, group}, fn
      {:ok, true} ->
        group_destroyed(key, group)
        1

      {:ok, false} ->
        0
    end)
  end

  # Tells the XREADGROUPs that wait on the group, through any node, that it
  # is gone (`Ringbus.Resp.Session.group_destroyed/3`).
  defp group_destroyed(key, group) do
    :erpc.multicast(Node.list(), __MODULE__, :tell_waiters, [key, group])
    tell_waiters(key, group)
  end

  @doc false
  def tell_waiters(key, group) do
    for pid <- Directory.group_waiters(key, group),
        do: send(pid, {:resp_group_destroyed, key, group})

    :ok
  end

  defp create(key, group, id, opts, s) do
    with {:ok, mkstream, entries_read} <- create_options(opts, false, -1),
         :ok <- ensure_stream(key, mkstream, s),
         {:ok, from} <- group_position(id) do
      run(key, {:create, group, from, entries_read}, fn
        :ok ->
          {:simple, "OK"}

        {:error, :exists} ->
          Encoder.error("BUSYGROUP Consumer Group name already exists")

        {:error, {:too_many_groups, limit}} ->
          Encoder.error([
            "ERR stream '",
            key,
            "' has #{limit} groups, the most a Ringbus stream keeps"
          ])

        {:error, reason} ->
          Errors.reply(reason, key)
      end)
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
      {:ok, n} when n >= -1 -> {:ok, n}
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
  # Else the last seq whose ID is the ID given or below.
  defp group_position("$"), do: {:ok, :last}

  defp group_position(id) do
    case Entry.parse(id) do
      {:ok, id} -> {:ok, {:id, :through, id}}
      :error -> {:error, Args.invalid_id()}
    end
  end

  # SETID takes `-` for 0-0, as Redis (CREATE does not).
  defp setid(key, group, id, opts) do
    with {:ok, read} <- setid_options(opts),
         {:ok, from} <- group_position(if(id == "-", do: "0-0", else: id)) do
      run(key, {:set_id, group, from, read}, fn
        :ok -> {:simple, "OK"}
        {:error, :no_group} -> Errors.no_group(key, group)
        {:error, reason} -> Errors.reply(reason, key)
      end)
    else
      {:error, reply} -> unless_missing(key, reply)
    end
  end

  # Without ENTRIESREAD, Redis forgets what the group has read.
  defp setid_options([]), do: {:ok, -1}

  defp setid_options([opt, n]) do
    if Args.upcase(opt) == "ENTRIESREAD",
      do: entries_read(n),
      else: {:error, Errors.syntax_error()}
  end

  defp setid_options(_opts), do: {:error, Errors.syntax_error()}

  defp create_consumer(key, group, consumer) do
    run(key, {:create_consumer, group, consumer}, fn
      {:ok, :created} -> 1
      {:ok, :exists} -> 0
      {:error, :no_group} -> Errors.no_group(key, group)
      {:error, {:too_many_consumers, limit}} -> too_many_consumers(group, limit)
    end)
  end

  defp delete_consumer(key, group, consumer) do
    run(key, {:delete_consumer, group, consumer}, fn
      {:ok, dropped} -> dropped
      {:error, :no_group} -> Errors.no_group(key, group)
    end)
  end

  defp too_many_consumers(group, limit),
    do:
      Encoder.error([
        "ERR group '",
        group,
        "' has #{limit} consumers, the most a Ringbus group keeps"
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
         {:ok, reads} <- group_reads(opts.streams, group),
         :ok <- groups_found(reads, group) do
      read_group(reads, group, consumer, opts, s)
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
            {:ok, id} ->
              {:cont, {:ok, [{key, {:history, {:id, :after, id}}} | acc]}}

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

  # Every stream has the group, or none is read. One stream's read finds
  # out itself, in the same request.
  defp groups_found([_one], _group), do: :ok

  defp groups_found(reads, group) do
    case Enum.find(reads, fn {key, _} -> not GroupRequest.group?(key, group) end) do
      nil -> :ok
      {key, _} -> {:error, no_group(key, group)}
    end
  end

  defp no_group(key, group) do
    Encoder.error([
      "NOGROUP No such key '",
      key,
      "' or consumer group '",
      group,
      "' in XREADGROUP with GROUP option"
    ])
  end

  defp read_group(reads, group, consumer, opts, s) do
    max = if opts.count > 0, do: opts.count, else: @all
    found = for {key, read} <- reads, do: {key, read(key, read, group, consumer, max, opts.noack)}

    case found do
      [{key, :no_group}] ->
        {no_group(key, group), s}

      found ->
        # Destroyed since it was found: nothing from it.
        found =
          for {key, entries} <- found, do: {key, if(entries == :no_group, do: [], else: entries)}

        answer(found, reads, group, consumer, opts, s)
    end
  end

  defp answer(found, reads, group, consumer, opts, s) do
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

  # One stream's part of an XREADGROUP, at its home: the consumer is seen,
  # and reads new entries or its own pending ones; :no_group without the group.
  defp read(key, :new, group, consumer, max, noack) do
    GroupRequest.run(key, {:read, group, consumer, max, noack}, :no_group, fn
      {:ok, messages} -> StreamCommands.entries(messages)
      {:error, :no_group} -> :no_group
    end)
  end

  defp read(key, {:history, from}, group, consumer, max, _noack) do
    GroupRequest.run(key, {:history, group, consumer, from, max}, :no_group, fn
      {:ok, rows} -> Enum.map(rows, &history_entry/1)
      {:error, :no_group} -> :no_group
      {:error, reason} -> Errors.fail!(reason, key)
    end)
  end

  # [id, null array] for an entry the ring no longer holds (deleted, or
  # gone), as Redis answers for a deleted one.
  defp history_entry({_seq, nil, id}), do: [Entry.format(id), :null_array]
  defp history_entry({_seq, payload, id}), do: [Entry.format(id), Entry.decode(payload)]

  # The wait is listed as the group's before the group is looked up, so
  # that an XGROUP DESTROY after the look-up reaches it.
  defp wait(reads, group, consumer, opts, s) do
    keys = for {key, :new} <- reads, do: key
    Enum.each(keys, &Directory.wait_group(&1, group))

    starts =
      for key <- keys do
        GroupRequest.run(key, {:info, group}, {key, :no_group}, fn
          {:ok, %{last: last}} -> {key, last + 1}
          {:error, :no_group} -> {key, :no_group}
        end)
      end

    block = %{
      module: __MODULE__,
      timeout: BlockingRead.timeout(opts.block),
      group: group,
      consumer: consumer,
      count: if(opts.count > 0, do: opts.count, else: @all),
      noack: opts.noack,
      subs: %{},
      watch: for(key <- keys, do: {key, group})
    }

    case Enum.find(starts, &match?({_, :no_group}, &1)) do
      # Destroyed since it was read.
      {key, :no_group} ->
        BlockingRead.release(block)
        {no_group(key, group), s}

      nil ->
        with {reply, s} <- BlockingRead.block(starts, opts.count, block, s) do
          BlockingRead.release(block)
          {reply, s}
        end
    end
  end

  @doc false
  # A stream the XREADGROUP waits on was deleted: Redis's -UNBLOCKED, as
  # its group went with it.
  def closed(_block, _sub, :channel_deleted, s),
    do: {:reply, Encoder.error("UNBLOCKED the stream key no longer exists"), s}

  def closed(block, sub, _reason, s), do: BlockingRead.drop(block, sub, s)

  @doc false
  # New entries on a stream the XREADGROUP waits on: take them for the
  # group, at the stream's home. Another consumer may have had them first;
  # then wait on.
  def woken(block, sub, messages, _lost, s) do
    key = Map.fetch!(block.subs, sub)
    request = {:take, block.group, block.consumer, block.count, block.noack}

    taken =
      GroupRequest.run(key, request, [], fn
        {:ok, messages} -> StreamCommands.entries(messages)
        {:error, :no_group} -> :no_group
      end)

    case taken do
      :no_group ->
        {:reply, Errors.group_gone(), s}

      [] ->
        n = Enum.count(messages)
        if n > 0, do: Ringbus.ack(sub, n)
        {:wait, block}

      entries ->
        {:reply, StreamCommands.streams_reply([{key, entries}]), s}
    end
  end

  ## XACK

  # An ID that names no entry acks nothing.
  def xack([key, group | ids], s) do
    case parse_ids(ids) do
      {:ok, ids} ->
        refs = for id <- ids, do: {:entry, id}
        {GroupRequest.run(key, {:ack, group, refs}, 0, fn {:ok, acked} -> acked end), s}

      :error ->
        {Args.invalid_id(), s}
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
end
