defmodule Ringbus.Resp.StreamIds do
  @moduledoc false
  # A stream's IDs and the seqs of its channel, asked where the stream lives
  # (`Ringbus.Op`'s `:seek_ids` and `:ids_of`, `Ringbus.Channel.IdReads`):
  # IDs increase in seq order, so each ID a client gives bounds a range of
  # seqs, found by binary search there. One request answers every ID a
  # command gives. An entry whose message the ring dropped while a group
  # still had it pending is named `0-<seq + 1>` (`IdReads.gone/1`), and
  # taken back.

  alias Ringbus.Resp.{Entry, Errors}

  @typedoc "What a client's ID bounds: the first seq at or above it, and whether that seq is it."
  @type found :: {Ringbus.seq(), boolean()}

  @doc """
  Where each ID is in stream `key`: `{seq, exact?}` (`t:found/0`); every
  ID at the stream's next seq (0) when it does not exist.
  """
  @spec seek(binary(), [Entry.id()]) :: [found()]
  def seek(_key, []), do: []

  def seek(key, ids) do
    case Errors.check!(Ringbus.run(key, {:seek_ids, ids}), key) do
      {:ok, found} -> found
      {:error, :no_channel} -> Enum.map(ids, fn _ -> {0, false} end)
    end
  end

  @doc """
  The seqs bounded by each bound of `bounds`, in one request:
  `{:from, id}` (the first seq at or above), `{:after, id}` (the first
  above), `{:through, id}` (the last at or below), `{:before, id}` (the
  last below).
  """
  @spec bounds(binary(), [{:from | :after | :through | :before, Entry.id()}]) :: [integer()]
  def bounds(key, bounds) do
    # `:after` and `:through` seek the ID after theirs; past the largest
    # ID there is none: the stream's next seq, found by seeking the largest.
    {seeks, steps} =
      bounds
      |> Enum.map(fn
        {side, id} when side in [:from, :before] -> {id, side}
        {side, id} -> {Entry.succ(id) |> or_max(), {side, Entry.succ(id)}}
      end)
      |> Enum.unzip()

    Enum.zip_with(seek(key, seeks), steps, &bound/2)
  end

  defp or_max(:none), do: Entry.max_id()
  defp or_max(id), do: id

  defp bound({seq, _exact}, :from), do: seq
  defp bound({seq, _exact}, :before), do: seq - 1
  defp bound({seq, exact}, {:after, :none}), do: if(exact, do: seq + 1, else: seq)
  defp bound({seq, _exact}, {:after, _next}), do: seq
  defp bound({seq, exact}, {:through, :none}), do: if(exact, do: seq, else: seq - 1)
  defp bound({seq, _exact}, {:through, _next}), do: seq - 1

  @doc "The seq of each ID that names an entry of stream `key` exactly, or :none."
  @spec exact(binary(), [Entry.id()]) :: [Ringbus.seq() | :none]
  def exact(key, ids),
    do: Enum.map(seek(key, ids), fn {seq, exact} -> if exact, do: seq, else: :none end)

  @doc "The ID of each seq of stream `key` (`IdReads.ids_of/2`)."
  @spec ids_of(binary(), [Ringbus.seq()]) :: [Entry.id()]
  def ids_of(_key, []), do: []

  def ids_of(key, seqs) do
    case Errors.check!(Ringbus.run(key, {:ids_of, seqs}), key) do
      {:ok, ids} -> ids
      {:error, :no_channel} -> Enum.map(seqs, &{0, &1 + 1})
    end
  end

  @doc "Each seq's ID as text."
  @spec formatted(binary(), [Ringbus.seq()]) :: [binary()]
  def formatted(key, seqs), do: Enum.map(ids_of(key, seqs), &Entry.format/1)
end
