defmodule Ringbus.Test.Reasons do
  @moduledoc """
  The atoms of `t:Ringbus.reason/0`, read from the type itself, so that a
  reason added there without a mapping in a front end fails that front
  end's table test.
  """

  @doc "Every reason of `t:Ringbus.reason/0`, sorted."
  def all do
    {:ok, types} = Code.Typespec.fetch_types(Ringbus)
    local = Map.new(for {:type, {name, ast, []}} <- types, do: {name, ast})
    local |> Map.fetch!(:reason) |> atoms(local) |> Enum.sort()
  end

  defp atoms({:type, _, :union, members}, local), do: Enum.flat_map(members, &atoms(&1, local))
  defp atoms({:atom, _, atom}, _local), do: [atom]
  defp atoms({:user_type, _, name, []}, local), do: local |> Map.fetch!(name) |> atoms(local)
end
