defmodule Ringbus.Wire.TimeFrame do
  @moduledoc """
  Version 6's frames of timed messages (docs/PROTOCOL.md, "Time"), which
  `Ringbus.Wire.Frame` encodes and decodes through this module:

      {:read_timed_ok, corr, incarnation, lost, count, messages}
      {:deliver_timed, sub_id, lost, count, messages}   # messages: [{seq, payload, ms}]

  They are `READ_OK` and `DELIVER` whose messages carry the time each was
  stored, system ms as a u64 between seq and payload: the answers to a
  `READ` and the deliveries of a `SUBSCRIBE` that set the times flag.
  """

  @read_timed_ok 0x90
  @deliver_timed 0x91

  # A timed message: seq, time, payload length.
  @message_overhead 8 + 8 + 4

  defguardp is_u32(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF
  defguardp is_u64(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF_FFFF_FFFF

  @doc "The opcodes of the frames this module lays out."
  @spec responses() :: keyword(byte())
  def responses, do: [read_timed_ok: @read_timed_ok, deliver_timed: @deliver_timed]

  @doc "The bytes a timed message takes beyond its payload: seq, time, payload length."
  @spec message_overhead() :: pos_integer()
  def message_overhead, do: @message_overhead

  @doc "`{opcode, iodata, size}` of a frame of this module, nil if a field is out of range."
  @spec body(tuple()) :: {byte(), iodata(), non_neg_integer()} | nil
  def body({:read_timed_ok, corr, incarnation, lost, count, messages})
      when is_u32(corr) and is_u64(incarnation) and is_u64(lost) and is_u32(count) and
             is_list(messages) do
    head = <<corr::32, incarnation::64, lost::64, count::32>>
    {entries, size} = messages(messages, count, 0, [head], 24)
    {@read_timed_ok, entries, size}
  end

  def body({:deliver_timed, sub, lost, count, messages})
      when is_u32(sub) and is_u64(lost) and is_u32(count) and is_list(messages) do
    {entries, size} = messages(messages, count, 0, [<<sub::32, lost::64, count::32>>], 16)
    {@deliver_timed, entries, size}
  end

  def body(_frame), do: nil

  defp messages([{seq, payload, ms} | rest], count, n, acc, size)
       when is_u64(seq) and is_binary(payload) and is_u64(ms) do
    entry = [<<seq::64, ms::64, byte_size(payload)::32>>, payload]
    messages(rest, count, n + 1, [acc | entry], size + @message_overhead + byte_size(payload))
  end

  defp messages([], count, count, acc, size), do: {acc, size}

  defp messages(_messages, count, _n, _acc, _size),
    do: raise(ArgumentError, "expected #{count} timed messages of u64 seq, binary and u64 ms")

  @doc "Decodes the body (after the opcode) of a frame of this module."
  @spec decode(byte(), binary()) :: {:ok, tuple()} | {:error, term()}
  def decode(@read_timed_ok, <<corr::32, incarnation::64, lost::64, count::32, rest::binary>>) do
    with {:ok, messages} <- decode_messages(rest, count, [], :read_timed_ok),
         do: {:ok, {:read_timed_ok, corr, incarnation, lost, count, messages}}
  end

  def decode(@deliver_timed, <<sub::32, lost::64, count::32, rest::binary>>) do
    with {:ok, messages} <- decode_messages(rest, count, [], :deliver_timed),
         do: {:ok, {:deliver_timed, sub, lost, count, messages}}
  end

  def decode(@read_timed_ok, _body), do: {:error, {:truncated, :read_timed_ok}}
  def decode(@deliver_timed, _body), do: {:error, {:truncated, :deliver_timed}}

  defp decode_messages(<<>>, 0, acc, _type), do: {:ok, :lists.reverse(acc)}
  defp decode_messages(_rest, 0, _acc, type), do: {:error, {:trailing_bytes, type}}

  defp decode_messages(
         <<seq::64, ms::64, size::32, payload::binary-size(size), rest::binary>>,
         left,
         acc,
         type
       ),
       do: decode_messages(rest, left - 1, [{seq, payload, ms} | acc], type)

  defp decode_messages(_rest, _left, _acc, type), do: {:error, {:truncated, type}}
end
