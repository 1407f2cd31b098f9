defmodule Ringbus.Server.Directory do
  @moduledoc false
  # The servers listening on this node and their connections, for
  # `Ringbus.Metrics` and `Ringbus.Server.clients/0` to find. Each server's
  # listener registers here, with the protocol it speaks, its port, its
  # `Ringbus.Server.Stats` counters and its protocol's figures function
  # (`Ringbus.Server.Protocol`);
  # each connection registers once it has its socket, with its peer and the
  # counters it publishes. A RESP connection whose XREADGROUP BLOCK waits
  # on a group registers too, so that the group's destruction reaches it.
  # All drop out when their process exits. A
  # `Registry`: written when a process starts, read from ETS by the caller,
  # so a scrape asks no process.

  @doc false
  def child_spec(_arg), do: Registry.child_spec(keys: :duplicate, name: __MODULE__)

  @doc """
  Lists the calling listener's server until the listener exits; `figures`
  is its protocol's figures function, or nil.
  """
  @spec register(atom(), :inet.port_number(), :counters.counters_ref(), (() -> map()) | nil) ::
          :ok
  def register(protocol, port, counters, figures \\ nil) do
    {:ok, _owner} = Registry.register(__MODULE__, :servers, {protocol, port, counters, figures})
    :ok
  end

  @doc "Lists the calling connection until it exits, with what `connections/0` returns of it."
  @spec register_connection(map()) :: :ok
  def register_connection(info) do
    {:ok, _owner} = Registry.register(__MODULE__, :connections, info)
    :ok
  end

  @doc "Names the calling connection (a client's `CLIENT SETNAME`); nil clears it."
  @spec name_connection(String.t() | nil) :: :ok
  def name_connection(name) do
    # A duplicate registry has no update_value/3: the entry is put again.
    with %{} = info <- own_connection() do
      :ok = Registry.unregister(__MODULE__, :connections)
      :ok = register_connection(%{info | name: name})
    end

    :ok
  end

  @doc "What the calling connection registered, or nil before it has."
  @spec own_connection() :: map() | nil
  def own_connection do
    case Registry.values(__MODULE__, :connections, self()) do
      [info | _] -> info
      [] -> nil
    end
  end

  @doc "The connections registered now: `{pid, info}`."
  @spec connections() :: [{pid(), map()}]
  def connections, do: Registry.lookup(__MODULE__, :connections)

  @doc """
  Lists the calling connection as waiting on group `group` of stream `key`
  (an XREADGROUP BLOCK), until `unwait_group/2` or its exit.
  """
  @spec wait_group(binary(), binary()) :: :ok
  def wait_group(key, group) do
    {:ok, _owner} = Registry.register(__MODULE__, {:group_wait, key, group}, nil)
    :ok
  end

  @doc "Ends `wait_group/2`."
  @spec unwait_group(binary(), binary()) :: :ok
  def unwait_group(key, group), do: Registry.unregister(__MODULE__, {:group_wait, key, group})

  @doc "The connections of this node that wait on group `group` of stream `key`."
  @spec group_waiters(binary(), binary()) :: [pid()]
  def group_waiters(key, group),
    do: for({pid, _} <- Registry.lookup(__MODULE__, {:group_wait, key, group}), do: pid)

  @doc "The servers listening now, by protocol and port."
  @spec servers() :: [
          %{
            protocol: atom(),
            port: :inet.port_number(),
            counters: :counters.counters_ref(),
            figures: (() -> map()) | nil
          }
        ]
  def servers do
    __MODULE__
    |> Registry.lookup(:servers)
    |> Enum.map(fn {_listener, {protocol, port, counters, figures}} ->
      %{protocol: protocol, port: port, counters: counters, figures: figures}
    end)
    |> Enum.sort_by(&{&1.protocol, &1.port})
  end
end
