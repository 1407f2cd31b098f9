defmodule Ringbus.Resp.Args do
  @moduledoc false
  # The arguments of the stream commands, parsed as Redis 7.0 parses them:
  # integers, stream IDs and ranges, XADD's and XTRIM's options, and XREAD's
  # and XREADGROUP's. Pure: each returns `{:ok, ...}` or `{:error, reply}`,
  # the reply Redis gives for the same mistake.

  alias Ringbus.Resp.{Encoder, Entry, Errors, Keys}

  # A read with no COUNT: everything, as in Redis; the ring bounds it.
  @all 4_611_686_018_427_387_904
  @no_options %{nomkstream: false, trim: nil, approx: false, limit: nil}

  @doc "An ASCII name in upper case, as Redis matches command names."
  @spec upcase(binary()) :: binary()
  def upcase(name) do
    # Clients mostly send upper case already: then the name is its own answer.
    if lower?(name),
      do: for(<<c <- name>>, into: "", do: <<if(c in ?a..?z, do: c - 32, else: c)>>),
      else: name
  end

  defp lower?(<<c, _::binary>>) when c in ?a..?z, do: true
  defp lower?(<<_, rest::binary>>), do: lower?(rest)
  defp lower?(<<>>), do: false

  @doc false
  # XADD key [NOMKSTREAM] [PRODUCER id n] [MAXLEN|MINID [=|~] threshold [LIMIT n]]
  #   *|id field value ...
  def parse_xadd([]), do: {:error, Errors.wrong_arity("xadd")}

  def parse_xadd([key | rest]) do
    with :ok <- key_ok(key),
         {:ok, opts, [id | pairs]} <-
           options(rest, Map.put(@no_options, :producer, nil), true),
         :ok <- trim_compatible(opts),
         {:ok, id} <- add_id(id),
         :ok <- producer_id(opts.producer, id),
         :ok <- pairs_ok(pairs) do
      {:ok,
       %{
         key: key,
         nomkstream: opts.nomkstream,
         producer: opts.producer,
         trim: trim_of(opts),
         id: id,
         pairs: pairs
       }}
    else
      {:ok, _opts, []} -> {:error, Errors.wrong_arity("xadd")}
      error -> error
    end
  end

  # A resend of a tagged XADD must find the tag whatever the stream's next ID is by then.
  defp producer_id(nil, _id), do: :ok
  defp producer_id(_tag, :auto), do: :ok

  defp producer_id(_tag, _id),
    do: {:error, Encoder.error("ERR XADD with PRODUCER takes the ID *")}

  defp pairs_ok(pairs) do
    if pairs != [] and rem(length(pairs), 2) == 0,
      do: :ok,
      else: {:error, Errors.wrong_arity("xadd")}
  end

  @doc "XTRIM's options: `{:ok, trim}` (see `Ringbus.Resp.Trim`) or `{:error, reply}`."
  def parse_xtrim(rest) do
    case options(rest, @no_options, false) do
      {:ok, %{trim: nil}, _} ->
        {:error, Errors.syntax_error()}

      {:ok, opts, []} ->
        case trim_compatible(opts) do
          :ok -> {:ok, trim_of(opts)}
          {:error, reply} -> {:error, reply}
        end

      {:error, reply} ->
        {:error, reply}
    end
  end

  @doc false
  def key_ok(key), do: if(Keys.name?(key), do: :ok, else: {:error, Errors.bad_name()})

  # Redis's streamParseAddOrTrimArgsOrReply: options until one is not an option.
  defp options(["*" | _] = args, acc, true), do: {:ok, acc, args}

  defp options([opt | rest] = args, acc, xadd?) do
    case {upcase(opt), rest} do
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
                {:error, Errors.not_integer()}
            end

          [] ->
            {:error, Errors.syntax_error()}
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
            {:error, Errors.syntax_error()}
        end

      {"LIMIT", [n | rest]} ->
        case integer(n) do
          {:ok, n} when n >= 0 -> options(rest, %{acc | limit: n}, xadd?)
          {:ok, _} -> {:error, Encoder.error("ERR The LIMIT argument must be >= 0.")}
          :error -> {:error, Errors.not_integer()}
        end

      {"NOMKSTREAM", _} when xadd? ->
        options(rest, %{acc | nomkstream: true}, xadd?)

      # Ringbus's own: a producer id and its counter, as `Ringbus.push/3`'s `:producer`.
      {"PRODUCER", [id, n | rest]} when xadd? ->
        case integer(n) do
          {:ok, n} -> options(rest, %{acc | producer: {id, n}}, xadd?)
          :error -> {:error, Encoder.error("ERR the PRODUCER counter must be an integer")}
        end

      _ when xadd? ->
        {:ok, acc, args}

      _ ->
        {:error, Errors.syntax_error()}
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
          {:ok, {ms, 0}} -> {:ok, {ms, :auto}}
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
    # What Integer.parse/1 takes whole (a sign, then digits), without its walk.
    case :erlang.binary_to_integer(text) do
      n when n >= -9_223_372_036_854_775_808 and n <= 9_223_372_036_854_775_807 -> {:ok, n}
      _ -> :error
    end
  rescue
    ArgumentError -> :error
  end

  @doc "Stream IDs, all valid, or `:error`."
  def parse_ids([], acc), do: {:ok, acc}

  def parse_ids([text | rest], acc) do
    case Entry.parse(text) do
      {:ok, id} -> parse_ids(rest, [id | acc])
      :error -> :error
    end
  end

  @doc "XRANGE's optional `COUNT n`."
  def range_count([]), do: {:ok, @all}

  def range_count([opt, n]) do
    if upcase(opt) == "COUNT" do
      case integer(n) do
        {:ok, n} -> {:ok, max(n, 0)}
        :error -> {:error, Errors.not_integer()}
      end
    else
      {:error, Errors.syntax_error()}
    end
  end

  def range_count(_opts), do: {:error, Errors.syntax_error()}

  @doc """
  Redis's streamParseIntervalIDOrReply, with its exclusive `(` form: the
  bound an ID gives a range (`Ringbus.Resp.StreamIds.bounds/2`), `{:from |
  :after, id}` at its start, `{:through | :before, id}` at its end.
  """
  def range_id("-", :start), do: {:ok, {:from, {0, 0}}}
  def range_id("-", :end), do: {:ok, {:through, {0, 0}}}
  def range_id("+", :start), do: {:ok, {:from, Entry.max_id()}}
  def range_id("+", :end), do: {:ok, {:through, Entry.max_id()}}

  def range_id("(" <> text, side) do
    case {Entry.parse(text, missing(side)), side} do
      {{:ok, id}, :start} when id == {0xFFFF_FFFF_FFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF} ->
        {:error, Encoder.error("ERR invalid start ID for the interval")}

      {{:ok, {0, 0}}, :end} ->
        {:error, Encoder.error("ERR invalid end ID for the interval")}

      {{:ok, id}, :start} ->
        {:ok, {:after, id}}

      {{:ok, id}, :end} ->
        {:ok, {:before, id}}

      {:error, _side} ->
        {:error, invalid_id()}
    end
  end

  def range_id(text, side) do
    case Entry.parse(text, missing(side)) do
      {:ok, id} when side == :start -> {:ok, {:from, id}}
      {:ok, id} -> {:ok, {:through, id}}
      :error -> {:error, invalid_id()}
    end
  end

  defp missing(:start), do: 0
  defp missing(:end), do: Entry.max_u64()

  @doc false
  # XREAD and XREADGROUP options: [COUNT n] [BLOCK ms] [GROUP g c] [NOACK] STREAMS keys... ids...
  def read_options([opt | rest], acc, command) do
    case {upcase(opt), rest} do
      {"COUNT", [n | rest]} ->
        case integer(n) do
          {:ok, n} -> read_options(rest, %{acc | count: max(n, 0)}, command)
          :error -> {:error, Errors.not_integer()}
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
        {:error, Errors.syntax_error()}
    end
  end

  def read_options([], _acc, _command), do: {:error, Errors.syntax_error()}

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
  # `access`: the table's for the command (`Ringbus.Resp.Commands`), which
  # leaves the keys of XREAD and XREADGROUP to their handlers.
  def streams_allowed(streams, access, s) do
    Enum.reduce_while(streams, :ok, fn {key, _id}, :ok ->
      cond do
        key_ok(key) != :ok -> {:halt, key_ok(key)}
        not Keys.allowed?(s, access, key) -> {:halt, {:error, Errors.no_permission()}}
        true -> {:cont, :ok}
      end
    end)
  end
end
