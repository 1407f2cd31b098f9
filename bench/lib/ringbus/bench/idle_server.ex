defmodule Ringbus.Bench.IdleServer do
  @moduledoc """
  References for the cost of starting processes in a burst: a `GenServer`
  that does nothing but stop when the process it was given exits (the least a
  started process can be), and `spawn_watching/1`, the same without
  `GenServer` or a reply to wait for.
  """

  use GenServer

  @doc """
  Spawns a plain process, not a `GenServer`, that only waits for `owner` to
  exit, and returns without waiting for it to run: the least a process start
  can cost.
  """
  @spec spawn_watching(pid()) :: pid()
  def spawn_watching(owner) do
    spawn(fn ->
      ref = Process.monitor(owner)

      receive do
        {:DOWN, ^ref, :process, _, _} -> :ok
      end
    end)
  end

  @impl true
  def init(owner) when is_pid(owner) do
    Process.monitor(owner)
    {:ok, owner}
  end

  @impl true
  def handle_info({:DOWN, _ref, :process, owner, _reason}, owner), do: {:stop, :normal, owner}
  def handle_info(_other, owner), do: {:noreply, owner}
end
