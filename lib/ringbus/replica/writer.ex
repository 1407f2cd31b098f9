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
  # appended). A command waits here, unsent, while no leader is known (this
  # node's member is not leading and knows no other, or the send could not
  # go out): a follower that knows no leader drops commands silently. One
  # sent to a leader that then dies or steps down gets no event, and its
  # callers answer `{:error, :timeout}`: unknown, as it may commit under the
  # next leader. Commands whose callers have all given up are forgotten at
  # the next tick, so what this process holds is bounded by its waiting
  # callers. Sends use `[:noconnect, :nosuspend]`, as Ra's own do, so a
  # silent node never stalls this process.

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
  # How long to wait before trying again when no leader is known.
  @retry_ms 50

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
       leader: nil,
       queue: [],
       queued: 0,
       next: 0,
       # corr => {command, [{alias, deadline}], sent at (ms) or false}
       pending: %{},
       retry?: false
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
    pending =
      Enum.reduce(replies, state.pending, fn {corr, reply}, pending ->
        case Map.pop(pending, corr) do
          {{command, tos, _sent?}, pending} ->
            for {{to, _deadline}, answer} <- Commands.answers(command, tos, reply),
                do: send(to, {to, answer})

            pending

          {nil, pending} ->
            pending
        end
      end)

    {:noreply, flush_unless_busy(%{state | pending: pending, leader: from})}
  end

  def handle_info({:ra_event, from, {:rejected, {:not_leader, hint, corr}}}, state) do
    case hint do
      {_, _} when hint != from -> {:noreply, send_command(state, corr, hint)}
      _ -> {:noreply, hold(%{state | leader: nil}, corr)}
    end
  end

  def handle_info({:ra_event, _from, _other}, state), do: {:noreply, state}

  # Commands held for want of a leader go again, oldest first.
  def handle_info(:retry, state) do
    held = for {corr, {_, _, false}} <- state.pending, do: corr
    state = %{state | retry?: false}
    {:noreply, Enum.reduce(Enum.sort(held), state, &send_command(&2, &1))}
  end

  def handle_info(:tick, state) do
    now = now()

    pending =
      :maps.filter(
        fn _corr, {_command, tos, _} -> Enum.any?(tos, &waiting?(&1, now)) end,
        state.pending
      )

    # A command sent to a leader that died is never applied: what waits
    # behind it goes at the tick at the latest.
    {:noreply, flush(%{state | pending: pending})}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp flush_unless_busy(%{queue: []} = state), do: state

  defp flush_unless_busy(state) do
    since = now() - @stalled_ms

    in_flight =
      :maps.fold(
        fn _corr, {_command, _tos, sent}, n ->
          if is_integer(sent) and sent > since, do: n + 1, else: n
        end,
        0,
        state.pending
      )

    if in_flight >= @max_in_flight, do: state, else: flush(state)
  end

  defp flush(%{queue: []} = state), do: state

  defp flush(state) do
    now = now()
    # Callers that have given up are not written for: their answer is unknown.
    requests = for {to, _} = r <- :lists.reverse(state.queue), waiting?(to, now), do: r
    state = %{state | queue: [], queued: 0}

    Enum.reduce(Commands.group(requests), state, fn {command, tos}, state ->
      corr = state.next
      pending = Map.put(state.pending, corr, {command, tos, false})
      send_command(%{state | next: corr + 1, pending: pending}, corr)
    end)
  end

  defp send_command(state, corr, to \\ nil) do
    case {state.pending, to || leader(state)} do
      {%{^corr => {command, tos, _}}, {_, _} = leader} ->
        # What `:ra.pipeline_command/4` sends, without its plain cast.
        message = {:"$gen_cast", {:command, :normal, {:"$usr", command, {:notify, corr, self()}}}}

        case :erlang.send(leader, message, [:noconnect, :nosuspend]) do
          :ok ->
            pending = Map.put(state.pending, corr, {command, tos, now()})
            %{state | pending: pending, leader: leader}

          _not_sent ->
            hold(%{state | leader: nil}, corr)
        end

      {%{^corr => _}, nil} ->
        hold(state, corr)

      _answered ->
        state
    end
  end

  defp hold(state, corr) do
    pending = Map.update!(state.pending, corr, fn {command, tos, _} -> {command, tos, false} end)
    unless state.retry?, do: Process.send_after(self(), :retry, @retry_ms)
    %{state | pending: pending, retry?: true}
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
