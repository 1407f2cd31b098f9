defmodule Ringbus.Replica.Disk do
  @moduledoc false
  # The bytes a member's Ra server keeps in its own directory (segments,
  # snapshots, its config), walked with a bound on the entries looked at so
  # that a directory gone wrong never holds up the reporter; and the bytes
  # of the node's WAL, which every server of the node shares.

  @max_entries 10_000

  @doc """
  `{log_bytes, snapshot_bytes}` of the server directory `dir`: every
  regular file under it, and those under its `snapshots/`, each walked
  once. Files past the first #{@max_entries} entries are not counted; a
  missing dir is `{0, 0}`.
  """
  @spec usage(Path.t()) :: {non_neg_integer(), non_neg_integer()}
  def usage(dir) do
    {snapshots, left} = walk([Path.join(dir, "snapshots")], 0, @max_entries - 1)

    others =
      case File.ls(dir) do
        {:ok, names} -> for name <- names, name != "snapshots", do: Path.join(dir, name)
        {:error, _} -> []
      end

    {rest, _left} = walk(others, 0, left)
    {rest + snapshots, snapshots}
  end

  @doc """
  The bytes of the files whose names end in `suffix` directly in `dir`:
  the WAL files (`.wal`) of the Ra system's WAL directory, shared by every
  server of the node, or a server's segments (`.segment`). The first
  #{@max_entries} such files count; a missing dir is 0.
  """
  @spec files_bytes(Path.t(), String.t()) :: non_neg_integer()
  def files_bytes(dir, suffix) do
    case File.ls(dir) do
      {:ok, names} ->
        files = for name <- names, String.ends_with?(name, suffix), do: Path.join(dir, name)
        {bytes, _left} = walk(Enum.take(files, @max_entries), 0, @max_entries)
        bytes

      {:error, _} ->
        0
    end
  end

  defp walk(_paths, bytes, 0), do: {bytes, 0}
  defp walk([], bytes, left), do: {bytes, left}

  defp walk([path | rest], bytes, left) do
    case File.lstat(path) do
      {:ok, %File.Stat{type: :regular, size: size}} ->
        walk(rest, bytes + size, left - 1)

      {:ok, %File.Stat{type: :directory}} ->
        case File.ls(path) do
          {:ok, names} -> walk(Enum.map(names, &Path.join(path, &1)) ++ rest, bytes, left - 1)
          {:error, _} -> walk(rest, bytes, left - 1)
        end

      _other ->
        walk(rest, bytes, left - 1)
    end
  end
end
