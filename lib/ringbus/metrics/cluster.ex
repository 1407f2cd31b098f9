defmodule Ringbus.Metrics.Cluster do
  @moduledoc false
  # Reads what `Ringbus.cluster_info/0` returns by field name, so that the
  # metrics and the status page need no change when the cluster layer adds
  # a field: its members, and per link to a node its state, queued bytes,
  # batches, drops, suspensions and calls by outcome. Links may come as a list of maps with a
  # `:node` or as a map of node to link; a field that is missing stays nil.

  @type link :: %{
          node: String.t(),
          state: String.t(),
          queued_bytes: number() | nil,
          batches: number() | nil,
          drops: number() | nil,
          suspensions: number() | nil,
          calls_ok: number() | nil,
          calls_refused: number() | nil,
          calls_timeout: number() | nil
        }

  @spec normalize(term()) :: %{members: [String.t()], links: [link()]}
  def normalize({:ok, info}), do: normalize(info)

  def normalize(info) when is_map(info) do
    links =
      case Map.get(info, :links, []) do
        links when is_map(links) ->
          Enum.map(links, fn {node, link} -> Map.put(link, :node, node) end)

        links when is_list(links) ->
          links

        _ ->
          []
      end

    %{
      members: info |> Map.get(:members, []) |> List.wrap() |> Enum.map(&to_string/1),
      links: links |> Enum.filter(&is_map/1) |> Enum.map(&link/1) |> Enum.sort_by(& &1.node)
    }
  end

  def normalize(_other), do: %{members: [], links: []}

  defp link(link) do
    %{
      node: to_string(Map.get(link, :node, "unknown")),
      state: to_string(Map.get(link, :state, "unknown")),
      queued_bytes: Map.get(link, :queued_bytes),
      batches: Map.get(link, :batches),
      drops: Map.get(link, :drops, Map.get(link, :dropped)),
      suspensions: Map.get(link, :suspensions),
      calls_ok: Map.get(link, :calls_ok),
      calls_refused: Map.get(link, :calls_refused),
      calls_timeout: Map.get(link, :calls_timeout)
    }
  end
end
