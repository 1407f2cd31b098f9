import Config

# A release reads its configuration here, at boot, from RINGBUS_* variables
# (see Ringbus.Release); a bad one stops the boot with one line naming it.
# Outside a release (mix, tests, an application embedding Ringbus) nothing
# happens: the release scripts set RELEASE_NAME.
if System.get_env("RELEASE_NAME") do
  case Ringbus.Release.Config.load(System.get_env()) do
    {:ok, boot} ->
      config :ringbus, :release, boot
      config :logger, level: boot.log_level
      # The cluster layer reads the nodes to join when Ringbus starts.
      if boot.join != [], do: config(:ringbus, :cluster, join: boot.join)
      # The replica layer reads its data dir when Ringbus starts.
      if boot.data_dir, do: config(:ringbus, :data_dir, boot.data_dir)
      if boot.wal_max_bytes, do: config(:ringbus, :raft, wal_max_bytes: boot.wal_max_bytes)

    {:error, line} ->
      IO.puts(:stderr, line)
      System.halt(1)
  end
end
