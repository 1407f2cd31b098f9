defmodule Ringbus.Test.RespTags do
  @moduledoc false
  # A RESP stream ID ends in its stream's tag (docs/RESP.md, "IDs"), which
  # changes with each creation of the stream. Tests that compare runs of
  # streams made again name each tag by its stream instead: `1-{xb-a}`.

  alias Ringbus.Resp.Entry

  @doc "The tag of stream `key`'s IDs; `incarnation` looks its incarnation up."
  @spec tag!(binary(), (binary() -> {:ok, pos_integer()} | {:error, term()})) :: pos_integer()
  def tag!(key, incarnation \\ &Ringbus.incarnation/1) do
    {:ok, inc} = incarnation.(key)
    Entry.tag(inc)
  end

  @doc "The tag of stream `key`'s IDs, as text."
  @spec tag_text!(binary(), (binary() -> {:ok, pos_integer()} | {:error, term()})) :: binary()
  def tag_text!(key, incarnation \\ &Ringbus.incarnation/1),
    do: Integer.to_string(tag!(key, incarnation))

  @doc """
  `term` (replies: lists, tuples, binaries) with every ID of one of the
  streams `keys` (those that exist) written `<n>-{key}`.
  """
  @spec untag(term(), [binary()], (binary() -> {:ok, pos_integer()} | {:error, term()})) ::
          term()
  def untag(term, keys, incarnation \\ &Ringbus.incarnation/1) do
    names =
      for key <- keys,
          {:ok, inc} <- [incarnation.(key)],
          into: %{},
          do: {Integer.to_string(Entry.tag(inc)), key}

    walk(term, names)
  end

  defp walk(text, names) when is_binary(text) do
    Regex.replace(~r/\b(\d+)-(\d+)\b/, text, fn whole, n, tag ->
      case names do
        %{^tag => key} -> n <> "-{" <> key <> "}"
        _ -> whole
      end
    end)
  end

  defp walk(list, names) when is_list(list), do: Enum.map(list, &walk(&1, names))

  defp walk(tuple, names) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> walk(names) |> List.to_tuple()

  defp walk(other, _names), do: other
end
