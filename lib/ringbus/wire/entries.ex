defmodule Ringbus.Wire.Entries do
  @moduledoc """
  The payloads of a `PUSH_BATCH` kept as the bytes they came in: its
  entries, `count` times a `u32` length and that many bytes, checked but
  not cut into a binary per payload.

  A decoder made with `pack_batches: n` (`Ringbus.Wire.Decoder.new/2`)
  gives a batch of more than `n` payloads this way, in the place of the
  list of payloads. A batch of millions of small payloads then costs the
  bytes of its frame, not a term per payload: a list of sub-binaries costs
  about 64 bytes a payload however short each is, so a 16 MiB frame of
  4 million empty payloads would take a quarter of a gigabyte to hold.

  It is `Enumerable`: walking it yields each payload in order, a
  sub-binary of `data`. `count`, `bytes` (the payloads' total) and
  `largest` (the longest payload's size) were measured when it was
  decoded.

      iex> entries = Ringbus.Wire.Entries.new("" |> Ringbus.Wire.Frame.batch_entry("a") |> Ringbus.Wire.Frame.batch_entry("bc"))
      iex> {entries.count, entries.bytes, entries.largest}
      {2, 3, 2}
      iex> Enum.to_list(entries)
      ["a", "bc"]
  """

  @enforce_keys [:data, :count, :bytes, :largest]
  defstruct @enforce_keys

  @type t :: %__MODULE__{
          data: binary(),
          count: non_neg_integer(),
          bytes: non_neg_integer(),
          largest: non_neg_integer()
        }

  @doc """
  Entries of the bytes `data`, which must be whole entries (as
  `Ringbus.Wire.Frame.batch_entry/2` builds them); raises `ArgumentError`
  otherwise.
  """
  @spec new(binary()) :: t()
  def new(data) when is_binary(data) do
    case measure(data, 0, 0, 0) do
      {count, bytes, largest} ->
        %__MODULE__{data: data, count: count, bytes: bytes, largest: largest}

      :error ->
        raise ArgumentError, "expected whole PUSH_BATCH entries"
    end
  end

  @doc false
  # For the codec: the entries of `count` payloads at the front of `data`,
  # and the bytes after them; `:truncated` when `data` ends first. Walks
  # the entries once and allocates nothing per payload.
  @spec take(binary(), non_neg_integer()) :: {:ok, t(), binary()} | :truncated
  def take(data, count) do
    case walk(data, count, 0, 0) do
      {:ok, rest, bytes, largest} ->
        entries = binary_part(data, 0, byte_size(data) - byte_size(rest))
        {:ok, %__MODULE__{data: entries, count: count, bytes: bytes, largest: largest}, rest}

      :truncated ->
        :truncated
    end
  end

  defp walk(rest, 0, bytes, largest), do: {:ok, rest, bytes, largest}

  defp walk(<<size::32, _::binary-size(size), rest::binary>>, left, bytes, largest),
    do: walk(rest, left - 1, bytes + size, max(largest, size))

  defp walk(_rest, _left, _bytes, _largest), do: :truncated

  defp measure(<<size::32, _::binary-size(size), rest::binary>>, n, bytes, largest),
    do: measure(rest, n + 1, bytes + size, max(largest, size))

  defp measure(<<>>, n, bytes, largest), do: {n, bytes, largest}
  defp measure(_, _n, _bytes, _largest), do: :error

  defimpl Enumerable do
    def count(%{count: count}), do: {:ok, count}
    def member?(_entries, _value), do: {:error, __MODULE__}
    def slice(_entries), do: {:error, __MODULE__}

    def reduce(%{data: data}, acc, fun), do: walk(data, acc, fun)

    defp walk(_data, {:halt, acc}, _fun), do: {:halted, acc}
    defp walk(data, {:suspend, acc}, fun), do: {:suspended, acc, &walk(data, &1, fun)}

    defp walk(<<size::32, payload::binary-size(size), rest::binary>>, {:cont, acc}, fun),
      do: walk(rest, fun.(payload, acc), fun)

    defp walk(<<>>, {:cont, acc}, _fun), do: {:done, acc}
  end
end
