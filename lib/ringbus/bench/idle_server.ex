defmodule Ringbus.Bench.IdleServer do
  @moduledoc """
  A `GenServer` that does nothing but stop when the process it was given
  exits: the least a started process can be, as a reference for the cost of
  starting processes in a burst.
  """

  use GenServer

  @impl true
  def init(owner) when is_pid(owner) do
    Process.monitor(owner)
    {:ok, owner}
  end

  @impl true
  def handle_info({:DOWN, _ref, :process, owner, _reason}, owner), do: {:stop, :normal, owner}
  def handle_info(_other, owner), do: {:noreply, owner}
end
