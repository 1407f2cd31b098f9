defmodule Ringbus.Resp.StreamIds do
  @moduledoc false
  # The IDs a client gives, as the seqs of the stream's channel they bound,
  # found where the stream lives in one request (`Ringbus.Op`'s
  # `:id_bounds`, `Ringbus.Channel.IdReads.bounds/2`): IDs increase in seq
  # order, so each is found by binary search there. Group commands send
  # their IDs inside the group request instead (`Ringbus.Group.ByIds`).

  alias Ringbus.Channel.IdReads
  alias Ringbus.Resp.{Entry, Errors}

  @doc """
  The seq each bound names in stream `key` (`t:IdReads.side/0`); for a
  stream that does not exist, 0 for every position and :none for every
  `:entry`.
  """
  @spec bounds(binary(), [{IdReads.side(), Entry.id()}]) :: [integer() | :none]
  def bounds(_key, []), do: []

  def bounds(key, bounds) do
    case Errors.check!(Ringbus.run(key, {:id_bounds, bounds}), key) do
      {:ok, seqs} -> seqs
      {:error, :no_channel} -> Enum.map(bounds, &missing/1)
    end
  end

  defp missing({:entry, _id}), do: :none
  defp missing({side, _id}) when side in [:through, :before], do: -1
  defp missing(_bound), do: 0

  @doc "The seq of each ID that names an entry of stream `key` exactly, or :none."
  @spec exact(binary(), [Entry.id()]) :: [Ringbus.seq() | :none]
  def exact(key, ids), do: bounds(key, Enum.map(ids, &{:entry, &1}))

  @doc "The ID of each seq of stream `key` (`IdReads.ids_of/2`)."
  @spec ids_of(binary(), [Ringbus.seq()]) :: [Entry.id()]
  def ids_of(_key, []), do: []

  def ids_of(key, seqs) do
    case Errors.check!(Ringbus.run(key, {:ids_of, seqs}), key) do
      {:ok, ids} -> ids
      {:error, :no_channel} -> Enum.map(seqs, &IdReads.gone/1)
    end
  end
end
