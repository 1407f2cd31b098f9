defmodule Ringbus.Group.At do
  @moduledoc false
  # What every group request needs where it runs: the group's row, a
  # position or entry checked against the channel's incarnation, the time,
  # and a cut of entries to a room. `at` is the request's context, as
  # `Ringbus.Group.run/3` makes it: the channel's handle (`channel`), its
  # incarnation (`c`) and the group table (`table`).

  alias Ringbus.Channel.Ring
  alias Ringbus.Group.Table

  @doc false
  def fetch(at, group) do
    case Table.fetch(at.table, at.c, group) do
      {:ok, g} -> {:ok, g}
      :error -> {:error, :no_group}
    end
  end

  @doc false
  # A position: the seq, if the incarnation it is of is the channel's.
  def position(at, :last), do: {:ok, Ring.next_seq(at.channel) - 1}
  def position(_at, seq) when is_integer(seq), do: {:ok, seq}

  def position(at, {seq, mark}),
    do: if(fits?(mark, at.c), do: {:ok, seq}, else: {:error, :new_incarnation})

  @doc false
  # An entry: its seq, or :none when it is of another incarnation.
  def entry(_at, seq) when is_integer(seq), do: {:ok, seq}
  def entry(at, {seq, mark}), do: if(fits?(mark, at.c), do: {:ok, seq}, else: :none)

  defp fits?({mask, bits}, incarnation), do: Bitwise.band(incarnation, mask) == bits

  @doc false
  # The first of `messages` and those after it that fit in `bytes` of payloads.
  def cut(messages, :infinity), do: messages

  def cut([{_, payload} = first | rest], bytes),
    do: cut(rest, bytes - byte_size(payload), [first])

  def cut([], _bytes), do: []

  defp cut([{_, payload} = message | rest], bytes, acc) when byte_size(payload) <= bytes,
    do: cut(rest, bytes - byte_size(payload), [message | acc])

  defp cut(_rest, _bytes, acc), do: :lists.reverse(acc)

  @doc false
  # A count of "all": larger than any channel holds.
  def all, do: 4_611_686_018_427_387_904

  @doc false
  def now, do: System.system_time(:millisecond)
end
