defmodule Ringbus.Replica.DiskTest do
  # The bytes a member's Raft directory holds, and its snapshots'; the
  # bytes of the node's WAL.
  use ExUnit.Case, async: true

  alias Ringbus.Replica.Disk

  @moduletag :tmp_dir

  test "every regular file under the directory, and those under snapshots/", %{tmp_dir: dir} do
    File.write!(Path.join(dir, "00000001.segment"), :binary.copy("s", 1000))
    File.write!(Path.join(dir, "config"), "12345")
    File.mkdir_p!(Path.join([dir, "snapshots", "0000000000000010_0000000000000002"]))

    File.write!(
      Path.join([dir, "snapshots", "0000000000000010_0000000000000002", "snapshot.dat"]),
      "abc"
    )

    # A link is not followed: what it points to is not this member's.
    File.ln_s!("/", Path.join(dir, "elsewhere"))

    assert Disk.usage(dir) == {1008, 3}
  end

  test "a directory that is not there holds nothing", %{tmp_dir: dir} do
    assert Disk.usage(Path.join(dir, "gone")) == {0, 0}
  end

  test "the WAL: the .wal files of the directory, not the servers' directories beside them",
       %{tmp_dir: dir} do
    File.write!(Path.join(dir, "00000001.wal"), :binary.copy("w", 700))
    File.write!(Path.join(dir, "00000002.wal"), :binary.copy("w", 300))
    File.write!(Path.join(dir, "names.dets"), "12345")
    File.mkdir_p!(Path.join(dir, "SERVER_UID"))
    File.write!(Path.join([dir, "SERVER_UID", "00000001.segment"]), "segment")

    assert Disk.files_bytes(dir, ".wal") == 1000
    assert Disk.files_bytes(Path.join(dir, "gone"), ".wal") == 0
    assert Disk.files_bytes(Path.join(dir, "SERVER_UID"), ".segment") == 7
  end
end
