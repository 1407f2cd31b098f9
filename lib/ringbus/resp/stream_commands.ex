defmodule Ringbus.Resp.StreamCommands do
  @moduledoc false
  # The stream commands of `Ringbus.Resp.Session`: XADD, XREAD, XRANGE,
  # XREVRANGE, XLEN, XTRIM, XDEL and XINFO, on top of `Ringbus`. Each takes
  # the command's arguments (its name aside) and the session, and returns
  # `{reply, session}` or, for a read that waits, `{:block, block, session}`.
  #
  # Removing entries. A ring gives up its entries from the oldest end only,
  # by pulling them: XTRIM, the trimming options of XADD and XDEL pull, and
  # the stream's `pulled` figure counts them. XDEL deletes the IDs given when
  # they are the stream's oldest entries, and refuses to punch a hole.

  alias Ringbus.Resp.{Commands, Encoder, Entry, Errors, Groups, Trim}

  # A read with no COUNT: everything, as in Redis; the ring bounds it.
  @all 4_611_686_018_427_387_904
  # Entries a waiting read takes at once, when it has no COUNT.
  @block_batch 1_000

  ## XADD

  @doc """
  Whether a command is an XADD that can be stored with its neighbours:
  `{:ok, key, entry}` for one with `*` that the session may run, or `:no`.
  """
  @spec batchable(binary(), [binary()], map()) :: {:ok, term(), map()} | :no
  def batchable(name, args, s) do
    with true <- xadd?(name),
         true <- Commands.authenticated?(s),
         {:ok, %{id: :auto} = add} <- parse_xadd(args),
         # `~` with its LIMIT trims per XADD, as Redis does.
         true <- add.trim == nil or not add.trim.approx,
         true <- Commands.allowed?(s, :write, add.key) do
      payload = Entry.encode(add.pairs)
      {:ok, {add.key, add.nomkstream, add.trim}, payload}
    else
      _ -> :no
    end
  end

  defp xadd?("XADD"), do: true
  defp xadd?(<<x, _, _, _>> = name) when x in [?x, ?X], do: Commands.upcase(name) == "XADD"
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
        with :ok <- create(key, s), do: push.(key)

      result ->
        result
    end
  end

  defp push_error(_key, :nomkstream), do: nil

  defp push_error(key, :no_create), do: no_create(key)
  defp push_error(key, reason), do: Errors.reply(reason, key)

  defp no_create(key),
    do:
      Encoder.error([
        "ERR no such stream '",
        key,
        "', and this server creates none (auto_create: false)"
      ])

  # A stream is bounded by bytes. Its capacity only backs that bound for
  # entries under 16 bytes: every XADD of field/value pairs stores at least 17.
  @max_capacity 0xFFFF_FFFF
  @min_entry_bytes 16

  @doc """
  The channel options of a stream created over RESP: the server's
  `auto_create` overflow, `:resp_stream_max_bytes` as `max_bytes`, and a
  capacity of `max_bytes / 16` (at most 2^32 - 1, the binary protocol's
  largest), so that the byte bound is the one an XADD meets first.
  """
  @spec stream_options(Ringbus.Server.Config.t()) :: Ringbus.Channel.options() | false
  def stream_options(%{auto_create: false}), do: false

  def stream_options(%{auto_create: opts, resp_stream_max_bytes: max_bytes}) do
    capacity = max_bytes |> div(@min_entry_bytes) |> max(1) |> min(@max_capacity)
    Keyword.merge(opts, capacity: capacity, max_bytes: max_bytes)
  end

  @doc false
  # Creates a stream with `stream_options/1`; one that exists already is fine.
  def create(key, s) do
    case stream_options(s.config) do
      false ->
        {:error, :no_create}

      opts ->
        case Ringbus.create(key, opts) do
          :ok -> :ok
          {:error, :exists} -> :ok
          {:error, reason} -> {:error, reason}
        end
    end
  end

  @doc "XADD: the form with `*` runs batched (see `batchable/3`); here, the rest."
  def xadd(args, s) do
    with {:ok, add} <- parse_xadd(args) do
      payload = Entry.encode(add.pairs)

      case add.id do
        :auto -> {hd(store({{add.key, add.nomkstream, add.trim}, [payload], 1}, s)), s}
        id -> {explicit(add, id, payload, s), s}
      end
    else
      {:error, reply} -> {reply, s}
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

  @doc false
  # XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] *|id field value ...
  def parse_xadd([]), do: {:error, Commands.wrong_arity("xadd")}

  def parse_xadd([key | rest]) do
    with :ok <- key_ok(key),
         {:ok, opts, [id | pairs]} <-
           options(rest, %{nomkstream: false, trim: nil, approx: false, limit: nil}, true),
         :ok <- trim_compatible(opts),
         {:ok, id} <- add_id(id),
         :ok <- pairs_ok(pairs) do
      {:ok, %{key: key, nomkstream: opts.nomkstream, trim: trim_of(opts), id: id, pairs: pairs}}
    else
      {:ok, _opts, []} -> {:error, Commands.wrong_arity("xadd")}
      error -> error
    end
  end

  defp pairs_ok(pairs) do
    if pairs != [] and rem(length(pairs), 2) == 0,
      do: :ok,
      else: {:error, Commands.wrong_arity("xadd")}
  end

  @doc false
  def key_ok(key), do: if(Commands.name?(key), do: :ok, else: {:error, Commands.bad_name()})

  # Redis's streamParseAddOrTrimArgsOrReply: options until one is not an option.
  defp options([opt | rest] = args, acc, xadd?) do
    case {Commands.upcase(opt), rest} do
      {"*", _} when xadd? ->
        {:ok, acc, args}

      {"MAXLEN", [_ | _]} ->
        {approx, rest} = approx(rest)

        case rest do
          [n | rest] ->
            case integer(n) do
              {:ok, n} when n >= 0 ->
                options(
                  rest,
                  %{acc | trim: merge_trim(acc.trim, {:maxlen, n}), approx: approx},
                  xadd?
                )

              {:ok, _} ->
                {:error, Encoder.error("ERR The MAXLEN argument must be >= 0.")}

              :error ->
                {:error, Commands.not_integer()}
            end

          [] ->
            {:error, Commands.syntax_error()}
        end

      {"MINID", [_ | _]} ->
        {approx, rest} = approx(rest)

        case rest do
          [id | rest] ->
            case Entry.parse(id) do
              {:ok, id} ->
                options(
                  rest,
                  %{acc | trim: merge_trim(acc.trim, {:minid, id}), approx: approx},
                  xadd?
                )

              :error ->
                {:error, invalid_id()}
            end

          [] ->
            {:error, Commands.syntax_error()}
        end

      {"LIMIT", [n | rest]} ->
        case integer(n) do
          {:ok, n} when n >= 0 -> options(rest, %{acc | limit: n}, xadd?)
          {:ok, _} -> {:error, Encoder.error("ERR The LIMIT argument must be >= 0.")}
          :error -> {:error, Commands.not_integer()}
        end

      {"NOMKSTREAM", _} when xadd? ->
        options(rest, %{acc | nomkstream: true}, xadd?)

      _ when xadd? ->
        {:ok, acc, args}

      _ ->
        {:error, Commands.syntax_error()}
    end
  end

  defp options([], acc, _xadd?), do: {:ok, acc, []}

  defp approx(["~" | rest]), do: {true, rest}
  defp approx(["=" | rest]), do: {false, rest}
  defp approx(rest), do: {false, rest}

  defp merge_trim({:maxlen, _}, {:minid, _}), do: :both
  defp merge_trim({:minid, _}, {:maxlen, _}), do: :both
  defp merge_trim(:both, _), do: :both
  defp merge_trim(_, trim), do: trim

  defp trim_compatible(%{trim: :both}),
    do:
      {:error,
       Encoder.error(
         "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
       )}

  defp trim_compatible(%{limit: limit, trim: nil}) when limit != nil,
    do:
      {:error,
       Encoder.error(
         "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
       )}

  defp trim_compatible(%{limit: limit, approx: false}) when limit != nil,
    do:
      {:error,
       Encoder.error("ERR syntax error, LIMIT cannot be used without the special ~ option")}

  defp trim_compatible(_opts), do: :ok

  defp trim_of(%{trim: nil}), do: nil
  defp trim_of(opts), do: %{strategy: opts.trim, approx: opts.approx, limit: opts.limit}

  defp add_id("*"), do: {:ok, :auto}

  defp add_id(text) do
    case :binary.split(text, "-") do
      [ms, "*"] ->
        case Entry.parse(ms) do
          {:ok, {ms, 0}} -> {:ok, {:ms, ms}}
          _ -> {:error, invalid_id()}
        end

      _ ->
        case Entry.parse(text) do
          {:ok, id} -> {:ok, id}
          :error -> {:error, invalid_id()}
        end
    end
  end

  @doc false
  def invalid_id, do: Encoder.error("ERR Invalid stream ID specified as stream command argument")

  @doc false
  def integer(text) do
    case Integer.parse(text) do
      {n, ""} when n >= -9_223_372_036_854_775_808 and n <= 9_223_372_036_854_775_807 -> {:ok, n}
      _ -> :error
    end
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
    case options(rest, %{nomkstream: false, trim: nil, approx: false, limit: nil}, false) do
      {:ok, %{trim: nil}, _} ->
        {Commands.syntax_error(), s}

      {:ok, opts, []} ->
        case trim_compatible(opts) do
          :ok -> {trim(key, trim_of(opts)), s}
          {:error, reply} -> {reply, s}
        end

      {:error, reply} ->
        {reply, s}
    end
  end

  ## XDEL

  def xdel([key | ids], s) do
    case parse_ids(ids, []) do
      {:ok, ids} ->
        case Errors.check!(Ringbus.info(key), key) do
          {:ok, info} -> {delete_oldest(key, ids, info), s}
          {:error, :no_channel} -> {0, s}
        end

      :error ->
        {invalid_id(), s}
    end
  end

  defp parse_ids([], acc), do: {:ok, acc}

  defp parse_ids([text | rest], acc) do
    case Entry.parse(text) do
      {:ok, id} -> parse_ids(rest, [id | acc])
      :error -> :error
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
    with {:ok, count} <- range_count(opts),
         {:ok, low} <- range_id(start, :start),
         {:ok, high} <- range_id(stop, :end) do
      read_range(key, Entry.seq_from(low), Entry.seq_through(high), count, direction)
    else
      {:error, reply} -> reply
    end
  end

  defp range_count([]), do: {:ok, @all}

  defp range_count([opt, n]) do
    if Commands.upcase(opt) == "COUNT" do
      case integer(n) do
        {:ok, n} -> {:ok, max(n, 0)}
        :error -> {:error, Commands.not_integer()}
      end
    else
      {:error, Commands.syntax_error()}
    end
  end

  defp range_count(_opts), do: {:error, Commands.syntax_error()}

  # Redis's streamParseIntervalIDOrReply, with its exclusive `(` form.
  defp range_id("-", _side), do: {:ok, {0, 0}}
  defp range_id("+", _side), do: {:ok, Entry.max_id()}
  defp range_id("(" <> text, side), do: exclusive(Entry.parse(text, missing(side)), side)

  defp range_id(text, side) do
    case Entry.parse(text, missing(side)) do
      {:ok, id} -> {:ok, id}
      :error -> {:error, invalid_id()}
    end
  end

  defp missing(:start), do: 0
  defp missing(:end), do: Entry.max_u64()

  defp exclusive({:ok, id}, :start) do
    if id == Entry.max_id(),
      do: {:error, Encoder.error("ERR invalid start ID for the interval")},
      else: {:ok, incr(id)}
  end

  defp exclusive({:ok, id}, :end) do
    if id == {0, 0},
      do: {:error, Encoder.error("ERR invalid end ID for the interval")},
      else: {:ok, decr(id)}
  end

  defp exclusive(:error, _side), do: {:error, invalid_id()}

  defp incr({ms, n}), do: if(n == Entry.max_u64(), do: {ms + 1, 0}, else: {ms, n + 1})
  defp decr({ms, 0}), do: {ms - 1, Entry.max_u64()}
  defp decr({ms, n}), do: {ms, n - 1}

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

  defp read(key, from, max) do
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
           read_options(args, %{count: 0, block: nil, group: nil, noack: false}, "xread"),
         :ok <- streams_allowed(opts.streams, "XREAD", s) do
      starts = Enum.map(opts.streams, fn {key, id} -> {key, read_start(key, id)} end)

      case Enum.find(starts, &match?({_, :error}, &1)) do
        nil -> xread_now(starts, opts, s)
        {_, :error} -> {invalid_id(), s}
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
    block = %{module: __MODULE__, timeout: timeout(opts.block)}
    block(for({key, {:ok, from}} <- starts, do: {key, from}), opts.count, block, s)
  end

  @doc false
  # Waits for the next entry of any stream: a subscription to each, from
  # the seq given. A missing stream is made (as XADD would make it), so that
  # an XADD that comes later finds the reader waiting. `block` is the wait's
  # state, to which the subscriptions are added.
  def block(starts, count, block, s) do
    batch = if count > 0, do: min(count, @block_batch), else: @block_batch

    result =
      Enum.reduce_while(starts, {:ok, %{}}, fn {key, from}, {:ok, subs} ->
        case subscribe(key, from, batch, s) do
          {:ok, sub} -> {:cont, {:ok, Map.put(subs, sub, key)}}
          {:error, reply} -> {:halt, {:error, reply, subs}}
        end
      end)

    case result do
      {:ok, subs} ->
        {:block, Map.put(block, :subs, subs), s}

      {:error, reply, subs} ->
        Enum.each(Map.keys(subs), &Ringbus.unsubscribe/1)
        {reply, s}
    end
  end

  defp subscribe(key, from, batch, s) do
    opts = [from: from, max_credit: batch, max_batch: batch, via: :resp]

    case Ringbus.subscribe(key, opts) do
      {:ok, sub} ->
        {:ok, sub}

      {:error, :no_channel} ->
        if Commands.allowed?(s, :write, key) do
          case create(key, s) do
            :ok -> subscribe(key, from, batch, s)
            {:error, reason} -> {:error, push_error(key, reason)}
          end
        else
          {:error, Commands.no_permission()}
        end

      {:error, reason} ->
        {:error, Errors.reply(reason, key)}
    end
  end

  @doc false
  def timeout(0), do: :infinity
  def timeout(ms), do: ms

  @doc false
  # The waiting XREAD got entries: its reply.
  def woken(block, sub, messages, _lost, s) do
    case messages do
      [] -> {:wait, block}
      _ -> {:reply, streams_reply([{Map.fetch!(block.subs, sub), entries(messages)}]), s}
    end
  end

  @doc false
  # XREAD and XREADGROUP options: [COUNT n] [BLOCK ms] [GROUP g c] [NOACK] STREAMS keys... ids...
  def read_options([opt | rest], acc, command) do
    case {Commands.upcase(opt), rest} do
      {"COUNT", [n | rest]} ->
        case integer(n) do
          {:ok, n} -> read_options(rest, %{acc | count: max(n, 0)}, command)
          :error -> {:error, Commands.not_integer()}
        end

      {"BLOCK", [ms | rest]} ->
        case integer(ms) do
          {:ok, ms} when ms >= 0 -> read_options(rest, %{acc | block: ms}, command)
          {:ok, _} -> {:error, Encoder.error("ERR timeout is negative")}
          :error -> {:error, Encoder.error("ERR timeout is not an integer or out of range")}
        end

      {"GROUP", [group, consumer | rest]} when command == "xreadgroup" ->
        read_options(rest, %{acc | group: {group, consumer}}, command)

      {"NOACK", _} when command == "xreadgroup" ->
        read_options(rest, %{acc | noack: true}, command)

      {"STREAMS", rest} ->
        streams(rest, acc, command)

      _ ->
        {:error, Commands.syntax_error()}
    end
  end

  def read_options([], _acc, _command), do: {:error, Commands.syntax_error()}

  defp streams(args, acc, command) do
    count = Enum.count(args)

    if count == 0 or rem(count, 2) == 1 do
      {:error,
       Encoder.error([
         "ERR Unbalanced '",
         command,
         "' list of streams: for each stream key an ID or '$' must be specified."
       ])}
    else
      {keys, ids} = Enum.split(args, div(count, 2))
      {:ok, Map.put(acc, :streams, Enum.zip(keys, ids))}
    end
  end

  @doc false
  def streams_allowed(streams, command, s) do
    access = Commands.access(command)

    Enum.reduce_while(streams, :ok, fn {key, _id}, :ok ->
      cond do
        key_ok(key) != :ok -> {:halt, key_ok(key)}
        not Commands.allowed?(s, access, key) -> {:halt, {:error, Commands.no_permission()}}
        true -> {:cont, :ok}
      end
    end)
  end

  ## XINFO

  def xinfo([sub | args], s) do
    case {Commands.upcase(sub), args} do
      {"STREAM", [key]} ->
        guarded(s, key, fn -> stream_info(key, s) end)

      {"STREAM", [key, full | opts]} ->
        guarded(s, key, fn -> stream_full(key, [full | opts], sub, s) end)

      {"GROUPS", [key]} ->
        guarded(s, key, fn -> groups_info(key, s) end)

      {"CONSUMERS", [key, group]} ->
        guarded(s, key, fn -> consumers_info(key, group, s) end)

      {"HELP", []} ->
        {xinfo_help(), s}

      {upper, _} when upper in ["STREAM", "GROUPS", "CONSUMERS", "HELP"] ->
        {Commands.wrong_arity("xinfo|" <> String.downcase(upper)), s}

      _ ->
        {Commands.unknown_subcommand(sub, "XINFO"), s}
    end
  end

  defp guarded(s, key, fun), do: Commands.keyed(s, :read, key, fun)

  defp stream_full(key, opts, sub, s), do: Ringbus.Resp.StreamAdmin.full(key, opts, sub, s)

  defp stream_info(key, s) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        first_seq = Map.fetch!(info, :first_seq)
        next_seq = Map.fetch!(info, :next_seq)
        len = Map.fetch!(info, :len)
        last = if next_seq > 0, do: Entry.id(next_seq - 1), else: "0-0"
        deleted = if first_seq > 0, do: Entry.id(first_seq - 1), else: "0-0"

        edge = fn seq ->
          case read(key, seq, 1) do
            [message] -> hd(entries([message]))
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
           {"recorded-first-entry-id", if(len > 0, do: Entry.id(first_seq), else: "0-0")},
           {"groups", Groups.group_count(s.context.groups, key)},
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

  defp groups_info(key, s) do
    case Errors.check!(Ringbus.info(key), key) do
      {:ok, info} ->
        for {name, g} <- Groups.groups(s.context.groups, key) do
          {:map,
           [
             {"name", name},
             {"consumers", Enum.count(Groups.consumers(s.context.groups, key, name))},
             {"pending", g.pending},
             {"last-delivered-id", if(g.last >= 0, do: Entry.id(g.last), else: "0-0")},
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

  defp consumers_info(key, group, s) do
    with {:ok, _info} <- Errors.check!(Ringbus.info(key), key),
         {:ok, _group} <- Groups.fetch(s.context.groups, key, group) do
      now = System.system_time(:millisecond)

      for {name, seen, pending} <- Groups.consumers(s.context.groups, key, group),
          do: {:map, [{"name", name}, {"pending", pending}, {"idle", max(now - seen, 0)}]}
    else
      {:error, :no_channel} ->
        Encoder.error("ERR no such key")

      :error ->
        Encoder.error(["NOGROUP No such consumer group '", group, "' for key name '", key, "'"])
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
end
