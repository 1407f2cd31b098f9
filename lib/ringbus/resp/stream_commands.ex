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

  alias Ringbus.Channel.Trim
  alias Ringbus.Resp.{Args, BlockingRead, Encoder, Entry, Errors, Keys}

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
      {:ok, first, tag} ->
        ids(first, n, tag, [])

      {:error, reason} when reason in [:full, :too_large] and trim == nil ->
        # A rejecting stream, or entries over max_bytes: each XADD goes in
        # on its own or not at all, in one operation.
        batches = Enum.map(payloads, &{[&1], 1, byte_size(&1)})

        case Ringbus.run(key, {:stamped, {:push_batches, batches}}) do
          {:ok, inc, {:ok, results}} ->
            Enum.map(results, &stored(key, Entry.tag(inc), &1))

          {:ok, _inc, {:error, reason}} ->
            one_by_one(key, payloads, n, nomkstream, nil, reason, s)

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

  defp stored(_key, tag, {:ok, seq}), do: Entry.id(seq, tag)
  defp stored(key, _tag, {:error, reason}), do: push_error(key, reason)

  defp store_one([payload], key, nomkstream, trim, s),
    do: store_one_with({:push_many, [payload], 1, byte_size(payload)}, key, nomkstream, trim, s)

  # One push and its trim: its ID, or the error as a reply.
  defp store_one_with(op, key, nomkstream, trim, s) do
    case push(key, op, nomkstream, trim, s) do
      {:ok, seq, tag} -> Entry.id(seq, tag)
      {:error, reason} -> push_error(key, reason)
    end
  end

  defp ids(_first, 0, _tag, acc), do: :lists.reverse(acc)
  defp ids(first, n, tag, acc), do: ids(first + 1, n - 1, tag, [Entry.id(first, tag) | acc])

  # One request to where the stream lives: the push, its trim, and the
  # incarnation its IDs are tagged with, which the home reads with the push;
  # a stream no node has is made first, unless NOMKSTREAM. Errors are
  # answers here, never thrown: a batch is stored outside any one command.
  defp push(key, op, nomkstream, trim, s) do
    op = {:stamped, if(trim, do: {:push_trim, op, seq_trim(key, trim)}, else: op)}

    case made(Ringbus.run(key, op), key, op, nomkstream, s) do
      {:ok, inc, {:ok, seq}} -> {:ok, seq, Entry.tag(inc)}
      {:ok, _inc, {:error, _} = error} -> error
      {:error, :no_channel} when nomkstream -> {:error, :nomkstream}
      {:error, _} = error -> error
    end
  end

  # A new stream's options are worked out only when the stream is missing.
  defp made({:error, :no_channel}, key, op, false, s) do
    case Keys.stream_options(s.config) do
      false -> {:error, :no_create}
      create -> Ringbus.run(key, op, create: create)
    end
  end

  defp made(answer, _key, _op, _nomkstream, _s), do: answer

  @doc "The tag of stream `key`'s IDs (`Ringbus.Resp.Entry.tag/1`), or nil when it does not exist."
  @spec tag(binary()) :: Entry.tag() | nil
  def tag(key) do
    case Errors.check!(Ringbus.incarnation(key), key) do
      {:ok, inc} -> Entry.tag(inc)
      {:error, :no_channel} -> nil
    end
  end

  @doc """
  An ID a client resumes from, pinned to stream `key`'s tag
  (`Ringbus.Resp.Entry.pin/2`); an ID of another incarnation ends the
  command with the `new_incarnation` error.
  """
  @spec pin!(Entry.id(), Entry.tag() | nil, binary()) :: Entry.id()
  def pin!(id, tag, key) do
    {:ok, id} = Errors.check!(Entry.pin(id, tag), key)
    id
  end

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

  # A ring numbers its entries itself: an explicit ID must be the next one.
  defp explicit(add, id, payload, s) do
    {next, tag} =
      case Errors.check!(Ringbus.info(add.key), add.key) do
        {:ok, info} -> {info.next_seq, Entry.tag(info.incarnation)}
        {:error, :no_channel} -> {0, nil}
      end

    # Compared as IDs without a tag: an ID of another tag is not the next one.
    next_id = {next + 1, 0}
    id = if is_tuple(id) and elem(id, 0) != :ms, do: Entry.local(id, tag), else: id

    cond do
      id == {0, 0} ->
        Encoder.error("ERR The ID specified in XADD must be greater than 0-0")

      match?({:ms, _}, id) and elem(id, 1) == elem(next_id, 0) ->
        store_one([payload], add.key, add.nomkstream, add.trim, s)

      match?({:ms, _}, id) and elem(id, 1) < elem(next_id, 0) ->
        too_small()

      match?({:ms, _}, id) ->
        not_next(next_id, tag)

      id < next_id ->
        too_small()

      id == next_id ->
        store_one([payload], add.key, add.nomkstream, add.trim, s)

      true ->
        not_next(next_id, tag)
    end
  end

  defp too_small,
    do:
      Encoder.error(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
      )

  defp not_next({ms, 0}, tag) do
    Encoder.error([
      "ERR The ID specified in XADD must be the stream's next ID, ",
      Entry.format({ms, tag || 0}),
      ": a Ringbus stream numbers its entries itself"
    ])
  end

  ## Trimming

  # A trim as the channel runs it: MINID's ID as the seq it names, which
  # takes the stream's tag (one more request, whose error leaves the ID as
  # it is: the trim then meets the error); MAXLEN as it is.
  defp seq_trim(key, %{strategy: {:minid, id}} = trim) do
    tag = with {:ok, inc} <- Ringbus.incarnation(key), do: Entry.tag(inc)
    id = if is_integer(tag), do: Entry.local(id, tag), else: id
    %{trim | strategy: {:min_seq, Entry.seq_from(id)}}
  end

  defp seq_trim(_key, trim), do: trim

  def xtrim([key | rest], s) do
    case Args.parse_xtrim(rest) do
      {:ok, trim} -> {trimmed(key, Ringbus.run(key, {:trim, seq_trim(key, trim)})), s}
      {:error, reply} -> {reply, s}
    end
  end

  ## XDEL

  def xdel([key | ids], s) do
    case Args.parse_ids(ids, []) do
      {:ok, ids} ->
        case Errors.check!(Ringbus.incarnation(key), key) do
          {:ok, incarnation} ->
            tag = Entry.tag(incarnation)
            {deleted(key, Enum.flat_map(ids, &held_seq(Entry.local(&1, tag)))), s}

          {:error, :no_channel} ->
            {0, s}
        end

      :error ->
        {Args.invalid_id(), s}
    end
  end

  # An ID of this incarnation names a seq; another's names none.
  defp held_seq(id) do
    case Entry.seq(id) do
      {:ok, seq} -> [seq]
      :none -> []
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
    tag = tag(key)
    pin = &pin!(&1, tag, key)

    with {:ok, count} <- Args.range_count(opts),
         {:ok, low} <- Args.range_id(start, :start, pin),
         {:ok, high} <- Args.range_id(stop, :end, pin) do
      read_range(key, Entry.seq_from(low), Entry.seq_through(high), count, direction)
    else
      {:error, reply} -> reply
    end
  end

  # As Redis 7.0 answers COUNT 0.
  defp read_range(_key, _low, _high, 0, _direction), do: :null_array

  defp read_range(key, low, high, count, direction) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        tag = Entry.tag(info.incarnation)
        low = max(low, info.first_seq)
        high = min(high, info.next_seq - 1)

        cond do
          low > high ->
            []

          direction == :forward ->
            key |> read(low, min(count, high - low + 1)) |> through(high) |> entries(tag)

          true ->
            key |> read_back(low, high, count, []) |> entries(tag)
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

    {acc, n} =
      key
      |> read(from, high - from + 1)
      |> through(high)
      |> Enum.reduce({[], 0}, fn message, {newer, n} -> {[message | newer], n + 1} end)
      |> then(fn {window, n} -> {acc ++ window, n} end)

    if n < count and from > low, do: read_back(key, low, from - 1, count - n, acc), else: acc
  end

  @doc false
  # A read of `key` for a reply: a missing stream holds nothing.
  def read(key, from, max) do
    case Errors.check!(Ringbus.read(key, from, max), key) do
      {:ok, messages, _lost} -> messages
      {:error, :no_channel} -> []
    end
  end

  @doc "Channel messages as entries of a stream of tag `tag`."
  @spec entries([{Ringbus.seq(), binary()}], Entry.tag()) :: [Encoder.reply()]
  def entries(messages, tag),
    do: Enum.map(messages, fn {seq, payload} -> [Entry.id(seq, tag), Entry.decode(payload)] end)

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

  # Where a stream's read starts, with the tag looked up before it reads.
  defp read_start(key, "$") do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} -> {:ok, info.next_seq, Entry.tag(info.incarnation)}
      {:error, :no_channel} -> {:ok, 0, nil}
    end
  end

  defp read_start(_key, ">"), do: :gt

  defp read_start(key, id) do
    case Entry.parse(id) do
      {:ok, id} ->
        tag = tag(key)
        {:ok, Entry.seq_after(pin!(id, tag, key)), tag}

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
        for {key, {:ok, from, tag}} <- starts,
            (messages = read(key, from, max)) != [],
            # A stream made since it was looked up: its tag now.
            do: {key, entries(messages, tag || tag(key))}

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
    block = %{module: __MODULE__, timeout: BlockingRead.timeout(opts.block), count: opts.count}
    starts = for {key, {:ok, from, tag}} <- starts, do: {key, from, tag}
    BlockingRead.block(starts, opts.count, block, s)
  end

  @doc false
  # The waiting XREAD got entries (`Ringbus.Resp.BlockingRead`): its reply.
  def woken(block, sub, messages, _lost, s) do
    case messages do
      [] ->
        {:wait, block}

      _ ->
        {key, tag} = Map.fetch!(block.subs, sub)
        {:reply, streams_reply([{key, entries(messages, tag)}]), s}
    end
  end

  @doc false
  # A stream the XREAD waits on was deleted: as Redis, it waits on for the
  # stream's next entry, from the start of the stream made again (made now,
  # as XREAD BLOCK makes a missing stream).
  def closed(block, sub, :channel_deleted, s) do
    {key, _tag} = Map.fetch!(block.subs, sub)
    block = %{block | subs: Map.delete(block.subs, sub)}

    case BlockingRead.block([{key, 0}], block.count, block, s) do
      {:block, block, _s} -> {:wait, block}
      {reply, s} -> {:reply, reply, s}
    end
  end

  def closed(block, sub, _reason, s), do: BlockingRead.drop(block, sub, s)
end
