defmodule Ringbus.Replica.Writer do
  @moduledoc false
  # The writes of one replicated channel on this node: pushes and pulls
  # come here, queue while the mailbox has more, and go to the Ra leader as
  # few commands as `Ringbus.Replica.Commands` makes of them (a group
  # commit), pipelined as `:ra.pipeline_command/4` does; Ra's events bring
  # the replies, which go back to each caller's alias. Reads never come here.
  #
  # Callers wait on a monitor alias with their own timeout
  # (`Ringbus.Replica.call/3`), so a late answer is dropped by the VM and a
  # caller never waits longer than it said, whatever Ra does. A command a
  # follower rejects goes again to the leader it names (it was not
  # appended). Requests wait here, as requests, while no leader is known
  # (this node's member is not leading and knows no other, or the send
  # could not go out; a follower that knows no leader drops commands
  # silently), tried again every @retry_ms; a request that has not left
  # when its caller is about to give up is answered `{:error, :node_busy}`,
  # certainly not done, as the cluster's link answers one that never left.
  #
  # Failover. A command sent to a leader that dies gets no event: it may
  # have been committed (the new leader applied it, as a follower or before
  # it could notify) or lost with the old leader's log. So every command
  # goes under this writer's tag, `{:tagged, {id, n, floor}, command}`
  # (`id` drawn at start, `n` the command's correlation, `floor` the oldest
  # one still unanswered), which the machine applies once and answers, when
  # sent again, with its first reply. A command is sent again, to the
  # leader this node's Ra names then, when the process of the leader it went
  # to goes down (a monitor: a dead node, a crashed or missing Ra server),
  # when no reply came within @resend_ms and another leader is named, and
  # after @resend_same_ms in any case. So a caller gets its answer from the
  # new leader as soon as there is one. A leader whose machine is older
  # (version 0, during an upgrade) refuses a tagged command whole with
  # `badarg`; that command goes again untagged to that leader, and is never
  # sent again after (its callers answer `{:error, :timeout}` if it dies).
  #
  # Commands whose callers have all given up are forgotten at the next tick,
  # so what this process holds is bounded by its waiting callers. Sends use
  # `[:noconnect, :nosuspend]`, as Ra's own do, so a silent node never
  # stalls this process. `counts` in its state (`:sys.get_state/1`) says how
  # it batches: commands made, requests in them, sends (resends included),
  # the most commands unanswered at once.

  use GenServer

  alias Ringbus.Replica.Commands

  # A flush at this many queued requests even if more keep coming.
  @max_queue 512
  # Commands sent and not yet applied, past which requests wait to go as one
  # command with those that come meanwhile (a group commit that grows with
  # the load and adds no wait when there is none). A command older than
  # @stalled_ms counts no more: it went to a leader that may have died.
  @max_in_flight 1
  @stalled_ms 100
  @tick_ms 250
  # How long to wait before trying again when no leader is known; a request
  # still unsent whose caller gives up within this and @margin_ms is
  # answered not done. The margin covers a retry timer that fires late on a
  # busy node: an answer that comes after the caller gave up is lost, and
  # the caller then says :timeout for a request that was never sent.
  @retry_ms 50
  @margin_ms 40
  # A command unanswered this long goes again if another leader is named
  # (checked every @check_ms while commands are out), and after
  # @resend_same_ms to the same one (a leader that stepped down and was
  # elected again, whose entry was dropped).
  @check_ms 100
  @resend_ms 300
  @resend_same_ms 1_000

  @spec start_link(map()) :: GenServer.on_start()
  def start_link(%{writer: writer} = replica),
    do: GenServer.start_link(__MODULE__, replica, name: writer)

  @doc false
  def child_spec(replica),
    do: %{
      id: {__MODULE__, replica.writer},
      start: {__MODULE__, :start_link, [replica]},
      restart: :transient
    }

  @impl true
  def init(replica) do
    {:ok, _} = :timer.send_interval(@tick_ms, :tick)

    {:ok,
     %{
       cluster: replica.cluster,
       local: replica.server,
       # This incarnation's tag: a restarted writer numbers from 0 again.
       id: :crypto.strong_rand_bytes(8) |> :binary.decode_unsigned(),
       leader: nil,
       queue: [],
       queued: 0,
       next: 0,
       # corr => {command, [{alias, deadline}], {sent_at_ms, leader} | :held, tagged?}
       # (held: sent once at least, and to be sent again)
       pending: %{},
       # leader => monitor ref, for the leaders commands went to
       monitors: %{},
       retry?: false,
       check?: false,
       counts: %{commands: 0, requests: 0, sends: 0, unanswered_max: 0}
     }}
  end

  @impl true
  def handle_info({:ringbus_replica, to, request, deadline}, state) do
    state = %{state | queue: [{{to, deadline}, request} | state.queue], queued: state.queued + 1}
    if state.queued >= @max_queue, do: {:noreply, flush(state)}, else: {:noreply, state, 0}
  end

  # The mailbox is empty: what has queued goes now, unless enough commands
  # are on their way; then it goes when one of them is applied.
  def handle_info(:timeout, state), do: {:noreply, flush_unless_busy(state)}

  def handle_info({:ra_event, from, {:applied, replies}}, state) do
    state =
      Enum.reduce(replies, %{state | leader: from}, fn {corr, reply}, state ->
        case Map.pop(state.pending, corr) do
          {{command, tos, _sent, tagged?}, pending} ->
            answer(%{state | pending: pending}, corr, {command, tos, tagged?}, reply, from)

          {nil, _pending} ->
            state
        end
      end)

    {:noreply, flush_unless_busy(state)}
  end

  def handle_info({:ra_event, from, {:rejected, {:not_leader, hint, corr}}}, state) do
    case hint do
      {_, _} when hint != from -> {:noreply, send_command(state, corr, hint)}
      _ -> {:noreply, hold(%{state | leader: nil}, corr)}
    end
  end

  def handle_info({:ra_event, _from, _other}, state), do: {:noreply, state}

  # The leader's process or node is gone: what went to it goes again, to
  # the next leader, as soon as one is known.
  def handle_info({:DOWN, ref, :process, _, _reason}, state) do
    case Enum.find(state.monitors, fn {_leader, r} -> r == ref end) do
      {leader, _} ->
        lost = for {corr, {_, _, {_, ^leader}, true}} <- state.pending, do: corr
        leader_now = if state.leader == leader, do: nil, else: state.leader
        state = %{state | monitors: Map.delete(state.monitors, leader), leader: leader_now}

        {:noreply, Enum.reduce(lost, state, &hold(&2, &1))}

      nil ->
        {:noreply, state}
    end
  end

  # Commands held for want of a leader go again, oldest first, then the
  # requests that wait; those no leader can take before their callers give
  # up are answered `:node_busy`.
  def handle_info(:retry, state) do
    held = for {corr, {_, _, :held, _}} <- state.pending, do: corr
    state = Enum.reduce(Enum.sort(held), %{state | retry?: false}, &send_command(&2, &1))
    {:noreply, state |> flush() |> expire()}
  end

  # Commands out too long go again, to the leader named now.
  def handle_info(:check, state) do
    now = now()
    leader = leader(state)

    stalled =
      for {corr, {_, _, {at, to}, true}} <- state.pending,
          now - at >= @resend_same_ms or (now - at >= @resend_ms and leader not in [nil, to]),
          do: corr

    state = Enum.reduce(Enum.sort(stalled), %{state | check?: false}, &send_command(&2, &1))
    {:noreply, arm_check(state)}
  end

  def handle_info(:tick, state) do
    now = now()

    pending =
      :maps.filter(
        fn _corr, {_command, tos, _, _} -> Enum.any?(tos, &waiting?(&1, now)) end,
        state.pending
      )

    # Monitors of leaders nothing waits on any more go.
    used = for {_, _, {_, to}, _} <- Map.values(pending), into: MapSet.new([state.leader]), do: to

    {drop, keep} = Enum.split_with(state.monitors, fn {leader, _} -> leader not in used end)
    for {_, ref} <- drop, do: Process.demonitor(ref, [:flush])

    # A command sent to a leader that died is never applied: what waits
    # behind it goes at the tick at the latest.
    {:noreply, flush(%{state | pending: pending, monitors: Map.new(keep)})}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp answer(state, corr, {command, tos, tagged?}, reply, from) do
    cond do
      # A leader of the older machine: the same command again, untagged.
      reply == {:error, :badarg} and tagged? ->
        pending = Map.put(state.pending, corr, {command, tos, :held, false})
        send_command(%{state | pending: pending}, corr, from)

      # The machine forgot this tag (past its window): the outcome is unknown.
      reply == {:error, :stale_tag} ->
        for {{to, _deadline}, answer} <- Commands.answers(command, tos, {:error, :timeout}),
            do: send(to, {to, answer})

        state

      true ->
        for {{to, _deadline}, answer} <- Commands.answers(command, tos, reply),
            do: send(to, {to, answer})

        state
    end
  end

  defp flush_unless_busy(%{queue: []} = state), do: state

  defp flush_unless_busy(state) do
    since = now() - @stalled_ms

    in_flight =
      :maps.fold(
        fn
          _corr, {_command, _tos, {at, _}, _}, n when at > since -> n + 1
          _corr, _, n -> n
        end,
        0,
        state.pending
      )

    if in_flight >= @max_in_flight, do: state, else: flush(state)
  end

  defp flush(%{queue: []} = state), do: state
  # Waiting for a leader: the retry flushes.
  defp flush(%{retry?: true} = state), do: state

  defp flush(state) do
    if leader(state) == nil do
      # Nothing to group for: the queue waits whole.
      arm_retry(state)
    else
      now = now()
      # Callers that have given up are not written for: their answer is unknown.
      requests = for {to, _} = r <- :lists.reverse(state.queue), waiting?(to, now), do: r
      state = send_new(Commands.group(requests), requests, %{state | queue: [], queued: 0})
      unanswered = max(state.counts.unanswered_max, map_size(state.pending))
      %{state | counts: %{state.counts | unanswered_max: unanswered}}
    end
  end

  # Commands go out oldest first. One that cannot (no leader, or the send
  # did not go out) goes back to the queue with all after it, as requests:
  # what never left this process can still be answered as not done.
  defp send_new([], _requests, state), do: state

  defp send_new([{command, tos} | rest], requests, state) do
    corr = state.next
    pending = Map.put(state.pending, corr, {command, tos, :held, true})
    n = length(tos)

    case transmit(%{state | next: corr + 1, pending: pending}, corr, leader(state)) do
      {:ok, state} ->
        counts = %{
          state.counts
          | commands: state.counts.commands + 1,
            requests: state.counts.requests + n
        }

        send_new(rest, Enum.drop(requests, n), %{state | counts: counts})

      :not_sent ->
        state = %{state | next: corr + 1, leader: nil}
        arm_retry(%{state | queue: :lists.reverse(requests), queued: length(requests)})
    end
  end

  # A command sent before goes again; held if it cannot.
  defp send_command(state, corr, to \\ nil) do
    with %{^corr => _} <- state.pending,
         {:ok, state} <- transmit(state, corr, to || leader(state)) do
      state
    else
      :not_sent -> hold(%{state | leader: nil}, corr)
      # Answered already, through another copy.
      _answered -> state
    end
  end

  defp transmit(_state, _corr, nil), do: :not_sent

  defp transmit(state, corr, {_, node} = leader) do
    {command, tos, _, tagged?} = Map.fetch!(state.pending, corr)
    # What `:ra.pipeline_command/4` sends, without its plain cast.
    sent = if tagged?, do: {:tagged, {state.id, corr, oldest(state)}, command}, else: command
    message = {:"$gen_cast", {:command, :normal, {:"$usr", sent, {:notify, corr, self()}}}}

    # `:noconnect` still queues a message while another process connects
    # (the cluster's reconnections): only a node connected now is sent to,
    # so that a send that did not go out certainly did not.
    with true <- node == node() or :lists.member(node, :erlang.nodes()),
         :ok <- :erlang.send(leader, message, [:noconnect, :nosuspend]) do
      pending = Map.put(state.pending, corr, {command, tos, {now(), leader}, tagged?})
      counts = %{state.counts | sends: state.counts.sends + 1}
      state = %{state | pending: pending, leader: leader, counts: counts}
      {:ok, state |> monitor(leader) |> arm_check()}
    else
      _not_sent -> :not_sent
    end
  end

  # Requests still here, for want of a leader, whose callers give up before
  # the next retry: never sent, so certainly not done.
  defp expire(%{retry?: false} = state), do: state

  defp expire(state) do
    soon = now() + @retry_ms + @margin_ms

    {expiring, queue} =
      Enum.split_with(state.queue, fn {{_to, deadline}, _} -> deadline <= soon end)

    for {{to, _deadline}, _request} <- expiring, do: send(to, {to, {:error, :node_busy}})
    %{state | queue: queue, queued: state.queued - length(expiring)}
  end

  # The oldest command still unanswered: none older is ever sent again.
  defp oldest(state),
    do: :maps.fold(fn corr, _, acc -> min(corr, acc) end, state.next, state.pending)

  # Monitored only once a send went out, so the node is connected: a
  # monitor never sets up a connection.
  defp monitor(state, leader) do
    if Map.has_key?(state.monitors, leader),
      do: state,
      else: %{state | monitors: Map.put(state.monitors, leader, Process.monitor(leader))}
  end

  defp arm_check(%{check?: true} = state), do: state

  defp arm_check(state) do
    if Enum.any?(state.pending, &match?({_, {_, _, {_, _}, _}}, &1)) do
      Process.send_after(self(), :check, @check_ms)
      %{state | check?: true}
    else
      state
    end
  end

  defp hold(state, corr) do
    case state.pending do
      %{^corr => {command, tos, _, tagged?}} ->
        arm_retry(%{state | pending: %{state.pending | corr => {command, tos, :held, tagged?}}})

      # Answered already, through another copy.
      _ ->
        state
    end
  end

  defp arm_retry(%{retry?: true} = state), do: state

  defp arm_retry(state) do
    Process.send_after(self(), :retry, @retry_ms)
    %{state | retry?: true}
  end

  # The leader as this node's Ra member last heard of it (an ETS read),
  # unless that is this member and it is not leading (yet, or any more);
  # else the last leader that answered.
  defp leader(state) do
    case :ra_leaderboard.lookup_leader(state.cluster) do
      {local, _} = leader when leader == state.local ->
        cond do
          role(local) == :leader -> leader
          state.leader != state.local -> state.leader
          true -> nil
        end

      {_, _} = leader ->
        leader

      _ ->
        state.leader
    end
  end

  defp role(name) do
    :ets.lookup_element(:ra_state, name, 2)
  rescue
    ArgumentError -> nil
  end

  defp waiting?({_to, deadline}, now), do: deadline > now
  defp now, do: System.monotonic_time(:millisecond)
end
