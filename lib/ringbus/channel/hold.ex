defmodule Ringbus.Channel.Hold do
  @moduledoc false
  # Work-queue retention on a reject channel: its holding consumer groups
  # (`Ringbus.Group.Hold`) publish here, in two `:atomics` slots of the
  # channel (after the ring's own, `Ringbus.Channel.Ring`), how many they
  # are and their floor: every seq below it is acked (or dead) for each of
  # them. The ring reads both, never a group: a push that finds the ring
  # full frees the messages below the floor and tries again; a trim takes
  # none above it; `Ringbus.Op` answers a pull `:empty`.
  #
  # The floor only rises, by compare-and-swap, so a floor computed from
  # rows read a while ago is still true, only low. A group made after the
  # computation began would not be in it: the slot carries a generation,
  # `generation <<< 48 ||| floor`, which each holding group made moves on
  # (`raise_floor/3` with nil), and a floor computed under an older one is
  # refused (`:moved`).

  alias Ringbus.Channel

  @holders 11
  @floor 12
  @floor_bits 48
  @floor_mask 0xFFFF_FFFF_FFFF
  @generations 0x7FFF

  @doc "Whether the channel has holding groups."
  @spec held?(Channel.t()) :: boolean()
  def held?(%Channel{atomics: a}), do: :atomics.get(a, @holders) > 0

  @doc "Sets how many holding groups the channel has (its groups loaded from a snapshot)."
  @spec put_holders(Channel.t(), non_neg_integer()) :: :ok
  def put_holders(%Channel{atomics: a}, n), do: :atomics.put(a, @holders, n)

  @doc "Counts a holding group made (`1`) or gone (`-1`)."
  @spec hold(Channel.t(), 1 | -1) :: integer()
  def hold(%Channel{atomics: a}, delta), do: :atomics.add_get(a, @holders, delta)

  @doc "The floor: every seq below it is acked by each holding group."
  @spec floor(Channel.t()) :: non_neg_integer()
  def floor(ch), do: elem(generation(ch), 1)

  @doc "`{generation, floor}`, for a caller that computes a new floor."
  @spec generation(Channel.t()) :: {non_neg_integer(), non_neg_integer()}
  def generation(%Channel{atomics: a}), do: unpack(:atomics.get(a, @floor))

  @doc """
  Raises the floor to `floor` if the generation is still `gen`: `{:ok,
  floor_now}`, or `:moved` when a holding group was made since. With
  `floor` nil, moves to the next generation, the floor kept: a holding
  group is made.
  """
  @spec raise_floor(Channel.t(), non_neg_integer() | nil, non_neg_integer() | nil) ::
          {:ok, non_neg_integer()} | :moved
  def raise_floor(%Channel{atomics: a} = ch, gen, floor) do
    packed = :atomics.get(a, @floor)

    case {unpack(packed), floor} do
      {{g, f}, nil} -> swap(ch, packed, pack(rem(g + 1, @generations), f), f, gen, floor)
      {{^gen, f}, floor} when floor <= f -> {:ok, f}
      {{^gen, _f}, floor} -> swap(ch, packed, pack(gen, floor), floor, gen, floor)
      _moved -> :moved
    end
  end

  defp swap(%Channel{atomics: a} = ch, old, new, answer, gen, floor) do
    if :atomics.compare_exchange(a, @floor, old, new) == :ok,
      do: {:ok, answer},
      else: raise_floor(ch, gen, floor)
  end

  defp pack(gen, floor), do: Bitwise.bsl(gen, @floor_bits) + floor

  defp unpack(packed),
    do: {Bitwise.bsr(packed, @floor_bits), Bitwise.band(packed, @floor_mask)}
end
