defmodule Ringbus.Replica.Config do
  @moduledoc false
  # Where this node's replicated channels live: the Ra system's name and
  # its data dir, from the application env.

  @system :ringbus

  @doc "The name of Ringbus's Ra system."
  @spec system() :: atom()
  def system, do: @system

  @doc """
  The directory of this node's replicated channels: the application env
  `:data_dir`, else `ringbus_data/NODE` under the current directory.
  """
  @spec data_dir() :: Path.t()
  def data_dir do
    case Application.get_env(:ringbus, :data_dir) do
      nil -> Path.join([File.cwd!(), "ringbus_data", Atom.to_string(node())])
      dir when is_binary(dir) or is_list(dir) -> dir |> to_string() |> Path.expand()
      other -> raise ArgumentError, "expected :data_dir to be a path, got: #{inspect(other)}"
    end
  end

  # The Raft log's limits, application env `:raft` (README, "A durable
  # channel's memory and disk"). Ra keeps every entry of the WAL in ETS
  # until the WAL rolls over and the segment writer flushes it, so the WAL's
  # size bounds that memory; Ra's own default, 256 MB, let a node's ETS
  # grow past 400 MB under a small ring.
  #
  # Ra's other WAL and segment settings stay Ra's defaults: no checksums
  # (WAL or segments), a pre-allocated WAL, O_SYNC writes, larger segments,
  # larger or smaller WAL batches and fsync instead of fdatasync were each
  # run against these in alternating replication bench rounds, and none
  # was faster in every round. `wal_write_strategy: :sync_after_notify` and
  # `wal_sync_method: :none` are out: both let an entry be acked before
  # it is synced (test/ringbus/replica/sync_test.exs). Most slow acks of a
  # busy replicated channel come in the second after a WAL roll-over, while
  # each node's segment writer copies the closed WAL into segments, so
  # `wal_max_bytes` sets how often they come.
  @raft_defaults [
    wal_max_bytes: 32_000_000,
    wal_max_batch_size: 8192,
    segment_max_entries: 4096,
    snapshot_interval: 4096
  ]

  @doc """
  The Raft log's limits: the application env `:raft`, a keyword list of
  `:wal_max_bytes` (the size at which Ra's WAL rolls over, flushing
  the entries it held in memory into each channel's segments),
  `:wal_max_batch_size` (entries per WAL write), `:segment_max_entries`
  (entries per segment file) and `:snapshot_interval` (entries a channel's
  log grows between two snapshots when no segment is written); each
  a positive integer, the rest defaulted.
  """
  @spec raft() :: keyword(pos_integer())
  def raft do
    env = Application.get_env(:ringbus, :raft, [])

    unless Keyword.keyword?(env),
      do: raise(ArgumentError, "expected :raft to be a keyword list, got: #{inspect(env)}")

    raft = Keyword.validate!(env, @raft_defaults)

    for {key, value} <- raft, not (is_integer(value) and value > 0) do
      raise ArgumentError,
            "expected :raft's #{inspect(key)} to be a positive integer, got: #{inspect(value)}"
    end

    raft
  end

  @doc "The Ra system's configuration, in `dir`."
  @spec ra_system(Path.t()) :: map()
  def ra_system(dir) do
    raft = raft()

    Map.merge(:ra_system.default_config(), %{
      name: @system,
      names: :ra_system.derive_names(@system),
      data_dir: String.to_charlist(dir),
      wal_data_dir: String.to_charlist(dir),
      wal_max_size_bytes: raft[:wal_max_bytes],
      wal_max_batch_size: raft[:wal_max_batch_size],
      segment_max_entries: raft[:segment_max_entries]
    })
  end

  @doc "The name the replica layer's supervisor registers."
  @spec supervisor_name() :: atom()
  def supervisor_name, do: :ringbus_replicas

  @doc "The catalogue of this node's replicated channels, in `dir`."
  @spec catalogue_file(Path.t()) :: Path.t()
  def catalogue_file(dir), do: Path.join(dir, "channels.etf")
end
