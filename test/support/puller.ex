defmodule Ringbus.Test.Puller do
  @moduledoc """
  A consumer that runs on a node and pulls from a channel one message at a
  time, for the tests that kill nodes under it: every attempt is recorded
  with how long it took, and what it took.

      pid = Nodes.call(node, Puller, :start, ["orders"])
      ...
      %{attempts: attempts, pulled: pulled} = Nodes.call(node, Puller, :stop, [pid])
  """

  @doc "Starts the puller (not linked to the caller, which `:peer.call/5` ends)."
  @spec start(term()) :: pid()
  def start(channel), do: spawn(fn -> loop(%{channel: channel, attempts: []}) end)

  @doc """
  Stops the puller after its pull in progress and returns `attempts`, each
  `{result, ms}` oldest first, and `pulled`, each `{seq, payload}` taken.
  """
  @spec stop(pid(), timeout()) :: %{attempts: list(), pulled: list()}
  def stop(pid, timeout \\ 30_000) do
    ref = Process.monitor(pid)
    send(pid, {:stop, self(), ref})

    receive do
      {^ref, result} -> result
      {:DOWN, ^ref, _, _, reason} -> exit({:puller_died, reason})
    after
      timeout -> exit(:puller_stuck)
    end
  end

  defp loop(state) do
    receive do
      {:stop, from, ref} ->
        attempts = Enum.reverse(state.attempts)
        pulled = for {{:ok, seq, payload}, _ms} <- attempts, do: {seq, payload}
        send(from, {ref, %{attempts: attempts, pulled: pulled}})
    after
      0 -> state |> pull() |> loop()
    end
  end

  defp pull(state) do
    started = System.monotonic_time(:millisecond)

    result =
      try do
        Ringbus.pull(state.channel)
      catch
        kind, reason -> {:raised, kind, reason}
      end

    ms = System.monotonic_time(:millisecond) - started
    # An empty channel is asked again a little later, not in a busy loop.
    if result == :empty, do: Process.sleep(5)
    %{state | attempts: [{result, ms} | state.attempts]}
  end
end
