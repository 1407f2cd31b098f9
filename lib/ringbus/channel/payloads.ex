defmodule Ringbus.Channel.Payloads do
  @moduledoc false
  # Payloads as the ring (`Ringbus.Channel.Ring`) stores them: a batch
  # measured, a chunk's payloads in one binary with where each ends, a
  # payload cut out of a chunk, and one stored on its own detached from the
  # larger binary it came in. Pure.

  @doc "Counts a batch and its bytes; raises `ArgumentError` on a payload that is not a binary."
  @spec measure!([binary()]) :: {non_neg_integer(), non_neg_integer()}
  def measure!(payloads), do: measure(payloads, 0, 0)

  defp measure([p | rest], n, bytes) when is_binary(p),
    do: measure(rest, n + 1, bytes + byte_size(p))

  defp measure([], n, bytes), do: {n, bytes}

  defp measure([p | _], _n, _bytes) do
    raise ArgumentError, "expected every payload to be a binary, got: #{inspect(p)}"
  end

  # A batch's payloads in one binary, and where each ends in it, after a 0:
  # payload i is the bytes between entries i and i + 1. A batch is a list,
  # or any enumerable of binaries (a server's large PUSH_BATCH, as the bytes
  # it came in), walked once without listing it: both binaries grow in place.
  @spec chunk(Enumerable.t()) :: {binary(), binary()}
  def chunk(payloads) when is_list(payloads),
    do: {IO.iodata_to_binary(payloads), ends(payloads, 0, <<0::32>>)}

  def chunk(payloads) do
    {data, ends, _at} =
      Enum.reduce(payloads, {<<>>, <<0::32>>, 0}, fn p, {data, ends, at} ->
        at = at + byte_size(p)
        {<<data::binary, p::binary>>, <<ends::binary, at::32>>, at}
      end)

    {data, ends}
  end

  defp ends([p | rest], at, acc),
    do: ends(rest, at + byte_size(p), <<acc::binary, at + byte_size(p)::32>>)

  defp ends([], _at, acc), do: acc

  # A message stored on its own never keeps more than twice its size alive: a
  # payload that is a small part of a larger binary (a batch read off a
  # socket) is copied. ETS copies payloads of up to 64 bytes itself.
  @spec detach(binary()) :: binary()
  def detach(payload) when byte_size(payload) <= 64, do: payload

  def detach(payload) do
    if :binary.referenced_byte_size(payload) > 2 * byte_size(payload),
      do: :binary.copy(payload),
      else: payload
  end

  # The payload of `seq` in a chunk as the ring stores it: one of up to 64 bytes
  # is copied out, as ETS would copy it; a larger one is a sub-binary of
  # the data, which it keeps alive.
  @spec slice(tuple(), non_neg_integer()) :: binary()
  def slice({_key, first, _bytes, _left, data, ends, _at, _id}, seq) do
    <<_::binary-size(4 * (seq - first)), from::32, to::32, _::binary>> = ends
    payload = binary_part(data, from, to - from)
    if to - from <= 64, do: :binary.copy(payload), else: payload
  end
end
