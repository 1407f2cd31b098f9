defmodule Ringbus.Resp.Entry do
  @moduledoc false
  # How a stream entry is a channel message: its ID is the one the message
  # stores, its field/value pairs are its payload. Pure. `docs/RESP.md` documents
  # both for clients of either protocol.
  #
  # IDs are Redis's, `<ms>-<n>`: each message stores the one it was given
  # (`Ringbus.Channel.Ids`), and `Ringbus.Resp.StreamIds` turns IDs into
  # the seqs they bound where the stream lives. Here: parsing and order.
  #
  # Payloads. The pairs of one XADD are stored as
  #
  #   0xFF "RBX" 0x01, pairs::u32, then per field and per value: length::u32, bytes
  #
  # (big-endian), which decodes back to the same bytes. A payload that is not
  # exactly that (a message pushed over the binary protocol) reads as the one
  # pair `payload => <its bytes>`; and an XADD of that one pair stores the
  # bytes as they are, so Redis clients and binary clients exchange raw
  # payloads. An XADD `payload` value that would itself decode as pairs is
  # stored encoded, so that every XADD reads back as it was written.

  @magic <<0xFF, "RBX", 1>>
  @raw_field "payload"
  @max_u64 0xFFFF_FFFF_FFFF_FFFF

  @typedoc "A stream ID: milliseconds and sequence, both u64."
  @type id :: {non_neg_integer(), non_neg_integer()}

  @doc "An ID as text."
  @spec format(id()) :: binary()
  def format({ms, n}), do: Integer.to_string(ms) <> "-" <> Integer.to_string(n)

  @doc """
  Parses an ID a client gave: `ms-seq`, or `ms` alone, whose sequence is
  `missing` (0 for a range's start, the largest for its end).
  """
  @spec parse(binary(), non_neg_integer()) :: {:ok, id()} | :error
  def parse(text, missing \\ 0) do
    case :binary.split(text, "-") do
      [ms] -> with {:ok, ms} <- u64(ms), do: {:ok, {ms, missing}}
      [ms, n] -> with {:ok, ms} <- u64(ms), {:ok, n} <- u64(n), do: {:ok, {ms, n}}
      _ -> :error
    end
  end

  @doc "The largest ID."
  @spec max_id() :: id()
  def max_id, do: {@max_u64, @max_u64}

  @doc "The largest u64, the sequence of an ID given as `ms` alone at a range's end."
  @spec max_u64() :: non_neg_integer()
  def max_u64, do: @max_u64

  # Redis's string2ull: digits only, at most a u64.
  defp u64(<<c, _::binary>> = digits) when c in ?0..?9 and byte_size(digits) <= 20 do
    case Integer.parse(digits) do
      {n, ""} when n <= @max_u64 -> {:ok, n}
      _ -> :error
    end
  end

  defp u64(_text), do: :error

  ## Payloads

  @doc "The payload that stores one XADD's field/value pairs, given as a flat list."
  @spec encode([binary()]) :: binary()
  def encode([@raw_field, bytes] = pairs) do
    if match?({:ok, _}, decode_pairs(bytes)), do: encode_pairs(pairs), else: bytes
  end

  def encode(pairs), do: encode_pairs(pairs)

  defp encode_pairs(pairs), do: encode_pairs(pairs, 0, <<>>)

  # Appending to a binary grows it in place: one copy at the end.
  defp encode_pairs([bytes | rest], n, acc),
    do: encode_pairs(rest, n + 1, <<acc::binary, byte_size(bytes)::32, bytes::binary>>)

  defp encode_pairs([], n, acc), do: <<@magic, div(n, 2)::32, acc::binary>>

  @doc "The field/value pairs a payload holds, as a flat list."
  @spec decode(binary()) :: [binary()]
  def decode(payload) do
    case decode_pairs(payload) do
      {:ok, pairs} -> pairs
      :error -> [@raw_field, payload]
    end
  end

  defp decode_pairs(<<@magic, count::32, rest::binary>>) when count > 0,
    do: take(rest, 2 * count, [])

  defp decode_pairs(_payload), do: :error

  defp take(<<>>, 0, acc), do: {:ok, :lists.reverse(acc)}

  defp take(<<size::32, bytes::binary-size(size), rest::binary>>, left, acc) when left > 0,
    do: take(rest, left - 1, [bytes | acc])

  defp take(_rest, _left, _acc), do: :error
end
