defmodule Ringbus.Resp.StreamCommands do
  @moduledoc false
  # The stream commands of `Ringbus.Resp.Session`: XADD, XREAD, XRANGE,
  # XREVRANGE, XLEN, XTRIM and XDEL, on top of `Ringbus`. Each takes
  # the command's arguments (its name aside) and the session, and returns
  # `{reply, session}` or, for a read that waits, `{:block, block, session}`.
  #
  # Removing entries. A ring gives up its entries from the oldest end only,
  # by pulling them: XTRIM, the trimming options of XADD and XDEL pull, and
  # the stream's `pulled` figure counts them. XDEL deletes the IDs given when
  # they are the stream's oldest entries, and refuses to punch a hole.

  alias Ringbus.Resp.{Args, BlockingRead, Encoder, Entry, Errors, Keys, Trim}

  # A read with no COUNT: everything, as in Redis; the ring bounds it.
  @all 4_611_686_018_427_387_904
  # The access XREAD needs on its keys, as the command table
  # (`Ringbus.Resp.Commands`) gives it: XREAD checks its keys here.
  @xread_access :read

  ## XADD

  @doc """
  Whether a command is an XADD that can be stored with its neighbours:
  `{:ok, key, entry}` for one with `*` that the session may run, or `:no`.
  """
  @spec batchable(binary(), [binary()], map()) :: {:ok, term(), map()} | :no
  def batchable(name, args, s) do
    with true <- xadd?(name),
         true <- Keys.authenticated?(s),
         {:ok, %{id: :auto, producer: nil} = add} <- Args.parse_xadd(args),
         # `~` with its LIMIT trims per XADD, as Redis does.
         true <- add.trim == nil or not add.trim.approx,
         true <- Keys.allowed?(s, :write, add.key) do
      payload = Entry.encode(add.pairs)
      {:ok, {add.key, add.nomkstream, add.trim}, payload}
    else
      _ -> :no
    end
  end

  defp xadd?("XADD"), do: true
  defp xadd?(<<x, _, _, _>> = name) when x in [?x, ?X], do: Args.upcase(name) == "XADD"
  defp xadd?(_name), do: false

  @doc "A batch of XADDs with one key, starting with `payload`."
  def batch(key, payload), do: {key, [payload], 1}

  @doc "Adds an XADD's payload to a batch."
  def add({key, payloads, n}, payload), do: {key, [payload | payloads], n + 1}

  @doc "Stores a batch with one push; returns a reply for each XADD, in order."
  @spec store(term(), map()) :: [Encoder.reply()]
  def store({{key, nomkstream, trim}, payloads, n}, s) do
    payloads = :lists.reverse(payloads)

    case push(key, run(payloads, n), nomkstream, s) do
      {:ok, first} ->
        trim(key, trim)
        ids(first, n, [])

      {:error, reason} when n > 1 and reason in [:full, :too_large] ->
        # A rejecting stream, or an entry over max_bytes: each XADD goes in
        # on its own or not at all.
        Enum.map(payloads, fn p -> p |> List.wrap() |> store_one(key, nomkstream, trim, s) end)

      {:error, reason} ->
        List.duplicate(push_error(key, reason), n)
    end
  end

  defp store_one(payloads, key, nomkstream, trim, s) do
    case push(key, &Ringbus.push_many(&1, payloads), nomkstream, s) do
      {:ok, seq} ->
        trim(key, trim)
        Entry.id(seq)

      {:error, reason} ->
        push_error(key, reason)
    end
  end

  defp ids(_first, 0, acc), do: :lists.reverse(acc)
  defp ids(first, n, acc), do: ids(first + 1, n - 1, [Entry.id(first) | acc])

  # The XADDs of a batch as one push; a refusal of several counts nothing.
  defp run([payload], 1), do: &Ringbus.push(&1, payload)

  defp run(payloads, n) do
    bytes = Enum.reduce(payloads, 0, &(byte_size(&1) + &2))
    &Ringbus.push_run(&1, payloads, n, bytes)
  end

  defp push(key, push, nomkstream, s) do
    case push.(key) do
      {:error, :no_channel} when nomkstream ->
        {:error, :nomkstream}

      {:error, :no_channel} ->
        with :ok <- Keys.create(key, s), do: push.(key)

      result ->
        result
    end
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
          {hd(store({{add.key, add.nomkstream, add.trim}, [payload], 1}, s)), s}

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
    case push(add.key, &Ringbus.push(&1, payload, producer: tag), add.nomkstream, s) do
      {:ok, seq} ->
        trim(add.key, add.trim)
        Entry.id(seq)

      {:error, reason} ->
        push_error(add.key, reason)
    end
  end

  # A ring numbers its entries itself: an explicit ID must be the next one.
  defp explicit(add, id, payload, s) do
    next =
      case Errors.check!(Ringbus.info(add.key), add.key) do
        {:ok, info} -> info.next_seq
        {:error, :no_channel} -> 0
      end

    next_id = Entry.id_of(next)

    cond do
      id == {0, 0} ->
        Encoder.error("ERR The ID specified in XADD must be greater than 0-0")

      match?({:ms, _}, id) and elem(id, 1) == elem(next_id, 0) ->
        store_one([payload], add.key, add.nomkstream, add.trim, s)

      match?({:ms, _}, id) and elem(id, 1) < elem(next_id, 0) ->
        too_small()

      match?({:ms, _}, id) ->
        not_next(next_id)

      id < next_id ->
        too_small()

      id == next_id ->
        store_one([payload], add.key, add.nomkstream, add.trim, s)

      true ->
        not_next(next_id)
    end
  end

  defp too_small,
    do:
      Encoder.error(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
      )

  defp not_next(next_id) do
    Encoder.error([
      "ERR The ID specified in XADD must be the stream's next ID, ",
      Entry.format(next_id),
      ": a Ringbus stream numbers its entries itself"
    ])
  end

  ## Trimming

  # Pulls the oldest entries Redis would trim (`Ringbus.Resp.Trim`); returns
  # how many went. Concurrent pulls may leave the stream a little shorter.
  defp trim(_key, nil), do: 0

  defp trim(key, trim) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} -> pull(key, Trim.count(trim, info.first_seq, info.next_seq), 0)
      _ -> 0
    end
  end

  defp pull(_key, n, done) when n <= 0, do: done

  defp pull(key, n, done) do
    case Ringbus.pull(key) do
      {:ok, _seq, _payload} -> pull(key, n - 1, done + 1)
      _ -> done
    end
  end

  def xtrim([key | rest], s) do
    case Args.parse_xtrim(rest) do
      {:ok, trim} -> {trim(key, trim), s}
      {:error, reply} -> {reply, s}
    end
  end

  ## XDEL

  def xdel([key | ids], s) do
    case Args.parse_ids(ids, []) do
      {:ok, ids} ->
        case Errors.check!(Ringbus.info(key), key) do
          {:ok, info} -> {delete_oldest(key, ids, info), s}
          {:error, :no_channel} -> {0, s}
        end

      :error ->
        {Args.invalid_id(), s}
    end
  end

  # The IDs of entries the stream holds must be its oldest ones.
  defp delete_oldest(key, ids, info) do
    held =
      ids
      |> Enum.flat_map(fn id ->
        case Entry.seq(id) do
          {:ok, seq} when seq >= info.first_seq and seq < info.next_seq -> [seq]
          _ -> []
        end
      end)
      |> Enum.uniq()

    count = Enum.count(held)

    cond do
      count == 0 ->
        0

      Enum.max(held) == info.first_seq + count - 1 ->
        pull(key, count, 0)

      true ->
        Encoder.error(
          "ERR a Ringbus stream deletes entries from its oldest end only: XDEL its oldest entries, or XTRIM"
        )
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
        low = max(low, info.first_seq)
        high = min(high, info.next_seq - 1)

        cond do
          low > high ->
            []

          direction == :forward ->
            key |> read(low, min(count, high - low + 1)) |> entries()

          true ->
            key
            |> read(max(low, high - count + 1), min(count, high - low + 1))
            |> :lists.reverse()
            |> entries()
        end

      {:error, :no_channel} ->
        []
    end
  end

  @doc false
  # A read of `key` for a reply: a missing stream holds nothing.
  def read(key, from, max) do
    case Errors.check!(Ringbus.read(key, from, max), key) do
      {:ok, messages, _lost} -> messages
      {:error, :no_channel} -> []
    end
  end

  @doc "Channel messages as stream entries."
  @spec entries([{Ringbus.seq(), binary()}]) :: [Encoder.reply()]
  def entries(messages),
    do: Enum.map(messages, fn {seq, payload} -> [Entry.id(seq), Entry.decode(payload)] end)

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

  defp read_start(key, "$") do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} -> {:ok, info.next_seq}
      {:error, :no_channel} -> {:ok, 0}
    end
  end

  defp read_start(_key, ">"), do: :gt

  defp read_start(_key, id) do
    case Entry.parse(id) do
      {:ok, id} -> {:ok, Entry.seq_after(id)}
      :error -> :error
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
        for {key, {:ok, from}} <- starts,
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
    block = %{module: __MODULE__, timeout: BlockingRead.timeout(opts.block)}
    BlockingRead.block(for({key, {:ok, from}} <- starts, do: {key, from}), opts.count, block, s)
  end

  @doc false
  # The waiting XREAD got entries (`Ringbus.Resp.BlockingRead`): its reply.
  def woken(block, sub, messages, _lost, s) do
    case messages do
      [] -> {:wait, block}
      _ -> {:reply, streams_reply([{Map.fetch!(block.subs, sub), entries(messages)}]), s}
    end
  end
end
