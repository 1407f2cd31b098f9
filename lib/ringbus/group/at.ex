defmodule Ringbus.Group.At do
  @moduledoc false
  # What every group request needs where it runs: `at`, the request's
  # context as `new/2` makes it for `Ringbus.Group.run/3` (the channel's
  # handle, the node's table, the channel's incarnation `c`, the payload
  # bytes its answer may carry, `now`, the one reading of the clock every
  # decision of the request takes, and `logged`: whether it runs as a
  # replicated channel's machine applies its log, where `now` is the
  # leader's stamp and nothing is watched from here); the group's row; a position or
  # entry checked against the channel's incarnation; a cut of entries to a
  # room.

  alias Ringbus.Channel.{Ring, Times}
  alias Ringbus.Group.Table

  @type t :: %{
          channel: Ringbus.Channel.t(),
          table: Table.table(),
          c: Table.c(),
          bytes: non_neg_integer() | :infinity,
          now: integer(),
          logged: boolean()
        }

  @doc """
  A request on `channel`'s groups whose answer may carry `room` bytes; one
  that a replicated channel's log carries gives the time the leader stamped
  in it (`now`).
  """
  @spec new(Ringbus.Channel.t(), pos_integer() | :infinity, integer() | nil) :: t()
  def new(channel, room, logged_at \\ nil),
    do: %{
      channel: channel,
      table: Table.table(),
      c: channel.incarnation,
      bytes: bytes(room),
      now: logged_at || now(),
      logged: logged_at != nil
    }

  defp bytes(:infinity), do: :infinity
  defp bytes(room), do: div(room, 4)

  @doc "The group's row, or `{:error, :no_group}`."
  def fetch(at, group) do
    case Table.fetch(at.table, at.c, group) do
      {:ok, g} -> {:ok, g}
      :error -> {:error, :no_group}
    end
  end

  @doc """
  A position: the seq, if the incarnation it is of is the channel's;
  `:last` is the channel's newest seq, `:first` the one before its oldest,
  `{:time, ms}` the one before its first message at or after that time.
  """
  def position(at, :last), do: {:ok, Ring.next_seq(at.channel) - 1}
  def position(at, :first), do: {:ok, Ring.first_seq(at.channel) - 1}
  def position(_at, seq) when is_integer(seq), do: {:ok, seq}
  # The seq before the first message at or after system time `t` (ms).
  def position(at, {:time, t}) when is_integer(t), do: {:ok, Times.seek(at.channel, t) - 1}

  def position(at, {seq, mark}),
    do: if(fits?(mark, at.c), do: {:ok, seq}, else: {:error, :new_incarnation})

  @doc "An entry: its seq, or :none when it is of another incarnation."
  def entry(_at, seq) when is_integer(seq), do: {:ok, seq}
  def entry(at, {seq, mark}), do: if(fits?(mark, at.c), do: {:ok, seq}, else: :none)

  defp fits?({mask, bits}, incarnation), do: Bitwise.band(incarnation, mask) == bits

  @doc "The first of `messages` and those after it that fit in `bytes` of payloads."
  def cut(messages, :infinity), do: messages

  def cut([{_, payload} = first | rest], bytes),
    do: cut(rest, bytes - byte_size(payload), [first])

  def cut([], _bytes), do: []

  defp cut([{_, payload} = message | rest], bytes, acc) when byte_size(payload) <= bytes,
    do: cut(rest, bytes - byte_size(payload), [message | acc])

  defp cut(_rest, _bytes, acc), do: :lists.reverse(acc)

  @doc ~s(A count of "all": larger than any channel holds.)
  def all, do: 4_611_686_018_427_387_904

  @doc "The time every decision of a request takes: system ms."
  def now, do: System.system_time(:millisecond)
end
