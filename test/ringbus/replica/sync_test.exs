defmodule Ringbus.Replica.SyncTest do
  # An acked push to a replicated channel is on disk: Ra's WAL writes a
  # batch, syncs it (fdatasync), and only then tells the members it is
  # written, and an entry commits (and its push is acked) only once written.
  # Checked on this VM's own system calls: `strace` counts the syncs while
  # pushes run one at a time, each waiting for its ack, so every ack needs
  # a sync of its own.
  use ExUnit.Case, async: false

  @pushes 200

  setup do
    name = "replica_sync_#{System.unique_integer([:positive])}"
    on_exit(fn -> Ringbus.delete(name) end)
    {:ok, name: name}
  end

  @tag :tmp_dir
  test "the WAL syncs before it reports a write, by the Ra system's settings", %{tmp_dir: dir} do
    wal = Ringbus.Replica.Config.ra_system(dir)
    # Ra's default strategy: write, sync, then notify (`ra_log_wal`).
    assert Map.get(wal, :wal_write_strategy, :default) == :default
    assert Map.get(wal, :wal_sync_method, :datasync) == :datasync
  end

  @tag :tmp_dir
  test "every push acked one at a time was synced to disk first", %{name: name, tmp_dir: dir} do
    strace = System.find_executable("strace") || flunk("strace is not on the PATH")
    :ok = Ringbus.create(name, replicas: 1, capacity: 1_000)
    {:ok, _} = Ringbus.push(name, "warm")
    log = Path.join(dir, "strace.log")

    port =
      Port.open({:spawn_executable, strace}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: ["-f", "-qq", "-e", "trace=fdatasync,fsync", "-o", log, "-p", System.pid()]
      ])

    {:os_pid, strace_pid} = Port.info(port, :os_pid)
    # strace attaches to every thread before it traces: wait for its first line.
    wait_attached(log)

    for i <- 1..@pushes, do: {:ok, _} = Ringbus.push(name, "m#{i}")

    System.cmd("kill", ["-INT", "#{strace_pid}"])
    assert_receive {^port, {:exit_status, _}}, 10_000
    # The WAL syncs with fdatasync; this test's own probes with fsync.
    syncs = log |> File.read!() |> String.split("\n") |> Enum.count(&(&1 =~ "fdatasync("))
    assert syncs >= @pushes, "#{syncs} WAL syncs for #{@pushes} pushes acked one at a time"
  end

  # A sync this test makes itself (fsync, not the WAL's fdatasync) marks
  # strace as attached.
  defp wait_attached(log, tries \\ 200) do
    path = Path.join(Path.dirname(log), "probe")
    {:ok, fd} = :file.open(path, [:write, :raw])
    :ok = :file.sync(fd)
    :ok = :file.close(fd)

    cond do
      File.exists?(log) and File.read!(log) =~ "fsync(" -> :ok
      tries == 0 -> flunk("strace did not attach")
      true -> Process.sleep(20) && wait_attached(log, tries - 1)
    end
  end
end
