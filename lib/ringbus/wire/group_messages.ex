defmodule Ringbus.Wire.GroupMessages do
  @moduledoc false
  # The messages of GROUP_MESSAGES (version 5) and GROUP_DELIVER (version
  # 7), one layout: seq, deliveries, (with times) the time, then the
  # payload with its length. A decoding error names GROUP_MESSAGES; the
  # caller of another frame renames it.

  defguardp is_u32(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF
  defguardp is_u64(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF_FFFF_FFFF

  @doc "The messages of `count`, as iodata; raises when they are not `count` in range."
  @spec encode([tuple()], non_neg_integer()) :: iodata()
  def encode(messages, count), do: messages(messages, count, 0, [])

  defp messages([{seq, payload, deliveries} | rest], count, n, acc)
       when is_u64(seq) and is_binary(payload) and is_u32(deliveries) do
    entry = [<<seq::64, deliveries::32, byte_size(payload)::32>>, payload]
    messages(rest, count, n + 1, [acc | entry])
  end

  # A time not known (nil: the message left the ring before its time was
  # read, `Ringbus.Groups.fetch/5`) goes as 0.
  defp messages([{seq, payload, deliveries, ms} | rest], count, n, acc)
       when is_u64(seq) and is_binary(payload) and is_u32(deliveries) and
              (is_nil(ms) or is_u64(ms)) do
    time = ms || 0
    entry = [<<seq::64, deliveries::32, time::64, byte_size(payload)::32>>, payload]
    messages(rest, count, n + 1, [acc | entry])
  end

  defp messages([], count, count, acc), do: acc

  defp messages(_messages, count, _n, _acc),
    do: raise(ArgumentError, "expected #{count} messages")

  @doc "`count` messages, the whole of `rest` (with their times when `times?`)."
  @spec decode(binary(), non_neg_integer(), boolean()) :: {:ok, [tuple()]} | {:error, term()}
  def decode(rest, count, times?), do: decode_messages(rest, count, [], times?)

  defp decode_messages(<<>>, 0, acc, _times?), do: {:ok, :lists.reverse(acc)}

  defp decode_messages(
         <<seq::64, n::32, size::32, payload::binary-size(size), rest::binary>>,
         left,
         acc,
         false
       )
       when left > 0,
       do: decode_messages(rest, left - 1, [{seq, payload, n} | acc], false)

  defp decode_messages(
         <<seq::64, n::32, ms::64, size::32, payload::binary-size(size), rest::binary>>,
         left,
         acc,
         true
       )
       when left > 0,
       do: decode_messages(rest, left - 1, [{seq, payload, n, ms} | acc], true)

  defp decode_messages(rest, 0, _acc, _times?) when rest != <<>>,
    do: {:error, {:trailing_bytes, :group_messages}}

  defp decode_messages(_rest, _left, _acc, _times?), do: {:error, {:truncated, :group_messages}}
end
