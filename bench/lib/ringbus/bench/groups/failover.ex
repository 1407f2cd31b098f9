defmodule Ringbus.Bench.Groups.Failover do
  @moduledoc false
  # Run on a member of a replicated channel that is not its leader: a
  # producer pushes one message at a time (100 ms timeout each, a few ms
  # apart) and a consumer of a group fetches and acks, both on this node;
  # then `kill -9` of the leader's node, and the time to the first
  # delivery of a message pushed after the kill. Both loops stop at the
  # deadline.

  alias Ringbus.Bench.Groups.Meter
  alias Ringbus.Bench.Replication.Samples

  @doc """
  Kills OS process `leader_os_pid` once both loops run, and returns the ms
  from just before the kill to the first delivery of a message pushed
  after it (nil if none within `ms`), with the pushes and fetches that
  failed meanwhile.
  """
  @spec run(Ringbus.name(), binary(), String.t(), pos_integer()) :: %{
          ms: float() | nil,
          push_errors: non_neg_integer(),
          fetch_errors: non_neg_integer()
        }
  def run(channel, group, leader_os_pid, ms) do
    parent = self()
    deadline = Samples.now() + ms * 1_000
    # 0 until the kill, then its OS time (µs); and the two error counts.
    state = :atomics.new(3, signed: true)
    {feeder, _} = spawn_monitor(fn -> feed(channel, state, deadline) end)
    {watcher, _} = spawn_monitor(fn -> watch(channel, group, state, deadline, parent) end)

    # Both loops run a while before the kill, so that it interrupts a flow.
    receive after: (300 -> :ok)
    # Timed from just before the kill; only a message stamped after `kill`
    # returned counts, as the leader may commit others while it runs.
    killed_at = System.os_time(:microsecond)
    {_, 0} = System.cmd("kill", ["-KILL", leader_os_pid])
    :ok = :atomics.put(state, 1, System.os_time(:microsecond))

    result =
      receive do
        {:delivered, at} -> (at - killed_at) / 1_000
      after
        ms -> nil
      end

    for pid <- [feeder, watcher], do: Process.exit(pid, :kill)
    %{ms: result, push_errors: :atomics.get(state, 2), fetch_errors: :atomics.get(state, 3)}
  end

  defp feed(channel, state, deadline) do
    if Samples.now() < deadline do
      case Ringbus.push(channel, hd(Meter.payloads(16, 1)), timeout: 100) do
        {:ok, _} -> :ok
        _error -> :atomics.add(state, 2, 1)
      end

      receive after: (5 -> :ok)
      feed(channel, state, deadline)
    end
  end

  defp watch(channel, group, state, deadline, parent) do
    if Samples.now() < deadline do
      case Ringbus.Groups.fetch(channel, group, "failover", 100, timeout: 100) do
        {:ok, messages} ->
          if after_kill?(messages, :atomics.get(state, 1)) do
            send(parent, {:delivered, System.os_time(:microsecond)})
          else
            if messages != [],
              do: Ringbus.Groups.ack(channel, group, for({seq, _, _} <- messages, do: seq))

            watch(channel, group, state, deadline, parent)
          end

        _error ->
          :atomics.add(state, 3, 1)
          receive after: (5 -> :ok)
          watch(channel, group, state, deadline, parent)
      end
    end
  end

  defp after_kill?(_messages, 0), do: false

  defp after_kill?(messages, killed_at),
    do: Enum.any?(messages, fn {_seq, p, _n} -> Meter.pushed_at(p) >= killed_at end)
end
