defmodule Ringbus.Resp.StreamCommands do
  @moduledoc false
  # The stream commands of `Ringbus.Resp.Session`: XADD, XREAD, XRANGE,
  # XREVRANGE, XLEN, XTRIM and XDEL, on top of `Ringbus`. Each takes
  # the command's arguments (its name aside) and the session, and returns
  # `{reply, session}` or, for a read that waits, `{:block, block, session}`.
  #
  # Removing entries. XTRIM and the trimming options of XADD are one trim
  # where the stream lives (`Ringbus.Channel.Trim`), from the oldest end,
  # and the stream's `pulled` figure counts what they remove. XDEL is one
  # delete of any entries (`Ringbus.Channel.Deletes`), counted `deleted`.
  #
  # IDs. Every entry has the ID it was stored under (`Ringbus.Channel.Ids`):
  # a push answers it where the stream lives (`Ringbus.Op`'s `{:ids,
  # push}`), the IDs of one push's batch are consecutive from its first, and
  # the IDs a client gives are turned into seqs there too
  # (`Ringbus.Resp.StreamIds`).

  alias Ringbus.Channel.{Ids, Trim}
  alias Ringbus.Resp.{Args, BlockingRead, Counters, Encoder, Entry, Errors, Keys, StreamIds}

  # A read with no COUNT: everything, as in Redis; the ring bounds it.
  @all 4_611_686_018_427_387_904
  # The access XREAD needs on its keys, as the command table
  # (`Ringbus.Resp.Commands`) gives it: XREAD checks its keys here.
  @xread_access :read

  ## XADD

  @doc """
  Whether a command is an XADD that can be stored with the other XADDs of
  its read: `{:ok, key, opts, payload}` for one with `*` that the session
  may run, or `:no`.
  """
  @spec batchable(binary(), [binary()], map()) :: {:ok, binary(), term(), binary()} | :no
  def batchable(name, args, s) do
    with true <- xadd?(name),
         true <- Keys.authenticated?(s),
         {:ok, %{id: :auto, producer: nil} = add} <- Args.parse_xadd(args),
         true <- Keys.allowed?(s, :write, add.key) do
      {:ok, add.key, {add.nomkstream, add.trim}, Entry.encode(add.pairs)}
    else
      _ -> :no
    end
  end

  @doc "Whether a command name is XADD, in any case."
  @spec xadd?(binary()) :: boolean()
  def xadd?(<<x, a, d, e>>)
      when x in [?x, ?X] and a in [?a, ?A] and d in [?d, ?D] and e in [?d, ?D],
      do: true

  def xadd?(_name), do: false

  # A batch: the XADDs of a read by stream, `%{key => {opts, payloads
  # (reversed), count, bytes}}`, the streams in the order they came and the
  # stream of each XADD (both reversed), to answer them in order.

  @doc "A batch of no XADD."
  @spec batch() :: tuple()
  def batch, do: {%{}, [], []}

  @doc """
  Adds an XADD to its stream's group: `{:ok, batch}`, or `:conflict` when
  the stream's group has other options (the batch must be stored first).
  """
  @spec add(tuple(), binary(), term(), binary()) :: {:ok, tuple()} | :conflict
  def add({groups, order, slots}, key, opts, payload) do
    case groups do
      %{^key => {^opts, payloads, n, bytes}} ->
        group = {opts, [payload | payloads], n + 1, bytes + byte_size(payload)}
        {:ok, {%{groups | key => group}, order, [key | slots]}}

      %{^key => _other_options} ->
        :conflict

      _ ->
        group = {opts, [payload], 1, byte_size(payload)}
        {:ok, {Map.put(groups, key, group), [key | order], [key | slots]}}
    end
  end

  @doc "Stores a batch with one push per stream; returns a reply for each XADD, in order."
  @spec store(tuple(), map()) :: [Encoder.reply()]
  def store({groups, [key], _slots}, s), do: store_group(key, Map.fetch!(groups, key), s)

  def store({groups, order, slots}, s) do
    replies = Map.new(:lists.reverse(order), &{&1, store_group(&1, Map.fetch!(groups, &1), s)})
    in_order(:lists.reverse(slots), replies, [])
  end

  defp in_order([key | rest], replies, acc) do
    [reply | more] = Map.fetch!(replies, key)
    in_order(rest, %{replies | key => more}, [reply | acc])
  end

  defp in_order([], _replies, acc), do: :lists.reverse(acc)

  # The XADDs of one stream as one operation where the stream lives: one
  # push of them all, then their trim (`Ringbus.Op`'s `:push_trim`); one by
  # one when the stream refuses them together.
  defp store_group(key, {{nomkstream, trim}, payloads, n, bytes}, s) do
    payloads = :lists.reverse(payloads)

    if n == 1,
      do: [store_one(payloads, key, nomkstream, trim, s)],
      else: store_run(key, payloads, n, bytes, nomkstream, Trim.of_run(trim, n), s)
  end

  defp store_run(key, payloads, n, bytes, nomkstream, trim, s) do
    case push(key, {:push_run, payloads, n, bytes}, nomkstream, trim, s) do
      {:ok, _first, id} ->
        ids(id, n, 0, [])

      {:error, reason} when reason in [:full, :too_large] and trim == nil ->
        # A rejecting stream, or entries over max_bytes: each XADD goes in
        # on its own or not at all, in one operation.
        batches = Enum.map(payloads, &{[&1], 1, byte_size(&1)})

        case Ringbus.run(key, {:ids, {:push_batches, batches}}) do
          {:ok, results} ->
            Enum.map(results, &stored(key, &1))

          {:error, reason} ->
            one_by_one(key, payloads, n, nomkstream, nil, reason, s)
        end

      {:error, reason} ->
        one_by_one(key, payloads, n, nomkstream, trim, reason, s)
    end
  end

  # A whole batch refused and certainly not stored: by the bound of the link
  # to the stream's node, or while that node is busy, where one XADD may go
  # through, or as one that would lap the ring before its trim; then the
  # XADDs one by one. Any other error answers them all:
  # after a timeout a batch may have been stored, and must not be again.
  defp one_by_one(key, payloads, _n, nomkstream, trim, reason, s)
       when reason in [:full, :too_large, :node_busy, :laps],
       do: Enum.map(payloads, &store_one([&1], key, nomkstream, trim, s))

  defp one_by_one(key, _payloads, n, _nomkstream, _trim, reason, _s),
    do: List.duplicate(push_error(key, reason), n)

  defp stored(_key, {:ok, _seq, id}), do: Entry.format(id)
  defp stored(key, {:error, reason}), do: push_error(key, reason)

  defp store_one([payload], key, nomkstream, trim, s),
    do: store_one_with({:push_many, [payload], 1, byte_size(payload)}, key, nomkstream, trim, s)

  # One push and its trim: its ID, or the error as a reply.
  defp store_one_with(op, key, nomkstream, trim, s) do
    case push(key, op, nomkstream, trim, s) do
      {:ok, _seq, id} -> Entry.format(id)
      {:error, reason} -> push_error(key, reason)
    end
  end

  # A batch's IDs are consecutive from its first (`Ringbus.Channel.Ids`).
  defp ids(_first, n, n, acc), do: :lists.reverse(acc)
  defp ids(first, n, i, acc), do: ids(first, n, i + 1, [Entry.format(Ids.nth(first, i)) | acc])

  # One request to where the stream lives: the push, its trim, answered
  # with the first ID stored; a stream no node has is made first, unless
  # NOMKSTREAM. Errors are answers here, never thrown: a batch is stored
  # outside any one command.
  defp push(key, op, nomkstream, trim, s) do
    op = with_ids(op)
    op = if trim, do: {:push_trim, op, seq_trim(key, trim, s)}, else: op

    case made(Ringbus.run(key, op), key, op, nomkstream, s) do
      {:ok, seq, id} -> {:ok, seq, id}
      {:error, :no_channel} when nomkstream -> {:error, :nomkstream}
      {:error, _} = error -> error
    end
  end

  # A client's ID is answered as it is stored; any other push, with its first ID.
  defp with_ids({:push_id, _payload, _given} = op), do: op
  defp with_ids(op), do: {:ids, op}

  # A new stream's options are worked out only when the stream is missing.
  defp made({:error, :no_channel}, key, op, false, s) do
    case Keys.stream_options(s.config) do
      false -> {:error, :no_create}
      create -> Ringbus.run(key, op, create: create)
    end
  end

  defp made(answer, _key, _op, _nomkstream, _s), do: answer

  defp push_error(_key, :nomkstream), do: nil

  defp push_error(key, :no_create), do: Errors.no_create(key)
  defp push_error(key, reason), do: Errors.reply(reason, key)

  @doc "XADD: the form with `*` runs batched (see `batchable/3`); here, the rest."
  def xadd(args, s) do
    with {:ok, add} <- Args.parse_xadd(args) do
      payload = Entry.encode(add.pairs)

      case add do
        %{producer: nil, id: :auto} ->
          {store_one([payload], add.key, add.nomkstream, add.trim, s), s}

        %{producer: nil, id: id} ->
          {explicit(add, id, payload, s), s}

        %{producer: tag} ->
          {tagged(add, tag, payload, s), s}
      end
    else
      {:error, reply} -> {reply, s}
    end
  end

  # Stored once however often it is sent: a resend answers the first send's ID.
  defp tagged(add, tag, payload, s) do
    op = {:push_tagged, tag, [payload], 1, byte_size(payload)}
    store_one_with(op, add.key, add.nomkstream, add.trim, s)
  end

  # A client's ID: stored under it if it is above the stream's last
  # (Redis's rules, where the stream lives).
  # `0-0` is refused before the stream is looked up, so none is made for it.
  defp explicit(_add, {0, 0}, _payload, _s), do: Errors.reply(:zero, "")

  defp explicit(add, id, payload, s),
    do: store_one_with({:push_id, payload, id}, add.key, add.nomkstream, add.trim, s)

  ## Trimming

  # A trim as the channel runs it: MINID's ID as the first seq it keeps,
  # found where the stream lives (one more request); MAXLEN as it is; the
  # node size CONFIG SET gave, when not Redis's default.
  defp seq_trim(key, %{strategy: {:minid, id}} = trim, s) do
    [from] = StreamIds.bounds(key, [{:from, id}])
    seq_trim(key, %{trim | strategy: {:min_seq, from}}, s)
  end

  defp seq_trim(_key, trim, s) do
    case Counters.get(s.context.stats, :stream_node_max_entries) do
      100 -> trim
      node -> Map.put(trim, :node, node)
    end
  end

  def xtrim([key | rest], s) do
    case Args.parse_xtrim(rest) do
      {:ok, trim} -> {trimmed(key, Ringbus.run(key, {:trim, seq_trim(key, trim, s)})), s}
      {:error, reply} -> {reply, s}
    end
  end

  ## XDEL

  def xdel([key | ids], s) do
    case Args.parse_ids(ids, []) do
      {:ok, ids} ->
        # A missing stream names no entry: nothing to delete.
        seqs = for seq <- StreamIds.exact(key, ids), seq != :none, do: seq
        {deleted(key, seqs), s}

      :error ->
        {Args.invalid_id(), s}
    end
  end

  defp deleted(_key, []), do: 0
  defp deleted(key, seqs), do: trimmed(key, Ringbus.run(key, {:delete, seqs}))

  defp trimmed(key, answer) do
    case Errors.check!(answer, key) do
      {:ok, count} -> count
      {:error, :no_channel} -> 0
    end
  end

  ## Reading

  def xlen([key], s) do
    case Errors.check!(Ringbus.len(key), key) do
      len when is_integer(len) -> {len, s}
      {:error, :no_channel} -> {0, s}
    end
  end

  def xrange([key, start, stop | opts], s), do: {range(key, start, stop, opts, :forward), s}
  def xrevrange([key, stop, start | opts], s), do: {range(key, start, stop, opts, :reverse), s}

  defp range(key, start, stop, opts, direction) do
    with {:ok, count} <- Args.range_count(opts),
         {:ok, low} <- Args.range_id(start, :start),
         {:ok, high} <- Args.range_id(stop, :end) do
      [low, high] = StreamIds.bounds(key, [low, high])
      read_range(key, low, high, count, direction)
    else
      {:error, reply} -> reply
    end
  end

  # As Redis 7.0 answers COUNT 0.
  defp read_range(_key, _low, _high, 0, _direction), do: :null_array

  defp read_range(key, low, high, count, direction) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        low = max(low, info.first_seq)
        high = min(high, info.next_seq - 1)

        cond do
          low > high ->
            []

          direction == :forward ->
            key |> read(low, min(count, high - low + 1)) |> through(high) |> entries()

          true ->
            key |> read_back(low, high, count, []) |> entries()
        end

      {:error, :no_channel} ->
        []
    end
  end

  # A read passes over deleted entries (`Ringbus.Channel.Deletes`), so it
  # may reach past `high`: those go.
  defp through(messages, high), do: Enum.take_while(messages, &(elem(&1, 0) <= high))

  # Up to `count` entries from `high` down to `low`, newest first: a window
  # of `count` seqs below `high`, then below it again while deleted entries
  # left the window short.
  defp read_back(key, low, high, count, acc) do
    from = max(low, high - count + 1)

    window = key |> read(from, high - from + 1) |> through(high) |> Enum.reverse()
    n = Enum.count(window)
    acc = acc ++ window
    if n < count and from > low, do: read_back(key, low, from - 1, count - n, acc), else: acc
  end

  @doc false
  # A read of `key` for a reply, each message with its ID: a missing
  # stream holds nothing.
  def read(key, from, max) do
    case Errors.check!(Ringbus.run(key, {:read, from, max, nil, :ids}), key) do
      {:ok, messages, _lost} -> messages
      {:error, :no_channel} -> []
    end
  end

  @doc "Channel messages with their IDs (`{seq, payload, id}`) as stream entries."
  @spec entries([{Ringbus.seq(), binary(), Entry.id()}]) :: [Encoder.reply()]
  def entries(messages),
    do:
      Enum.map(messages, fn {_seq, payload, id} -> [Entry.format(id), Entry.decode(payload)] end)

  @doc "Messages `{seq, payload}` of stream `key` with their IDs, asked where it lives."
  @spec with_ids(binary(), [{Ringbus.seq(), binary()}]) :: [{Ringbus.seq(), binary(), Entry.id()}]
  def with_ids(key, messages) do
    ids = StreamIds.ids_of(key, Enum.map(messages, &elem(&1, 0)))
    Enum.zip_with(messages, ids, fn {seq, payload}, id -> {seq, payload, id} end)
  end

  ## XREAD

  def xread(args, s) do
    with {:ok, opts} <-
           Args.read_options(args, %{count: 0, block: nil, group: nil, noack: false}, "xread"),
         :ok <- Args.streams_allowed(opts.streams, @xread_access, s) do
      starts = Enum.map(opts.streams, fn {key, id} -> {key, read_start(key, id)} end)

      case Enum.find(starts, &match?({_, :error}, &1)) do
        nil -> xread_now(starts, opts, s)
        {_, :error} -> {Args.invalid_id(), s}
      end
    else
      {:error, reply} -> {reply, s}
    end
  end

  # Where a stream's read starts: the seq after the ID given, and that ID
  # (nil for `$`), which what a wait gets must be above: a stream made
  # while it waits starts at seq 0, below the ID.
  defp read_start(key, "$") do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} -> {:ok, info.next_seq, nil}
      {:error, :no_channel} -> {:ok, 0, nil}
    end
  end

  defp read_start(_key, ">"), do: :gt

  defp read_start(key, id) do
    case Entry.parse(id) do
      {:ok, id} ->
        [from] = StreamIds.bounds(key, [{:after, id}])
        {:ok, from, id}

      :error ->
        :error
    end
  end

  defp xread_now(starts, opts, s) do
    if Enum.any?(starts, &match?({_, :gt}, &1)) do
      {Encoder.error(
         "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."
       ), s}
    else
      max = if opts.count > 0, do: opts.count, else: @all

      found =
        for {key, {:ok, from, _id}} <- starts,
            (messages = read(key, from, max)) != [],
            do: {key, entries(messages)}

      cond do
        found != [] -> {streams_reply(found), s}
        opts.block == nil -> {:null_array, s}
        true -> wait(starts, opts, s)
      end
    end
  end

  @doc "The reply of XREAD and XREADGROUP: stream => entries."
  def streams_reply(found), do: {:pairs, found}

  defp wait(starts, opts, s) do
    block = %{
      module: __MODULE__,
      timeout: BlockingRead.timeout(opts.block),
      count: opts.count,
      above: for({key, {:ok, _from, id}} <- starts, id != nil, into: %{}, do: {key, id})
    }

    starts = for {key, {:ok, from, _id}} <- starts, do: {key, from}
    BlockingRead.block(starts, opts.count, block, s)
  end

  @doc false
  # The waiting XREAD got entries (`Ringbus.Resp.BlockingRead`): its reply.
  def woken(block, sub, messages, _lost, s) do
    key = Map.fetch!(block.subs, sub)

    case above(key, messages, block.above[key]) do
      [] ->
        n = Enum.count(messages)
        if n > 0, do: Ringbus.ack(sub, n)
        {:wait, block}

      messages ->
        {:reply, streams_reply([{key, entries(messages)}]), s}
    end
  end

  defp above(_key, [], _id), do: []
  defp above(key, messages, nil), do: with_ids(key, messages)

  defp above(key, messages, id),
    do: Enum.filter(with_ids(key, messages), &Ids.above?(elem(&1, 2), id))

  @doc false
  # A stream the XREAD waits on was deleted: as Redis, it waits on for the
  # stream's next entry, from the start of the stream made again (made now,
  # as XREAD BLOCK makes a missing stream).
  def closed(block, sub, :channel_deleted, s) do
    key = Map.fetch!(block.subs, sub)
    block = %{block | subs: Map.delete(block.subs, sub)}

    case BlockingRead.block([{key, 0}], block.count, block, s) do
      {:block, block, _s} -> {:wait, block}
      {reply, s} -> {:reply, reply, s}
    end
  end

  def closed(block, sub, _reason, s), do: BlockingRead.drop(block, sub, s)
end
