defmodule Ringbus.Server.Directory do
  @moduledoc false
  # The servers listening on this node, for `Ringbus.Metrics` to find. Each
  # server's listener registers here, with the protocol it speaks, its port
  # and its `Ringbus.Server.Stats` counters, and drops out when it stops.
  # A `Registry`: written when a listener starts, read from ETS by the
  # caller, so a scrape asks no process.

  @doc false
  def child_spec(_arg), do: Registry.child_spec(keys: :duplicate, name: __MODULE__)

  @doc "Lists the calling listener's server until the listener exits."
  @spec register(atom(), :inet.port_number(), :counters.counters_ref()) :: :ok
  def register(protocol, port, counters) do
    {:ok, _owner} = Registry.register(__MODULE__, :servers, {protocol, port, counters})
    :ok
  end

  @doc "The servers listening now, by protocol and port."
  @spec servers() :: [
          %{protocol: atom(), port: :inet.port_number(), counters: :counters.counters_ref()}
        ]
  def servers do
    __MODULE__
    |> Registry.lookup(:servers)
    |> Enum.map(fn {_listener, {protocol, port, counters}} ->
      %{protocol: protocol, port: port, counters: counters}
    end)
    |> Enum.sort_by(&{&1.protocol, &1.port})
  end
end
