defmodule Ringbus.Resp.Parser do
  @moduledoc false
  # Cuts a byte stream into Redis commands, one socket read at a time. Pure:
  # bytes and state in, commands and state out.
  #
  #   feed(parser, bytes) -> {:ok, commands, parser} | {:error, message, commands}
  #
  # A command is the list of its arguments, binaries, name first. Requests
  # come as RESP arrays of bulk strings (`*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n`)
  # or as inline lines (`PING\r\n`), split on blanks with Redis's quoting
  # rules. After an error, the commands before it are good; the stream
  # cannot be resynchronised and the connection answers `-ERR Protocol
  # error: ...` and closes, as Redis does.
  #
  # Memory. Every declared length is checked before a byte it announces is
  # kept: an array count against `max_args`, a bulk length against
  # `max_bulk` and against what is left of `max_command` (the bytes of one
  # command's arguments, each counted with 32 more for what holding
  # it costs, so that a million empty arguments count too), a line (inline command or length header) against
  # 64 KiB, Redis's inline limit. Arguments wholly inside one read are
  # sub-binaries of it. A bulk that a read leaves incomplete is held as a
  # list of reads with a running size and joined once, when its last byte
  # arrives: reads are never appended to a growing binary.

  @max_line 64 * 1024
  @arg_cost 32

  @enforce_keys [:max_args, :max_bulk, :max_command]
  defstruct max_args: nil, max_bulk: nil, max_command: nil, stage: :idle, command: nil

  # stage:   :idle                        nothing held
  #          {:line, pieces, size}        a line without its "\n" yet
  #          {:bulk, length, pieces, size} a bulk of `length` bytes, then CRLF
  # command: nil between commands, or {left, args (reversed), bytes} inside an array
  @type t :: %__MODULE__{}
  @type command :: [binary()]

  @doc "A parser with these limits: arguments per command, bytes per argument and per command."
  @spec new(pos_integer(), pos_integer(), pos_integer()) :: t()
  def new(max_args, max_bulk, max_command),
    do: %__MODULE__{max_args: max_args, max_bulk: max_bulk, max_command: max_command}

  @doc "Changes the limits for the bytes to come (say, once a client has authenticated)."
  @spec limit(t(), pos_integer(), pos_integer()) :: t()
  def limit(%__MODULE__{} = parser, max_args, max_bulk),
    do: %__MODULE__{parser | max_args: max_args, max_bulk: max_bulk}

  @doc "The bytes held for a command not yet complete, its finished arguments aside."
  @spec buffered(t()) :: non_neg_integer()
  def buffered(%__MODULE__{stage: :idle}), do: 0
  def buffered(%__MODULE__{stage: {:line, _pieces, size}}), do: size
  def buffered(%__MODULE__{stage: {:bulk, _length, _pieces, size}}), do: size

  @doc "Feeds the bytes of one read; returns every command they complete, in order."
  @spec feed(t(), binary()) :: {:ok, [command()], t()} | {:error, String.t(), [command()]}
  def feed(%__MODULE__{stage: :idle} = p, bytes) when is_binary(bytes), do: parse(bytes, p, [])

  def feed(%__MODULE__{stage: {:line, pieces, size}} = p, bytes) when is_binary(bytes) do
    case :binary.match(bytes, "\n") do
      {at, 1} ->
        <<last::binary-size(at), "\n", rest::binary>> = bytes
        line = IO.iodata_to_binary(:lists.reverse(pieces, [last]))
        header(chomp(line), rest, %__MODULE__{p | stage: :idle}, [])

      :nomatch ->
        size = size + byte_size(bytes)
        p = %__MODULE__{p | stage: {:line, [bytes | pieces], size}}
        if size > @max_line, do: {:error, too_big(p), []}, else: {:ok, [], p}
    end
  end

  def feed(%__MODULE__{stage: {:bulk, length, pieces, size}} = p, bytes) when is_binary(bytes) do
    missing = length + 2 - size

    case bytes do
      <<last::binary-size(missing), rest::binary>> ->
        case IO.iodata_to_binary(:lists.reverse(pieces, [last])) do
          <<arg::binary-size(length), "\r\n">> -> argument(arg, rest, %{p | stage: :idle}, [])
          _ -> {:error, "Protocol error: expected '\\r\\n' after a bulk string", []}
        end

      _ ->
        stage = {:bulk, length, [bytes | pieces], size + byte_size(bytes)}
        {:ok, [], %__MODULE__{p | stage: stage}}
    end
  end

  ## Lines

  defp parse(<<>>, p, acc), do: {:ok, :lists.reverse(acc), p}

  # The common case, matched without looking for the line's end first: a
  # length header whose digits and CRLF are all in this read.
  defp parse(<<"$", c, rest::binary>> = bytes, %{command: {_, _, used}} = p, acc)
       when c in ?1..?9 do
    case digits(rest, c - ?0, 1) do
      {n, rest} when n <= p.max_bulk and n + @arg_cost <= p.max_command - used ->
        bulk(n, rest, p, acc)

      _ ->
        line(bytes, p, acc)
    end
  end

  defp parse(<<"*", c, rest::binary>> = bytes, %{command: nil} = p, acc) when c in ?1..?9 do
    case digits(rest, c - ?0, 1) do
      {n, rest} when n <= p.max_args ->
        case whole(rest, n, p.max_bulk, p.max_command, []) do
          {args, rest} -> parse(rest, p, [args | acc])
          :no -> parse(rest, %{p | command: {n, [], 0}}, acc)
        end

      _ ->
        line(bytes, p, acc)
    end
  end

  defp parse(bytes, p, acc), do: line(bytes, p, acc)

  # The commonest command: an array whose bulks are all in this read, with
  # lengths the fast path above takes, cut out in one loop. Anything else
  # (`:no`) goes through the general path from the array's first bulk.
  defp whole(rest, 0, _max_bulk, _left, args), do: {:lists.reverse(args), rest}

  defp whole(<<"$", c, rest::binary>>, n, max_bulk, left, args) when c in ?1..?9 do
    case digits(rest, c - ?0, 1) do
      {size, rest} when size <= max_bulk and size + @arg_cost <= left ->
        case rest do
          <<arg::binary-size(size), "\r\n", rest::binary>> ->
            whole(rest, n - 1, max_bulk, left - size - @arg_cost, [arg | args])

          _ ->
            :no
        end

      _ ->
        :no
    end
  end

  defp whole(_bytes, _n, _max_bulk, _left, _args), do: :no

  # Decimal digits up to CRLF, at most 18 of them; anything else is left to
  # the general path, which knows every error.
  defp digits(<<c, rest::binary>>, n, count) when c in ?0..?9 and count < 18,
    do: digits(rest, n * 10 + c - ?0, count + 1)

  defp digits(<<"\r\n", rest::binary>>, n, _count), do: {n, rest}
  defp digits(_bytes, _n, _count), do: :more

  defp line(bytes, p, acc) do
    case :binary.match(bytes, "\n") do
      {at, 1} ->
        <<line::binary-size(at), "\n", rest::binary>> = bytes
        header(chomp(line), rest, p, acc)

      :nomatch ->
        p = %__MODULE__{p | stage: {:line, [bytes], byte_size(bytes)}}

        if byte_size(bytes) > @max_line,
          do: {:error, too_big(p), :lists.reverse(acc)},
          else: {:ok, :lists.reverse(acc), p}
    end
  end

  defp chomp(line) do
    case byte_size(line) - 1 do
      last when last >= 0 and binary_part(line, last, 1) == "\r" -> binary_part(line, 0, last)
      _ -> line
    end
  end

  # The line that starts an array, a bulk inside one, or an inline command.
  defp header(line, _rest, p, acc) when byte_size(line) > @max_line,
    do: {:error, too_big(%{p | stage: {:line, [line], 0}}), :lists.reverse(acc)}

  defp header(<<"*", count::binary>>, rest, %{command: nil} = p, acc) do
    case integer(count) do
      {:ok, n} when n <= 0 -> parse(rest, p, acc)
      {:ok, n} when n <= p.max_args -> parse(rest, %{p | command: {n, [], 0}}, acc)
      _ -> {:error, "Protocol error: invalid multibulk length", :lists.reverse(acc)}
    end
  end

  defp header(line, rest, %{command: nil} = p, acc) do
    case split_inline(line) do
      {:ok, []} -> parse(rest, p, acc)
      {:ok, args} -> parse(rest, p, [args | acc])
      :error -> {:error, "Protocol error: unbalanced quotes in request", :lists.reverse(acc)}
    end
  end

  defp header(<<"$", length::binary>>, rest, %{command: {_, _, bytes}} = p, acc) do
    case integer(length) do
      {:ok, n} when n >= 0 and n <= p.max_bulk and n + @arg_cost <= p.max_command - bytes ->
        bulk(n, rest, p, acc)

      _ ->
        {:error, "Protocol error: invalid bulk length", :lists.reverse(acc)}
    end
  end

  defp header(line, _rest, _p, acc) do
    got = if line == "", do: "\\n", else: binary_part(line, 0, 1)
    {:error, "Protocol error: expected '$', got '#{printable(got)}'", :lists.reverse(acc)}
  end

  defp too_big(%{command: nil, stage: {:line, pieces, _}}) do
    if first_byte(pieces) == "*",
      do: "Protocol error: too big mbulk count string",
      else: "Protocol error: too big inline request"
  end

  defp too_big(_p), do: "Protocol error: too big bulk count string"

  defp first_byte(pieces) do
    case :lists.last(pieces) do
      <<byte::binary-size(1), _::binary>> -> byte
      _ -> ""
    end
  end

  defp printable(<<c>>) when c in 32..126, do: <<c>>
  defp printable(<<c>>), do: "\\x" <> Base.encode16(<<c>>, case: :lower)
  defp printable(other), do: other

  ## Bulk strings

  defp bulk(n, rest, p, acc) do
    case rest do
      <<arg::binary-size(n), "\r\n", rest::binary>> ->
        argument(arg, rest, p, acc)

      _ when byte_size(rest) >= n + 2 ->
        {:error, "Protocol error: expected '\\r\\n' after a bulk string", :lists.reverse(acc)}

      _ ->
        {:ok, :lists.reverse(acc), %{p | stage: {:bulk, n, [rest], byte_size(rest)}}}
    end
  end

  defp argument(arg, rest, %{command: {1, args, _}} = p, acc),
    do: parse(rest, %{p | command: nil}, [:lists.reverse(args, [arg]) | acc])

  defp argument(arg, rest, %{command: {left, args, bytes}} = p, acc),
    do:
      parse(
        rest,
        %{p | command: {left - 1, [arg | args], bytes + byte_size(arg) + @arg_cost}},
        acc
      )

  # Redis's string2ll: an optional minus, then digits without leading zeros.
  defp integer(<<"-", digits::binary>>) do
    with {:ok, n} <- integer(digits), do: {:ok, -n}
  end

  defp integer("0"), do: {:ok, 0}

  defp integer(<<first, _::binary>> = digits) when first in ?1..?9 and byte_size(digits) <= 19 do
    if digits?(digits), do: {:ok, String.to_integer(digits)}, else: :error
  end

  defp integer(_), do: :error

  defp digits?(<<c, rest::binary>>) when c in ?0..?9, do: digits?(rest)
  defp digits?(<<>>), do: true
  defp digits?(_), do: false

  ## Inline commands

  @blanks [?\s, ?\t, ?\n, ?\r, ?\v, ?\f, 0]

  @doc """
  Splits an inline command line into arguments as Redis's `sdssplitargs`
  does: blanks separate them, `"..."` may hold `\\n`, `\\r`, `\\t`, `\\b`,
  `\\a`, `\\\\`, `\\"` and `\\xHH` escapes, `'...'` only `\\'`. A closing
  quote must be followed by a blank or the end.
  """
  @spec split_inline(binary()) :: {:ok, [binary()]} | :error
  def split_inline(line), do: blanks(line, [])

  defp blanks(<<c, rest::binary>>, args) when c in @blanks, do: blanks(rest, args)
  defp blanks(<<>>, args), do: {:ok, :lists.reverse(args)}
  defp blanks(line, args), do: word(line, [], args)

  defp word(<<c, _::binary>> = rest, acc, args) when c in @blanks,
    do: blanks(rest, [arg(acc) | args])

  defp word(<<>>, acc, args), do: {:ok, :lists.reverse([arg(acc) | args])}
  defp word(<<?", rest::binary>>, acc, args), do: quoted(rest, acc, args)
  defp word(<<?', rest::binary>>, acc, args), do: single(rest, acc, args)
  defp word(<<c, rest::binary>>, acc, args), do: word(rest, [c | acc], args)

  defp quoted(<<?\\, ?x, h, l, rest::binary>>, acc, args)
       when h in ~c"0123456789abcdefABCDEF" and l in ~c"0123456789abcdefABCDEF",
       do: quoted(rest, [String.to_integer(<<h, l>>, 16) | acc], args)

  defp quoted(<<?\\, c, rest::binary>>, acc, args), do: quoted(rest, [unescape(c) | acc], args)
  defp quoted(<<?", rest::binary>>, acc, args), do: closed(rest, acc, args)
  defp quoted(<<>>, _acc, _args), do: :error
  defp quoted(<<c, rest::binary>>, acc, args), do: quoted(rest, [c | acc], args)

  defp single(<<?\\, ?', rest::binary>>, acc, args), do: single(rest, [?' | acc], args)
  defp single(<<?', rest::binary>>, acc, args), do: closed(rest, acc, args)
  defp single(<<>>, _acc, _args), do: :error
  defp single(<<c, rest::binary>>, acc, args), do: single(rest, [c | acc], args)

  defp closed(<<>>, acc, args), do: {:ok, :lists.reverse([arg(acc) | args])}

  defp closed(<<c, rest::binary>>, acc, args) when c in @blanks,
    do: blanks(rest, [arg(acc) | args])

  defp closed(_rest, _acc, _args), do: :error

  defp unescape(?n), do: ?\n
  defp unescape(?r), do: ?\r
  defp unescape(?t), do: ?\t
  defp unescape(?b), do: ?\b
  defp unescape(?a), do: 7
  defp unescape(c), do: c

  defp arg(acc), do: acc |> :lists.reverse() |> :erlang.list_to_binary()
end
