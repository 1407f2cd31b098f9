defmodule Ringbus.Test.RespIds do
  @moduledoc false
  # A RESP stream's auto IDs are times (docs/RESP.md, "IDs"), another in
  # each run. Tests that compare runs name each auto ID by the order it
  # first appears in instead: `{id 1}`, `{id 2}`, ...; IDs a client gave
  # (small ms) stay as they are.

  @auto ~r/\b\d{10,}-\d+\b/

  @doc "`term` (replies: lists, tuples, binaries) with every auto ID named by its order."
  @spec named(term()) :: term()
  def named(term) do
    {named, _names} = walk(term, %{})
    named
  end

  defp walk(text, names) when is_binary(text) do
    Regex.scan(@auto, text)
    |> List.flatten()
    |> Enum.reduce({text, names}, fn id, {text, names} ->
      names = Map.put_new(names, id, "{id #{map_size(names) + 1}}")
      {String.replace(text, id, names[id]), names}
    end)
  end

  defp walk(list, names) when is_list(list), do: Enum.map_reduce(list, names, &walk/2)

  defp walk(tuple, names) when is_tuple(tuple) do
    {list, names} = tuple |> Tuple.to_list() |> walk(names)
    {List.to_tuple(list), names}
  end

  defp walk(other, names), do: {other, names}
end
