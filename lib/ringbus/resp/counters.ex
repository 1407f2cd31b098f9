defmodule Ringbus.Resp.Counters do
  @moduledoc false
  # The counters every connection of one RESP listener shares, which INFO
  # reports: connected and received connections, commands processed, and
  # clients waiting in a blocked read.

  @names %{connections: 1, connections_received: 2, commands_processed: 3, blocked_clients: 4}

  @type name :: :connections | :connections_received | :commands_processed | :blocked_clients

  @doc "A listener's counters, all zero."
  @spec new() :: :counters.counters_ref()
  def new, do: :counters.new(map_size(@names), [:write_concurrency])

  @doc "Adds `n` to a counter."
  @spec add(:counters.counters_ref(), name(), integer()) :: :ok
  def add(counters, name, n), do: :counters.add(counters, Map.fetch!(@names, name), n)

  @doc "Takes `n` from a counter."
  @spec sub(:counters.counters_ref(), name(), integer()) :: :ok
  def sub(counters, name, n), do: :counters.sub(counters, Map.fetch!(@names, name), n)

  @doc "A counter's value."
  @spec get(:counters.counters_ref(), name()) :: integer()
  def get(counters, name), do: :counters.get(counters, Map.fetch!(@names, name))
end
