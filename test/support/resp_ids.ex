defmodule Ringbus.Test.RespIds do
  @moduledoc false
  # A RESP stream's auto IDs are times (docs/RESP.md, "IDs"), others in
  # each run, and two streams may give the same in one ms. Tests that
  # compare runs write each auto ID as `{id}`; IDs a client gave (small
  # ms) stay as they are.

  @auto ~r/\b\d{10,}-\d+\b/

  @doc "`term` (replies: lists, tuples, binaries) with every auto ID written `{id}`."
  @spec named(term()) :: term()
  def named(text) when is_binary(text), do: Regex.replace(@auto, text, "{id}")
  def named(list) when is_list(list), do: Enum.map(list, &named/1)

  def named(tuple) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> named() |> List.to_tuple()

  def named(other), do: other
end
