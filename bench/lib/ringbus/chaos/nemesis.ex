defmodule Ringbus.Chaos.Nemesis do
  @moduledoc """
  Faults on real nodes (`Ringbus.Test.Nodes`), on a seeded
  schedule, one at a time, each healed before the next:

    * `{:stall, node, ms}` - SIGSTOP, then SIGCONT `ms` later: short
      stalls of 20–200 ms (a call times out, the node stays a member) and
      long ones of 1–3 s (around `net_ticktime`, the node may be declared
      down);
    * `{:kill, node, ms}` - SIGKILL, and the node started again `ms` after
      its OS process is gone: its channels come back empty;
    * `{:partition, a, b, ms}` - the two nodes disconnected, and each
      given a wrong cookie for the other (`:erlang.set_cookie/2`) so that
      their reconnection attempts fail the handshake, for `ms`; then the
      cookies are restored and they reconnect by themselves.

  For replicated channels (`schedule_replicated/4`), the nodes are the
  members and a step names the channel whose leader it strikes, found when
  the step runs (`Ringbus.info/1` on each member):

    * `{:stall_leader, channel, ms}` - SIGSTOP of the leader's node, then
      SIGCONT `ms` later: long enough for the others to elect another;
    * `{:kill_leader, channel, ms}` - SIGKILL of the leader's node, started
      again on the same data dir `ms` after it is gone;
    * `{:partition_leader, channel, ms}` - the leader's node cut from every
      other member (as `{:partition, ...}`) for `ms`;
    * `{:restart_all, ms}` - every node killed, all started again `ms`
      later, and joined again.

  `schedule/4` is pure: the same seed gives the same steps. `run/3` takes
  at most the schedule's time plus what the restarts take, and
  `Ringbus.Chaos` stops every node by its peer at the end.
  """

  alias Ringbus.Test.Nodes

  @type step ::
          {:stall, atom(), pos_integer()}
          | {:kill, atom(), pos_integer()}
          | {:partition, atom(), atom(), pos_integer()}
          | {:pause, pos_integer()}
          | {:stall_leader, term(), pos_integer()}
          | {:kill_leader, term(), pos_integer()}
          | {:partition_leader, term(), pos_integer()}
          | {:restart_all, pos_integer()}

  @doc """
  The steps for `ms` of faults on `names` (the nodes' names), killing only
  `killable`, from `seed`: each fault is followed by a pause of 200–1,000
  ms. At most 1,000 steps.
  """
  @spec schedule(integer(), [atom()], [atom()], pos_integer()) :: [step()]
  def schedule(seed, names, killable, ms) do
    :rand.seed(:exsss, {seed, 0, 0})
    steps(fn -> fault(names, killable) end, fn -> 200 + :rand.uniform(800) end, ms, 1_000, [])
  end

  defp fault(names, killable) do
    r = :rand.uniform()

    cond do
      r < 0.35 -> {:stall, Enum.random(names), 20 + :rand.uniform(180)}
      r < 0.55 -> {:stall, Enum.random(names), 1_000 + :rand.uniform(2_000)}
      r < 0.75 and killable != [] -> {:kill, Enum.random(killable), 300 + :rand.uniform(1_200)}
      true -> partition(names)
    end
  end

  # Faults drawn by `fault`, each followed by a pause drawn by `pause`, until
  # `left` ms are used or `count` steps made.
  defp steps(_fault, _pause, left, count, acc) when left <= 0 or count <= 0,
    do: Enum.reverse(acc)

  defp steps(fault, pause, left, count, acc) do
    f = fault.()
    p = {:pause, pause.()}
    steps(fault, pause, left - duration(f) - elem(p, 1), count - 2, [p, f | acc])
  end

  @doc """
  The steps for `ms` of faults on replicated channels `channels` whose
  members are `names`, from `seed`: stalls of any member, stalls, kills
  and partitions of a channel's leader, and restarts of every node; each
  followed by a pause of 500–1,500 ms. At most 1,000 steps.
  """
  @spec schedule_replicated(integer(), [atom()], [term()], pos_integer()) :: [step()]
  def schedule_replicated(seed, names, channels, ms) do
    :rand.seed(:exsss, {seed, 0, 1})
    fault = fn -> replicated_fault(names, channels) end
    steps(fault, fn -> 500 + :rand.uniform(1_000) end, ms, 1_000, [])
  end

  defp replicated_fault(names, channels) do
    r = :rand.uniform()

    cond do
      r < 0.15 -> {:stall, Enum.random(names), 20 + :rand.uniform(180)}
      r < 0.25 -> {:stall, Enum.random(names), 1_000 + :rand.uniform(2_000)}
      r < 0.35 -> {:stall_leader, Enum.random(channels), 1_000 + :rand.uniform(2_000)}
      r < 0.62 -> {:kill_leader, Enum.random(channels), 300 + :rand.uniform(1_200)}
      r < 0.88 -> {:partition_leader, Enum.random(channels), 1_000 + :rand.uniform(2_000)}
      true -> {:restart_all, 300 + :rand.uniform(700)}
    end
  end

  defp partition(names) do
    [a, b] = Enum.take_random(names, 2)
    {:partition, a, b, 1_000 + :rand.uniform(2_000)}
  end

  defp duration({:pause, ms}), do: ms
  defp duration({:stall, _, ms}), do: ms
  defp duration({:kill, _, ms}), do: ms
  defp duration({:partition, _, _, ms}), do: ms
  defp duration({:stall_leader, _, ms}), do: ms
  defp duration({:kill_leader, _, ms}), do: ms
  defp duration({:partition_leader, _, ms}), do: ms
  defp duration({:restart_all, ms}), do: ms

  @doc """
  Runs `steps` on `nodes` (by name), stopping early at `until`
  (`System.os_time(:millisecond)`). Returns the nodes as they are now
  (restarted ones have a new peer), the restart times by name
  (`System.os_time(:microsecond)`, taken before each start) and the steps
  done, with the time each began. `on_restart` is called with each node
  started again.
  """
  @spec run([step()], %{atom() => Nodes.t()}, integer(), (Nodes.t() -> term())) ::
          {%{atom() => Nodes.t()}, %{atom() => [integer()]}, [{integer(), step()}]}
  def run(steps, nodes, until, on_restart \\ fn _ -> :ok end) do
    Enum.reduce_while(steps, {nodes, %{}, []}, fn step, {nodes, restarts, done} ->
      if System.os_time(:millisecond) >= until do
        {:halt, {nodes, restarts, done}}
      else
        at = System.os_time(:microsecond)
        {nodes, restarts} = apply_step(step, nodes, restarts, on_restart)
        {:cont, {nodes, restarts, [{at, step} | done]}}
      end
    end)
    |> then(fn {nodes, restarts, done} -> {nodes, restarts, Enum.reverse(done)} end)
  end

  defp apply_step({:kill, name, ms}, nodes, restarts, on_restart) do
    node = Map.fetch!(nodes, name)
    Nodes.signal(node, :kill)
    :ok = await_gone(node.os_pid, 100)
    Process.sleep(ms)
    at = System.os_time(:microsecond)
    node = Nodes.restart(node)
    on_restart.(node)
    {Map.put(nodes, name, node), Map.update(restarts, name, [at], &(&1 ++ [at]))}
  end

  defp apply_step({:kill_leader, ch, ms}, nodes, restarts, on_restart),
    do: apply_step({:kill, leader(nodes, ch), ms}, nodes, restarts, on_restart)

  defp apply_step({:restart_all, ms}, nodes, restarts, on_restart) do
    all = Map.values(nodes)
    for node <- all, do: Nodes.signal(node, :kill)
    for node <- all, do: :ok = await_gone(node.os_pid, 100)
    Process.sleep(ms)
    at = System.os_time(:microsecond)

    started =
      all
      |> Enum.map(&Task.async(fn -> Nodes.restart(&1) end))
      |> Enum.map(&Task.await(&1, 60_000))

    Enum.each(started, on_restart)
    # No node remembers the others: each is joined again (the links come
    # back or not; the run waits on them when it heals).
    Nodes.join(started, 30_000)

    {Map.new(started, &{&1.name, &1}),
     Enum.reduce(started, restarts, &Map.update(&2, &1.name, [at], fn ts -> ts ++ [at] end))}
  end

  defp apply_step(step, nodes, restarts, _on_restart), do: apply_step(step, nodes, restarts)

  defp apply_step({:stall_leader, ch, ms}, nodes, restarts),
    do: apply_step({:stall, leader(nodes, ch), ms}, nodes, restarts)

  defp apply_step({:partition_leader, ch, ms}, nodes, restarts) do
    leader = Map.fetch!(nodes, leader(nodes, ch))
    others = Map.values(nodes) -- [leader]
    for other <- others, do: cut(leader, other)
    Process.sleep(ms)
    for other <- others, do: heal(leader, other)
    {nodes, restarts}
  end

  defp apply_step({:pause, ms}, nodes, restarts) do
    Process.sleep(ms)
    {nodes, restarts}
  end

  defp apply_step({:stall, name, ms}, nodes, restarts) do
    node = Map.fetch!(nodes, name)
    Nodes.signal(node, :stop)
    Process.sleep(ms)
    Nodes.signal(node, :cont)
    {nodes, restarts}
  end

  defp apply_step({:partition, a, b, ms}, nodes, restarts) do
    %{^a => na, ^b => nb} = nodes
    cut(na, nb)
    Process.sleep(ms)
    heal(na, nb)
    {nodes, restarts}
  end

  @doc "Disconnects two nodes and makes each refuse the other's handshakes."
  @spec cut(Nodes.t(), Nodes.t()) :: :ok
  def cut(a, b) do
    # Distinct wrong cookies: one shared by both sides would let them in.
    true = Nodes.call(a, :erlang, :set_cookie, [b.node, :"wrong_#{a.name}"])
    true = Nodes.call(b, :erlang, :set_cookie, [a.node, :"wrong_#{b.name}"])
    Nodes.call(a, :erlang, :disconnect_node, [b.node])
    Nodes.call(b, :erlang, :disconnect_node, [a.node])
    :ok
  end

  @doc "Restores the cookies `cut/2` changed; the nodes then reconnect by themselves."
  @spec heal(Nodes.t(), Nodes.t()) :: :ok
  def heal(a, b) do
    true = Nodes.call(a, :erlang, :set_cookie, [b.node, a.opts[:cookie]])
    true = Nodes.call(b, :erlang, :set_cookie, [a.node, b.opts[:cookie]])
    :ok
  end

  @doc """
  The name of the node whose member leads replicated channel `ch`, by
  `Ringbus.info/1` on each node; while none claims it (an election), the
  first node by name.
  """
  @spec leader(%{atom() => Nodes.t()}, term()) :: atom()
  def leader(nodes, ch) do
    names = nodes |> Map.keys() |> Enum.sort()

    Enum.find(names, hd(names), fn name ->
      match?({:ok, %{role: :leader}}, info(Map.fetch!(nodes, name), ch))
    end)
  end

  defp info(node, ch) do
    Nodes.call(node, Ringbus, :info, [ch], 5_000)
  catch
    _, _ -> {:error, :unreachable}
  end

  # Polls, 10 ms apart, until the OS process is gone: a killed node's
  # answers are all in before it is started again.
  defp await_gone(_os_pid, 0), do: {:error, :still_running}

  defp await_gone(os_pid, tries) do
    case System.cmd("kill", ["-0", os_pid], stderr_to_stdout: true) do
      {_, 0} -> Process.sleep(10) && await_gone(os_pid, tries - 1)
      _ -> :ok
    end
  end
end
