defmodule Ringbus.Resp.KeyCommands do
  @moduledoc false
  # The keyspace commands of `Ringbus.Resp.Session`: DBSIZE, EXISTS, TYPE,
  # DEL (and UNLINK, which is DEL), KEYS, SCAN, FLUSHDB and FLUSHALL. Keys are the channels of this node with binary
  # names, every one a stream. KEYS and SCAN list only the channels the
  # token may read; FLUSHDB and FLUSHALL need `manage` on every channel.
  #
  # SCAN's cursor. Names are visited in the order of a 32-bit hash of each,
  # and the cursor is the hash to go on from, so it is an integer clients
  # keep as Redis's: a name held from the first call to the last is returned
  # at least once however many come and go meanwhile, as Redis promises. A
  # page ends on a whole hash, so names sharing one are never split.

  alias Ringbus.Resp.{Args, Encoder, Errors, Keys}

  @hash_range 0x1_0000_0000
  @default_count 10

  def dbsize([], s), do: {count_streams(), s}
  def exists(keys, s), do: {Enum.count(keys, &stream?/1), s}
  def type([key], s), do: {{:simple, if(stream?(key), do: "stream", else: "none")}, s}
  def del(keys, s), do: {Enum.count(keys, &delete/1), s}

  defp stream?(key),
    do: is_binary(key) and match?({:ok, _}, Errors.check!(Ringbus.info(key), key))

  # A stream's groups go with it, at its home (`Ringbus.Group.TableOwner`).
  defp delete(key) do
    case Ringbus.delete(key) do
      :ok ->
        true

      {:error, :no_channel} ->
        false

      {:error, reason} ->
        Errors.fail!(reason, key)
    end
  end

  @doc "How many streams there are: the channels with binary names."
  def count_streams, do: Enum.count(Ringbus.channels(), &is_binary/1)

  def keys([pattern], s) do
    {for(name <- readable(s), glob?(pattern, name), do: name) |> Enum.sort(), s}
  end

  def scan([cursor | opts], s) do
    with {:ok, cursor} <- cursor(cursor),
         {:ok, opts} <- scan_options(opts, %{match: nil, count: @default_count, type: nil}) do
      {next, names} = page(readable(s), cursor, opts.count)
      names = if opts.type in [nil, "stream"], do: names, else: []
      names = if opts.match, do: Enum.filter(names, &glob?(opts.match, &1)), else: names
      {[Integer.to_string(next), names], s}
    else
      {:error, reply} -> {reply, s}
    end
  end

  defp cursor(text) do
    case Integer.parse(text) do
      {n, ""} when n >= 0 and n < @hash_range -> {:ok, n}
      {n, ""} when n >= 0 -> {:ok, @hash_range}
      _ -> {:error, Encoder.error("ERR invalid cursor")}
    end
  end

  defp scan_options([], acc), do: {:ok, acc}

  defp scan_options([opt, value | rest], acc) do
    case Args.upcase(opt) do
      "MATCH" ->
        scan_options(rest, %{acc | match: value})

      "TYPE" ->
        scan_options(rest, %{acc | type: String.downcase(value)})

      "COUNT" ->
        case Integer.parse(value) do
          {n, ""} when n >= 1 -> scan_options(rest, %{acc | count: n})
          {_, ""} -> {:error, Errors.syntax_error()}
          _ -> {:error, Errors.not_integer()}
        end

      _ ->
        {:error, Errors.syntax_error()}
    end
  end

  defp scan_options(_opts, _acc), do: {:error, Errors.syntax_error()}

  @doc false
  # The names from hash `cursor` on: at least `count` of them (a whole hash
  # at the end), and the cursor after them, 0 at the end.
  def page(names, cursor, count) do
    hashed =
      names
      |> Enum.flat_map(fn name ->
        hash = :erlang.phash2(name, @hash_range)
        if hash >= cursor, do: [{hash, name}], else: []
      end)
      |> Enum.sort()

    {taken, rest} = Enum.split(hashed, count)

    case {taken, rest} do
      {_, []} ->
        {0, Enum.map(taken, &elem(&1, 1))}

      {_, _} ->
        {last, _} = List.last(taken)
        {same, rest} = Enum.split_while(rest, fn {hash, _} -> hash == last end)
        next = if rest == [], do: 0, else: last + 1
        {next, Enum.map(taken ++ same, &elem(&1, 1))}
    end
  end

  defp readable(s),
    do:
      for(
        name <- Ringbus.channels(),
        is_binary(name),
        Keys.allowed?(s, :read, name),
        do: name
      )

  ## FLUSHDB, FLUSHALL

  def flushdb(args, s), do: flush(args, s)
  def flushall(args, s), do: flush(args, s)

  defp flush(args, s) do
    names = for name <- Ringbus.channels(), is_binary(name), do: name

    cond do
      not Enum.all?(args, &(Args.upcase(&1) in ["ASYNC", "SYNC"])) or length(args) > 1 ->
        {Errors.syntax_error(), s}

      # All or nothing: a token that may not delete one channel deletes none.
      not Enum.all?(names, &Keys.allowed?(s, :manage, &1)) ->
        {Errors.no_permission(), s}

      true ->
        Enum.each(names, &Ringbus.delete/1)

        {{:simple, "OK"}, s}
    end
  end

  ## Glob patterns, as Redis's stringmatchlen

  @doc "Whether `name` matches the glob `pattern`: `*`, `?`, `[abc]`, `[^a-z]`, `\\\\x`."
  @spec glob?(binary(), binary()) :: boolean()
  def glob?(pattern, name), do: glob(pattern, name)

  defp glob(<<>>, name), do: name == <<>>

  defp glob(<<"*", rest::binary>>, name) do
    case rest do
      <<"*", _::binary>> -> glob(rest, name)
      <<>> -> true
      _ -> star(rest, name)
    end
  end

  defp glob(<<"?", rest::binary>>, <<_, name::binary>>), do: glob(rest, name)

  defp glob(<<"[", rest::binary>>, <<c, name::binary>>) do
    {negate, rest} =
      case rest do
        <<"^", rest::binary>> -> {true, rest}
        _ -> {false, rest}
      end

    {matched, rest} = class(rest, c, false)
    if matched != negate, do: glob(rest, name), else: false
  end

  defp glob(<<"\\", p, rest::binary>>, <<p, name::binary>>), do: glob(rest, name)
  defp glob(<<"\\", _p, _rest::binary>>, _name), do: false

  defp glob(<<p, rest::binary>>, <<p, name::binary>>) when p not in [?*, ??, ?[],
    do: glob(rest, name)

  defp glob(_pattern, _name), do: false

  defp star(pattern, <<>> = name), do: glob(pattern, name)

  defp star(pattern, <<_, rest::binary>> = name),
    do: glob(pattern, name) or star(pattern, rest)

  # A bracket class up to its `]` (or the pattern's end, as Redis): whether
  # `c` is in it, and the pattern after it.
  defp class(<<"]", rest::binary>>, _c, matched), do: {matched, rest}
  defp class(<<>>, _c, matched), do: {matched, <<>>}

  defp class(<<"\\", x, rest::binary>>, c, matched), do: class(rest, c, matched or x == c)

  defp class(<<a, "-", b, rest::binary>>, c, matched) when b != ?] do
    {low, high} = if a <= b, do: {a, b}, else: {b, a}
    class(rest, c, matched or (c >= low and c <= high))
  end

  defp class(<<x, rest::binary>>, c, matched), do: class(rest, c, matched or x == c)
end
