defmodule Ringbus.Test.Peers do
  @moduledoc "Peer nodes for a test: started, joined, and stopped when the test ends."

  alias Ringbus.Test.Nodes

  @doc "Starts `count` nodes named after `prefix`, joins them, and stops them at the test's end."
  @spec start_joined(pos_integer(), String.t(), keyword()) :: [Nodes.t()]
  def start_joined(count, prefix, opts \\ []) do
    nodes = Nodes.start(count, prefix, opts)
    ExUnit.Callbacks.on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    nodes
  end

  @doc "Calls `check` every 20 ms until it returns true; fails after `timeout` ms."
  @spec eventually((() -> boolean()), pos_integer()) :: :ok
  def eventually(check, timeout \\ 15_000),
    do: :ok = Nodes.wait_until(System.monotonic_time(:millisecond) + timeout, check)
end
