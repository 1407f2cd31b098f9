defmodule Ringbus.Replica.Footprint do
  @moduledoc false
  # What this node's replicated channels hold in memory and on disk, read
  # from Ra's ETS tables and the data dir, in the caller. The reporter
  # (`Ringbus.Replica.Reporter`) publishes these figures each second; the
  # footprint bench (bench/, `mix ringbus.bench footprint`) calls `node/0`
  # on each node to check the bounds README states. Internal contract: a
  # map of byte counts, nil where the Ra system is not running.
  #
  # Ra's memory of a channel's log is its mem tables, one ETS table per
  # server per WAL file, holding every entry the WAL has and no segment has
  # yet: the open and closed mem table indexes list them by server uid.
  # These are the tables' own memory: a payload over 64 bytes is a binary
  # they refer to, which the VM counts apart (`:erlang.memory(:binary)`).

  alias Ringbus.Replica.{Config, Disk}

  @typedoc "A node's figures: its WAL files and Ra's ETS tables."
  @type node_figures :: %{wal_bytes: non_neg_integer() | nil, ets_bytes: non_neg_integer() | nil}

  @typedoc "A member's: its mem tables, segment files, snapshots and whole directory."
  @type member_figures :: %{
          mem_bytes: non_neg_integer() | nil,
          segment_bytes: non_neg_integer() | nil,
          snapshot_bytes: non_neg_integer() | nil,
          log_bytes: non_neg_integer() | nil
        }

  @doc """
  The running Ra system's directories and table names, or an empty map
  when it is not running.
  """
  @spec system() :: map()
  def system do
    case :ra_system.fetch(Config.system()) do
      %{data_dir: dir, wal_data_dir: wal, names: names} ->
        %{data_dir: to_string(dir), wal_data_dir: to_string(wal), names: names}

      _ ->
        %{}
    end
  catch
    _, _ -> %{}
  end

  @doc "This node's figures (`system` from `system/0`)."
  @spec node(map()) :: node_figures()
  def node(system \\ system()) do
    %{wal_bytes: wal_bytes(system), ets_bytes: ets_bytes(system)}
  end

  @doc "The figures of this node's member whose Ra server is named `local`."
  @spec member(atom(), map()) :: member_figures()
  def member(local, system \\ system()) do
    case system[:data_dir] && uid(local) do
      uid when is_binary(uid) ->
        dir = Path.join(system.data_dir, uid)
        {log, snapshot} = Disk.usage(dir)

        %{
          mem_bytes: mem_bytes(system, uid),
          segment_bytes: Disk.files_bytes(dir, ".segment"),
          snapshot_bytes: snapshot,
          log_bytes: log
        }

      _ ->
        %{mem_bytes: nil, segment_bytes: nil, snapshot_bytes: nil, log_bytes: nil}
    end
  end

  defp uid(local) do
    case :ra_directory.uid_of(Config.system(), local) do
      uid when is_binary(uid) -> uid
      _ -> nil
    end
  catch
    _, _ -> nil
  end

  defp wal_bytes(%{wal_data_dir: dir}), do: Disk.files_bytes(dir, ".wal")
  defp wal_bytes(_not_running), do: nil

  # Every mem table, their two indexes and the directory of servers.
  defp ets_bytes(%{names: %{closed_mem_tbls: closed, open_mem_tbls: open} = names}),
    do: memory([open, closed, names.directory | mem_tables(names, :_)])

  defp ets_bytes(_not_running), do: nil

  defp mem_bytes(%{names: names}, uid), do: memory(mem_tables(names, uid))

  # Open rows are `{uid, first, last, tid}`, closed ones `{uid, version,
  # first, last, tid}`.
  defp mem_tables(%{open_mem_tbls: open, closed_mem_tbls: closed}, uid) do
    (:ets.select(open, [{{uid, :_, :_, :"$1"}, [], [:"$1"]}]) ++
       :ets.select(closed, [{{uid, :_, :_, :_, :"$1"}, [], [:"$1"]}]))
    |> Enum.uniq()
  rescue
    ArgumentError -> []
  end

  # A table deleted meanwhile counts nothing.
  defp memory(tables) do
    words =
      for table <- tables,
          words = :ets.info(table, :memory),
          is_integer(words),
          reduce: 0,
          do: (sum -> sum + words)

    words * :erlang.system_info(:wordsize)
  end
end
