defmodule Ringbus.Group.Logged do
  @moduledoc false
  # A replicated channel's group requests: each goes through the channel's
  # log (`log`, a function the operation path gives, which sends a request
  # to the channel's writer and answers what the machine's
  # `Ringbus.Group.decided/4` answered), and what the log cannot do is done
  # here, on the member that sends it:
  #
  #   * A fetch that finds nothing and may wait sends again whenever this
  #     member's ring wakes it (a push applied here, a nack) or the earliest
  #     entry this member knows of comes due, until its deadline. The log
  #     carries fetches that deliver, never one that waits.
  #   * A fetch that carries acks (`:ack_fetch`) sends them with its first
  #     try, so a consumer's loop waits on one commit a batch; a wait after
  #     it sends plain fetches. Under a machine version that refuses the
  #     combined request (`badarg`, alike on every member), the ack and the
  #     fetch go one after the other, as two commands.
  #   * The process that fetches for a consumer (or that a push
  #     subscription fetches for) is watched from this node
  #     (`Ringbus.Group.TableOwner.own_logged/3`); when it exits, the
  #     `:orphan` request goes through the log, so every member makes the
  #     consumer's entries due at once, alike.

  alias Ringbus.Channel
  alias Ringbus.Channel.Ring
  alias Ringbus.Group.{At, Fetch, Redelivery, Table, TableOwner}

  @typedoc "Sends a request through the channel's log and answers the machine's answer."
  @type log :: (Ringbus.Group.request() -> term())

  @doc "Runs `request` on `channel`'s groups through `log`; waits here if it is a fetch that may."
  @spec run(Channel.t(), Ringbus.Group.request(), log()) :: term()
  def run(channel, {:fetch, _, _, _, _, wait} = request, log) when wait > 0 do
    answer = fetch(channel, request, log, At.now() + wait)
    Fetch.disarm(channel)
    watch(channel, request, answer, log)
  end

  def run(channel, {:ack_fetch, refs, {:fetch, group, c, owner, max, wait} = fetch}, log) do
    deadline = At.now() + wait
    # Armed before the request, so that a push applied after it wakes us.
    Ring.arm_wake(channel)

    case log.({:ack_fetch, refs, {:fetch, group, c, owner, max, 0}}) do
      {:ok, {acked, {[], _dead_letter, []} = none}} ->
        answer =
          with {:ok, fetched} <- later(channel, fetch, log, deadline, {:ok, none}),
               do: {:ok, {acked, fetched}}

        Fetch.disarm(channel)
        watch(channel, fetch, answer, log)

      {:error, :badarg} ->
        Fetch.disarm(channel)

        with {:ok, acked} <- log.({:ack, group, refs}),
             {:ok, fetched} <- run(channel, fetch, log),
             do: {:ok, {acked, fetched}}

      answer ->
        Fetch.disarm(channel)
        watch(channel, fetch, answer, log)
    end
  end

  def run(channel, request, log), do: watch(channel, request, log.(request), log)

  defp fetch(channel, {:fetch, group, consumer, owner, max, _wait} = request, log, deadline) do
    # Armed before the request, so that a push applied after it wakes us.
    Ring.arm_wake(channel)

    case log.({:fetch, group, consumer, owner, max, 0}) do
      {:ok, {[], _dead_letter, []}} = none -> later(channel, request, log, deadline, none)
      answer -> answer
    end
  end

  # Nothing yet: a wake, or the earliest due time, then another try.
  defp later(channel, {:fetch, group, _, _, _, _} = request, log, deadline, none) do
    now = At.now()

    if now < deadline do
      receive do
        :ringbus_wake -> :ok
      after
        sleep(channel, group, deadline, now) -> :ok
      end

      fetch(channel, request, log, deadline)
    else
      none
    end
  end

  # Until the deadline, or the earliest due time this member's rows know.
  defp sleep(%Channel{incarnation: c}, group, deadline, now) do
    t = Table.table()

    case Table.fetch(t, c, group) do
      {:ok, g} -> max(Redelivery.sleep(deadline, Table.next_due(t, c, group), g.config, now), 1)
      :error -> max(deadline - now, 1)
    end
  end

  # A process that took entries for a consumer is watched from here.
  defp watch(%Channel{incarnation: c}, request, {:ok, _} = answer, log) do
    case owner(request) do
      {group, consumer, owner} when is_pid(owner) ->
        orphan = fn -> log.({:orphan, group, consumer, owner}) end
        TableOwner.own_logged(owner, {c, group, consumer}, orphan)

      _ ->
        :ok
    end

    answer
  end

  defp watch(_channel, _request, answer, _log), do: answer

  defp owner({:fetch, group, consumer, owner, _, _}), do: {group, consumer, owner}
  # A push subscription (`Ringbus.Group.Push`) fetches for its subscriber.
  defp owner({:push_fetch, group, consumer, owner, _}), do: {group, consumer, owner}
  defp owner({:reclaim, group, consumer, owner, _}), do: {group, consumer, owner}
  defp owner({:reclaim_idle, group, consumer, owner, _, _}), do: {group, consumer, owner}
  defp owner(_request), do: nil
end
