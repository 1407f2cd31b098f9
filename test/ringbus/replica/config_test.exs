defmodule Ringbus.Replica.ConfigTest do
  # The Raft log's limits come from the application env `:raft`, checked.
  use ExUnit.Case, async: false

  alias Ringbus.Replica.Config

  setup do
    saved = Application.fetch_env(:ringbus, :raft)

    on_exit(fn ->
      case saved do
        {:ok, value} -> Application.put_env(:ringbus, :raft, value)
        :error -> Application.delete_env(:ringbus, :raft)
      end
    end)
  end

  test "the Ra system takes the WAL and segment limits from :raft, the rest defaulted" do
    Application.put_env(:ringbus, :raft, wal_max_bytes: 5_000_000, segment_max_entries: 512)
    system = Config.ra_system("/tmp/x")

    assert system.wal_max_size_bytes == 5_000_000
    assert system.segment_max_entries == 512
    assert system.wal_max_batch_size == Config.raft()[:wal_max_batch_size]
    assert Config.raft()[:snapshot_interval] > 0
  end

  test "without :raft, the WAL rolls over well before Ra's own 256 MB" do
    Application.delete_env(:ringbus, :raft)

    assert Config.ra_system("/tmp/x").wal_max_size_bytes <
             :ra_system.default_config().wal_max_size_bytes
  end

  test "an unknown key or a value that is not a positive integer is refused" do
    Application.put_env(:ringbus, :raft, wal_max_bytes: 0)

    assert_raise ArgumentError,
                 ~r/expected :raft's :wal_max_bytes to be a positive integer, got: 0/,
                 &Config.raft/0

    Application.put_env(:ringbus, :raft, wal_size: 1)
    assert_raise ArgumentError, ~r/unknown keys \[:wal_size\]/, &Config.raft/0

    Application.put_env(:ringbus, :raft, "big")
    assert_raise ArgumentError, ~r/expected :raft to be a keyword list/, &Config.raft/0
  end
end
