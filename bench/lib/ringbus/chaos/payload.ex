defmodule Ringbus.Chaos.Payload do
  @moduledoc """
  The payloads of the chaos workload: each carries its producer's id and a
  counter, so that the checker knows every message it reads.

  A payload is `"rbchaos" <> <<producer::32, counter::64>>` followed by
  padding up to the size asked for. Its key, `{producer, counter}`, names
  one producer message, however many times it is pushed (a retry pushes the
  same key again). Anything else decodes to `{:unknown, byte_size}`.
  """

  @magic "rbchaos"
  @header byte_size(@magic) + 12

  @typedoc "One producer message: `{producer, counter}`, or a payload that is none."
  @type key :: {non_neg_integer(), non_neg_integer()} | {:unknown, non_neg_integer()}

  @doc "The payload of `{producer, counter}`, padded to `bytes` (at least its header)."
  @spec encode({non_neg_integer(), non_neg_integer()}, non_neg_integer()) :: binary()
  def encode({producer, counter}, bytes \\ 0) do
    pad = max(bytes - @header, 0)
    <<@magic, producer::32, counter::64, :binary.copy(<<0>>, pad)::binary>>
  end

  @doc "The key a payload carries."
  @spec key(binary()) :: key()
  def key(<<@magic, producer::32, counter::64, _::binary>>), do: {producer, counter}
  def key(payload) when is_binary(payload), do: {:unknown, byte_size(payload)}

  @doc "`{seq, key}` for each `{seq, payload}`: what a consumer records instead of payloads."
  @spec keys([{non_neg_integer(), binary()}]) :: [{non_neg_integer(), key()}]
  def keys(messages), do: for({seq, payload} <- messages, do: {seq, key(payload)})
end
