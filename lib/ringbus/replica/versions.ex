defmodule Ringbus.Replica.Versions do
  @moduledoc false
  # What each machine version in effect makes of a command
  # (`Ringbus.Replica.Machine`): a member of a newer version applies a
  # command as the version in effect runs it, so every member applies it
  # alike, whatever code each runs. Ra elects no member older than the
  # version in effect. Pure.
  #
  # Version 1 adds {:tagged, ...}, version 2 {:groups, ...}, version 3 expiry
  # under max_age (and {:timeout, :expire}), version 4 a trim's `:run` (the
  # trim of a run of pushes, `Ringbus.Channel.Trim.of_run/2`), version 5 a
  # group's `:ack_fetch` (acks and a fetch in one request), version 6 Redis
  # stream IDs decided in the log (`Ringbus.Replica.StreamIds`: puts carry
  # them, and {:push_id, ...} and {:set_id, id}), version 7 {:delete, seqs}.

  @version 7

  @doc "The newest version."
  @spec current() :: pos_integer()
  def current, do: @version

  @doc """
  `command` as `version` runs it: the same command, or one the machine
  refuses as that version refuses it (`{:unknown, version}`, badarg).
  """
  @spec command(non_neg_integer(), term()) :: term()
  def command(version, command) when version >= @version, do: command

  # Under version 0, in effect until a leader of version 1 commits its first
  # entry, a tagged command is refused whole, on every member alike; the
  # writer sends it again untagged.
  def command(0, {:tagged, _tag, _command}), do: {:unknown, 0}

  # A tagged command is refused under its tag, so a resend gets the refusal.
  def command(version, {:tagged, tag, command}), do: {:tagged, tag, command(version, command)}

  def command(1, {:groups, _}), do: {:unknown, 1}

  # Under a version before 6, commands on IDs are refused whole, as those
  # versions refuse a command they do not know.
  def command(version, {:push_id, _, _}) when version < 6, do: {:unknown, version}

  def command(version, {:set_id, _}) when version < 6, do: {:unknown, version}

  # Under a version before 7, a delete is refused, badarg, on every member alike.
  def command(version, {:delete, _}) when version < 7, do: {:unknown, version}

  # Under a version before 5, an `:ack_fetch` is refused as version 4's
  # groups refuse a request they do not know: badarg, that request alone.
  def command(version, {:groups, requests}) when version < 5 and is_list(requests),
    do: {:groups, Enum.map(requests, &before_5/1)}

  # Under a version before 4, a trim is one push's, as those versions run it.
  def command(version, {:trim, trim}) when version < 4 and is_map(trim),
    do: {:trim, Map.delete(trim, :run)}

  def command(_version, command), do: command

  defp before_5({_room, {:ack_fetch, _, _}}), do: :refused
  defp before_5(request), do: request
end
