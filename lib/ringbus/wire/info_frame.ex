defmodule Ringbus.Wire.InfoFrame do
  @moduledoc """
  `INFO_OK`'s three layouts (docs/PROTOCOL.md, section 6), which
  `Ringbus.Wire.Frame` encodes and decodes through this module. Each
  version's body is the one before it with fields added at its end:

    * version 3: the keys of `t:Ringbus.info/0` up to `:incarnation`
      (105 bytes, `corr` included);
    * version 4 (and 5): then `:replicas` (nil for a memory channel, else
      1 to 255) and `:nodes` (a u16) (108 bytes);
    * version 6: then `:oldest_time`, `:newest_time` (system ms, nil when
      the channel holds no message), `:max_age` (ms, nil for none) and
      `:expired` (140 bytes).

  The map given to `body/2` says which: version 6's keys, version 4's, or
  version 3's alone. Nil travels as 0.
  """

  @v3 4 + 4 + 1 + 12 * 8
  @v4 @v3 + 1 + 2
  @v6 @v4 + 4 * 8
  @max_replicas 255

  @v3_keys [
    :capacity,
    :overflow,
    :max_bytes,
    :len,
    :first_seq,
    :next_seq,
    :pushed,
    :pulled,
    :overwritten,
    :rejected,
    :skipped,
    :bytes,
    :bytes_pushed,
    :incarnation
  ]
  @v4_keys [:replicas, :nodes]
  @v6_keys [:oldest_time, :newest_time, :max_age, :expired]

  defguardp is_u64(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF_FFFF_FFFF
  defguardp is_u64_or_nil(x) when is_nil(x) or is_u64(x)

  @doc "The body sizes, `corr` included, of versions 3, 4 and 6."
  @spec sizes() :: [pos_integer()]
  def sizes, do: [@v3, @v4, @v6]

  @doc "The keys of `INFO_OK` in `version`."
  @spec keys(pos_integer()) :: [atom()]
  def keys(3), do: @v3_keys
  def keys(version) when version in [4, 5], do: @v3_keys ++ @v4_keys
  def keys(_version), do: @v3_keys ++ @v4_keys ++ @v6_keys

  @doc "The body of an `INFO_OK` for `info`, or nil when a field is out of range."
  @spec body(non_neg_integer(), map()) :: iodata() | nil
  def body(
        corr,
        %{oldest_time: oldest, newest_time: newest, max_age: age, expired: expired} = info
      )
      when map_size(info) == 20 and is_u64_or_nil(oldest) and is_u64_or_nil(newest) and
             is_u64_or_nil(age) and is_u64(expired) do
    if v4 = body(corr, Map.drop(info, @v6_keys)),
      do: [v4, <<oldest || 0::64, newest || 0::64, age || 0::64, expired::64>>]
  end

  def body(corr, %{replicas: replicas, nodes: nodes} = info)
      when map_size(info) == 16 and (is_nil(replicas) or replicas in 1..@max_replicas) and
             is_integer(nodes) and nodes in 0..0xFFFF do
    if v3 = body(corr, Map.drop(info, @v4_keys)), do: [v3, <<replicas || 0, nodes::16>>]
  end

  def body(
        corr,
        %{
          capacity: capacity,
          overflow: overflow,
          max_bytes: max_bytes,
          len: len,
          first_seq: first_seq,
          next_seq: next_seq,
          pushed: pushed,
          pulled: pulled,
          overwritten: overwritten,
          rejected: rejected,
          skipped: skipped,
          bytes: bytes,
          bytes_pushed: bytes_pushed,
          incarnation: incarnation
        } = info
      )
      when map_size(info) == 14 and is_u64(incarnation) and is_integer(corr) and corr >= 0 and
             corr <= 0xFFFF_FFFF and is_integer(capacity) and capacity >= 0 and
             capacity <= 0xFFFF_FFFF and overflow in [:drop_oldest, :reject] and
             is_u64_or_nil(max_bytes) and is_u64(len) and is_u64(first_seq) and
             is_u64(next_seq) and is_u64(pushed) and is_u64(pulled) and is_u64(overwritten) and
             is_u64(rejected) and is_u64(skipped) and is_u64(bytes) and is_u64(bytes_pushed) do
    [
      <<corr::32, capacity::32, overflow(overflow), max_bytes || 0::64, len::64, first_seq::64,
        next_seq::64, pushed::64, pulled::64, overwritten::64, rejected::64, skipped::64,
        bytes::64, bytes_pushed::64, incarnation::64>>
    ]
  end

  def body(_corr, _info), do: nil

  @doc "Decodes an `INFO_OK` body (after the opcode) of any of the three sizes."
  @spec decode(binary()) :: {:ok, tuple()} | {:error, term()}
  def decode(<<v4::binary-size(@v4), oldest::64, newest::64, age::64, expired::64>>) do
    with {:ok, {:info_ok, corr, info}} <- decode(v4) do
      times = %{
        oldest_time: nil_if_zero(oldest),
        newest_time: nil_if_zero(newest),
        max_age: nil_if_zero(age),
        expired: expired
      }

      {:ok, {:info_ok, corr, Map.merge(info, times)}}
    end
  end

  def decode(<<v3::binary-size(@v3), replicas, nodes::16>>) do
    with {:ok, {:info_ok, corr, info}} <- decode(v3) do
      {:ok, {:info_ok, corr, Map.merge(info, %{replicas: nil_if_zero(replicas), nodes: nodes})}}
    end
  end

  def decode(
        <<corr::32, capacity::32, overflow, max_bytes::64, len::64, first_seq::64, next_seq::64,
          pushed::64, pulled::64, overwritten::64, rejected::64, skipped::64, bytes::64,
          bytes_pushed::64, incarnation::64>>
      ) do
    case overflow do
      o when o in [0, 1] ->
        info = %{
          capacity: capacity,
          overflow: if(o == 0, do: :drop_oldest, else: :reject),
          max_bytes: nil_if_zero(max_bytes),
          len: len,
          first_seq: first_seq,
          next_seq: next_seq,
          pushed: pushed,
          pulled: pulled,
          overwritten: overwritten,
          rejected: rejected,
          skipped: skipped,
          bytes: bytes,
          bytes_pushed: bytes_pushed,
          incarnation: incarnation
        }

        {:ok, {:info_ok, corr, info}}

      _ ->
        {:error, {:bad_field, :info_ok, :overflow}}
    end
  end

  # A body of none of the sizes is judged against the nearest.
  def decode(body) do
    size = byte_size(body)
    nearest = Enum.min_by(sizes(), &abs(&1 - size))

    if size > nearest,
      do: {:error, {:trailing_bytes, :info_ok}},
      else: {:error, {:truncated, :info_ok}}
  end

  defp overflow(:drop_oldest), do: 0
  defp overflow(:reject), do: 1

  defp nil_if_zero(0), do: nil
  defp nil_if_zero(n), do: n
end
