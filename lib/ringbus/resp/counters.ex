defmodule Ringbus.Resp.Counters do
  @moduledoc false
  # The counters every connection of one RESP listener shares, which INFO
  # reports: connected and received connections, commands processed, and
  # clients waiting in a blocked read; and the stream tuning parameters
  # CONFIG SET keeps (`Ringbus.Resp.ConfigCommands`), which are integers too.

  @names %{
    connections: 1,
    connections_received: 2,
    commands_processed: 3,
    blocked_clients: 4,
    stream_node_max_entries: 5,
    stream_node_max_bytes: 6
  }

  # What CONFIG RESETSTAT sets back to 0, as Redis resets its statistics.
  @stats [:connections_received, :commands_processed]

  @type name ::
          :connections
          | :connections_received
          | :commands_processed
          | :blocked_clients
          | :stream_node_max_entries
          | :stream_node_max_bytes

  @doc "A listener's counters: all zero, the stream parameters at Redis's defaults."
  @spec new() :: :counters.counters_ref()
  def new do
    counters = :counters.new(map_size(@names), [:write_concurrency])
    put(counters, :stream_node_max_entries, 100)
    put(counters, :stream_node_max_bytes, 4096)
    counters
  end

  @doc "Adds `n` to a counter."
  @spec add(:counters.counters_ref(), name(), integer()) :: :ok
  def add(counters, name, n), do: :counters.add(counters, Map.fetch!(@names, name), n)

  @doc "Takes `n` from a counter."
  @spec sub(:counters.counters_ref(), name(), integer()) :: :ok
  def sub(counters, name, n), do: :counters.sub(counters, Map.fetch!(@names, name), n)

  @doc "Sets a counter."
  @spec put(:counters.counters_ref(), name(), integer()) :: :ok
  def put(counters, name, n), do: :counters.put(counters, Map.fetch!(@names, name), n)

  @doc "Sets the statistics (connections received, commands processed) back to 0."
  @spec reset_stats(:counters.counters_ref()) :: :ok
  def reset_stats(counters), do: Enum.each(@stats, &put(counters, &1, 0))

  @doc "A counter's value."
  @spec get(:counters.counters_ref(), name()) :: integer()
  def get(counters, name), do: :counters.get(counters, Map.fetch!(@names, name))
end
