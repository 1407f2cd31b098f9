defmodule Ringbus.Bench.Latency.Replies do
  @moduledoc """
  Counts the whole replies at the head of what the latency generator read
  from a connection, by binary matching: RESP replies (`XADD`'s bulk string
  `$N\\r\\n<id>\\r\\n`, `PING`'s `+PONG\\r\\n`, errors `-...\\r\\n`) and the
  entries of binary `PUSH_ACKS` frames (docs/PROTOCOL.md). Only the count
  matters: a connection's replies come in the order of its requests, so
  the k-th reply answers its k-th request.

      iex> Ringbus.Bench.Latency.Replies.resp("$3\\r\\nabc\\r\\n+PONG\\r\\n-ERR x\\r\\n$2\\r\\na", 0, 0)
      {:ok, 3, 1, "$2\\r\\na"}

  Everything here is pure.
  """

  alias Ringbus.Wire.Decoder

  @doc """
  The RESP replies at the head of `data`, added to `answered` and `errors`
  (error replies), and the bytes of the incomplete one after them; or an
  error at a byte no reply starts with (arrays are not expected).
  """
  @spec resp(binary(), non_neg_integer(), non_neg_integer()) ::
          {:ok, non_neg_integer(), non_neg_integer(), binary()} | {:error, term()}
  def resp(<<"$-1\r\n", rest::binary>>, answered, errors), do: resp(rest, answered + 1, errors)

  def resp(<<"$", rest::binary>> = data, answered, errors) do
    case size(rest, 0, 0) do
      {:ok, size, body} ->
        case body do
          <<_::binary-size(size), "\r\n", rest::binary>> -> resp(rest, answered + 1, errors)
          _ when byte_size(body) < size + 2 -> {:ok, answered, errors, data}
          _ -> {:error, {:unexpected_reply, data}}
        end

      :more ->
        {:ok, answered, errors, data}

      :error ->
        {:error, {:unexpected_reply, data}}
    end
  end

  def resp(<<"+PONG\r\n", rest::binary>>, answered, errors), do: resp(rest, answered + 1, errors)

  def resp(<<type, _::binary>> = data, answered, errors) when type in [?+, ?-, ?:] do
    case :binary.match(data, "\r\n") do
      {at, 2} ->
        rest = binary_part(data, at + 2, byte_size(data) - at - 2)
        resp(rest, answered + 1, if(type == ?-, do: errors + 1, else: errors))

      :nomatch ->
        {:ok, answered, errors, data}
    end
  end

  def resp(<<>>, answered, errors), do: {:ok, answered, errors, <<>>}

  def resp(data, _answered, _errors),
    do: {:error, {:unexpected_reply, binary_part(data, 0, min(byte_size(data), 32))}}

  # A bulk string's size: decimal digits, at most 9, ended by CRLF.
  defp size(<<d, rest::binary>>, value, digits) when d in ?0..?9 and digits < 9,
    do: size(rest, value * 10 + d - ?0, digits + 1)

  defp size(<<"\r\n", rest::binary>>, value, digits) when digits > 0, do: {:ok, value, rest}
  defp size(<<>>, _value, _digits), do: :more
  defp size(<<"\r">>, _value, digits) when digits > 0, do: :more
  defp size(_, _value, _digits), do: :error

  @doc """
  The `PUSH` acks in `data` fed to `decoder`: `{:ok, acks, failed acks,
  decoder}`, or an error for a bad frame or a frame other than `PUSH_ACKS`.
  """
  @spec push(Decoder.t(), binary()) ::
          {:ok, non_neg_integer(), non_neg_integer(), Decoder.t()} | {:error, term()}
  def push(decoder, data) do
    case Decoder.feed(decoder, data) do
      {:ok, frames, decoder} ->
        case count_acks(frames, 0, 0) do
          {:ok, answered, errors} -> {:ok, answered, errors, decoder}
          error -> error
        end

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp count_acks([], answered, errors), do: {:ok, answered, errors}

  defp count_acks([{:push_acks, _count, acks} | frames], answered, errors) do
    {answered, errors} = count_entries(acks, answered, errors)
    count_acks(frames, answered, errors)
  end

  defp count_acks([other | _], _answered, _errors), do: {:error, {:unexpected_frame, other}}

  defp count_entries([], answered, errors), do: {answered, errors}
  defp count_entries([{_, {:ok, _}} | acks], a, e), do: count_entries(acks, a + 1, e)
  defp count_entries([{_, {:error, _}} | acks], a, e), do: count_entries(acks, a + 1, e + 1)
end
