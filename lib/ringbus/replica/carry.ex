defmodule Ringbus.Replica.Carry do
  @moduledoc false
  # What a replicated channel's machine (`Ringbus.Replica.Machine`) decided,
  # carried out on this node's ring (`Ringbus.Channel.Ring`'s `*_decided`
  # functions) and groups, in log order on every member.

  alias Ringbus.Channel.{Ids, Ring, Times}
  alias Ringbus.{Group, Store}

  @doc """
  Carries `ops` out on this node's ring of `channel`, in order: the
  command's reply, as the ops complete it (a pull's messages).
  """
  @spec out(term(), list(), term(), integer()) :: term()
  def out(channel, ops, reply, now) do
    case Store.fetch(channel) do
      {:ok, ch} -> Enum.reduce(ops, reply, &carry(ch, &1, &2, now))
      # The channel is not on this node (yet): the log still holds it.
      {:error, :no_channel} -> pulled_reply(reply, [])
    end
  end

  # Each request alone: one that cannot be carried out answers badarg,
  # alike on every member, and takes no other down.
  defp carry(ch, {:groups, requests}, _reply, now) do
    {:groups,
     for request <- requests do
       try do
         {room, request} = request
         Group.decided(ch, request, room, now)
       rescue
         # So too a request its version refuses (`Versions`), not a pair.
         _ in [FunctionClauseError, MatchError, CaseClauseError, ArgumentError] ->
           {:error, :badarg}
       end
     end}
  end

  # A trim's messages are thrown away: taken without reading them.
  defp carry(ch, {:pull, first, count}, {:trimmed, _first, _count} = reply, _now) do
    Ring.take_decided(ch, first, count)
    pulled_reply(reply, [])
  end

  defp carry(ch, {:pull, first, count}, reply, _now),
    do: pulled_reply(reply, Ring.pull_decided(ch, first, count))

  # The other ops leave the reply as it is.
  defp carry(ch, op, reply, now) do
    effect(ch, op, now)
    reply
  end

  # Stored at the command's stamp, on this node's clock: every member gives
  # the messages the same time, and the IDs decided in the log (before
  # machine version 6, none: this ring stamps its own, as those versions did).
  defp effect(ch, {:put, first, payloads, count, bytes, nil}, now),
    do: Ring.put_decided(ch, first, payloads, count, bytes, Times.at_of(now))

  defp effect(ch, {:put, first, payloads, count, bytes, id}, now),
    do: Ring.put_decided(ch, first, payloads, count, bytes, {Times.at_of(now), id})

  defp effect(ch, {:last_id, id}, _now), do: Ids.set(ch.ids, id)
  defp effect(ch, {:expire, bound}, _now), do: Ring.expire_decided(ch, bound)
  defp effect(ch, {:drop, tail}, _now), do: Ring.drop_decided(ch, tail)
  defp effect(ch, {:delete, seqs}, _now), do: {:ok, _} = Ring.delete(ch, seqs)
  defp effect(ch, {:rejected, total}, _now), do: Ring.rejected_decided(ch, total)

  defp pulled_reply({:pulled, _first, _count}, messages), do: {:ok, messages}
  defp pulled_reply({:trimmed, _first, count}, _messages), do: {:ok, count}

  defp pulled_reply({:groups, requests}, _messages),
    do: {:groups, for(_ <- requests, do: {:error, :no_channel})}

  defp pulled_reply(reply, _messages), do: reply
end
