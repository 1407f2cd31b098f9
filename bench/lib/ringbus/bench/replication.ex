defmodule Ringbus.Bench.Replication do
  @moduledoc """
  The replication bench: a replicated Ringbus channel (`replicas: 3`,
  Ra) beside NATS JetStream R3, Osiris (RabbitMQ's stream log) and Redis
  with an fsynced append-only file, in one run, on this machine's loopback.

      mix ringbus.bench replication
      mix ringbus.bench replication --out replication.csv
      mix ringbus.bench replication --systems ringbus,jetstream --payloads 16 --seconds 2

  ## What it runs

  For each payload (16 B and 1 KB by default), each system in turn, for
  `--seconds` per row or `--max-messages`, whichever comes first; every
  producer keeps `--window` sends unconfirmed (256 by default) and a send's
  latency is from the send to its confirm:

    * `ringbus` - three fresh `:peer` nodes (`Ringbus.Test.Nodes`),
      joined. On the first: a memory channel (`ringbus_memory`, the
      reference), a `replicas: 1` channel (`ringbus_r1`) and a
      `replicas: 3` one (`ringbus_r3`), each pushed to by `--window`
      processes of that node, each with one `Ringbus.push/2` in flight.
      Then `ringbus_r3_half_rate`: the same channel at half the rate
      `ringbus_r3` reached, paced, for its p99. Then reads of each ring,
      from its oldest message in reads of 1,000 (`Ringbus.read/3`), on a
      follower of the `replicas: 3` channel (`ringbus_r3_read_follower`)
      and on the memory channel's node (`ringbus_memory_read`). Then
      failover: `kill -9` of the OS process of the node of the `replicas: 3`
      channel's leader, and a push at a time (100 ms timeout each) from a
      surviving member until one is acked.
    * `jetstream` - three `nats-server`s (2.9, Debian's) in a JetStream
      cluster on loopback ports, stores in a temp dir
      (`Ringbus.Bench.Replication.NatsServers`); a stream with file storage
      and 3 replicas (`jetstream_r3`), then 1 (`jetstream_r1`), created
      with a `$JS.API.STREAM.CREATE` request. The publisher speaks the NATS
      text protocol over `:gen_tcp` to the stream leader's server:
      `PUB subject reply n`, the stream's ack (`{"stream":..,"seq":..}`)
      arriving on the reply subject. Failover (R3): `kill -9` of the stream
      leader's server (from `$JS.API.STREAM.INFO`), then a publish at a
      time (200 ms timeout each) through a survivor until one is acked.
      Each payload gets three fresh servers.
    * `osiris` - Osiris 1.3 (from Debian's `rabbitmq-server` package, put in
      `_vendor/ra/` by `bin/setup-ra`) on three fresh `:peer` nodes:
      `:osiris.start_cluster/1` with the writer on the first node,
      `:osiris.write/4` there, confirmed by `{:osiris_written, ...}` once a
      quorum has an entry (written, not fsynced). Osiris elects no new
      writer by itself (RabbitMQ's stream coordinator does), so no failover.
    * `redis` - one `redis-server` with `appendonly yes` and
      `appendfsync always` (`redis_aof_always`), then `everysec`
      (`redis_aof_everysec`), `XADD s MAXLEN ~ N * f <payload>` pipelined
      over one connection. One server, no failover.

  ## Output

  A table and, with `--out`, CSV with the columns
  `system,replicas,durable,payload,producers,msgs_per_s,mb_per_s,p50_us,p99_us,max_us,failover_ms`:

    * `durable` - what a confirm means: `fsync` (on disk on a majority,
      or on Redis's disk with `always`), `fsync_1s` (Redis `everysec`),
      `written` (written to files, not fsynced: JetStream's file storage
      syncs every two minutes by default, Osiris leaves it to the OS),
      `memory`;
    * `producers` - the sends kept unconfirmed (the window); empty for reads;
    * `failover_ms` - from just before the `kill -9` of the leader's node
      (or server) to the ack of the first push sent after it; empty where
      it does not apply;
    * the read rows have a rate and no latency.

  Then the ratios (the bench does not judge them): Ringbus `replicas: 3`
  over JetStream R3 and over Osiris in msgs/s, the p99 at half the peak
  rate, the failovers, and the follower's read rate over the memory
  channel's; and how the `replicas: 3` row's writer batched (its counts,
  `Ringbus.Replica.Writer`): messages per Raft command, sends per command
  (above 1 when commands went again), and the most commands unanswered at
  once. Sends that failed or were never confirmed are counted and
  printed; they are not in the rates.

  ## Command line options

    * `--systems` - comma-separated, some of `ringbus,jetstream,osiris,redis`.
      Defaults to all; a system whose program is missing is an error.
    * `--payloads` - comma-separated byte sizes. Defaults to `16,1024`.
    * `--seconds` - seconds per row at most. Defaults to `3`.
    * `--max-messages` - messages per row at most. Defaults to `1000000`.
    * `--window` - unconfirmed sends per producer. Defaults to `256`.
    * `--wal-max-bytes` - the Ringbus nodes' `:raft` `:wal_max_bytes` (the
      size at which Ra's WAL rolls over). Defaults to the application's
      default (`Ringbus.Replica.Config.raft/0`).
    * `-o`, `--out` - write the CSV to this file.
    * `-q`, `--quiet` - no progress lines (they go to stderr).
  """

  alias Ringbus.Bench.{Args, CSV, RedisServer, Table}
  alias Ringbus.Bench.Replication.Samples
  alias Ringbus.Test.Nodes

  alias Ringbus.Bench.Replication.{
    JetStreamAdmin,
    NatsClient,
    NatsServers,
    OsirisLoad,
    RedisLoad,
    RingbusLoad
  }

  @systems ~w(ringbus jetstream osiris redis)
  @switches [
    systems: :string,
    payloads: :string,
    seconds: :integer,
    max_messages: :integer,
    window: :integer,
    wal_max_bytes: :integer,
    out: :string,
    quiet: :boolean
  ]
  @aliases [o: :out, q: :quiet]
  @header ~w(system replicas durable payload producers msgs_per_s mb_per_s p50_us p99_us max_us failover_ms)
  # Every log and ring of a row holds at most this much: the oldest go.
  @retain_bytes 64 * 1_048_576

  @doc "Runs the bench with command line `args`; returns the rows."
  @spec run([String.t()]) :: [map()]
  def run(args) do
    opts = Args.parse!(args, @switches, @aliases)
    config = config!(opts)
    check_available!(config.systems)

    IO.puts(
      "Replication: #{Enum.join(config.systems, ", ")}; payloads #{Enum.join(config.payloads, ", ")} B; " <>
        "#{config.seconds} s or #{config.max_messages} messages a row, window #{config.window}" <>
        if(config.wal_max_bytes, do: ", wal_max_bytes #{config.wal_max_bytes}", else: "") <>
        "; " <>
        "OTP #{System.otp_release()}, #{:erlang.system_info(:logical_processors_available)} cores\n"
    )

    rows = Enum.flat_map(config.systems, &run_system(&1, config))
    print(rows)

    if config.out do
      CSV.write!(config.out, @header, Enum.map(rows, &csv_row/1))
      IO.puts("wrote #{config.out}")
    end

    rows
  end

  defp config!(opts) do
    systems = Args.names!(opts, :systems, @systems, "system")

    %{
      systems: Enum.filter(@systems, &(&1 in systems)),
      payloads: Args.sizes!(opts[:payloads], [16, 1024]),
      seconds: Args.positive!(opts, :seconds, 3),
      max_messages: Args.positive!(opts, :max_messages, 1_000_000),
      window: Args.positive!(opts, :window, 256),
      wal_max_bytes: opts[:wal_max_bytes] && Args.positive!(opts, :wal_max_bytes, 1),
      out: opts[:out],
      quiet: Keyword.get(opts, :quiet, false)
    }
  end

  defp check_available!(systems) do
    if "jetstream" in systems and NatsServers.executable() == nil,
      do: Mix.raise("nats-server is not installed (Debian: nats-server); or leave out jetstream")

    if "redis" in systems and not RedisServer.available?(),
      do: Mix.raise("redis-server is not on the PATH (Debian: redis-server); or leave out redis")

    if "osiris" in systems, do: ensure_osiris!()
  end

  # An older _vendor/ra/ may lack Osiris: bin/setup-ra adds it.
  defp ensure_osiris! do
    if :code.lib_dir(:osiris) == {:error, :bad_name} do
      root = Path.expand("../../../..", __DIR__)
      {out, status} = System.cmd(Path.join(root, "bin/setup-ra"), [], stderr_to_stdout: true)

      if status != 0,
        do: Mix.raise("bin/setup-ra failed (exit #{status}), so Osiris is missing: #{out}")

      for ebin <- Path.wildcard(Path.join(root, "_vendor/ra/osiris-*/ebin")),
          do: Code.prepend_path(ebin)

      if :code.lib_dir(:osiris) == {:error, :bad_name},
        do: Mix.raise("Osiris is not in _vendor/ra/ after bin/setup-ra; or leave out osiris")
    end
  end

  defp run_system("ringbus", config), do: Enum.flat_map(config.payloads, &ringbus(&1, config))
  defp run_system("jetstream", config), do: jetstream(config)
  defp run_system("osiris", config), do: osiris(config)
  defp run_system("redis", config), do: redis(config)

  ## Ringbus

  defp ringbus(payload, config) do
    progress(config, "ringbus #{payload} B: starting 3 nodes")

    env =
      if config.wal_max_bytes, do: [env: [raft: [wal_max_bytes: config.wal_max_bytes]]], else: []

    Nodes.with_joined(
      3,
      "bench_replication",
      [net_ticktime: 4] ++ env,
      &ringbus_rows(&1, payload, config)
    )
  end

  defp ringbus_rows([a | _] = nodes, payload, config) do
    capacity = capacity(payload, config)

    for {name, extra} <- [{"memory", []}, {"r1", [replicas: 1]}, {"r3", [replicas: 3]}],
        do: :ok = Nodes.call(a, Ringbus, :create, [name, [capacity: capacity] ++ extra], 60_000)

    push = fn name, rate ->
      progress(config, "ringbus #{payload} B: #{name}#{if rate, do: " at #{round(rate)} msgs/s"}")
      args = [name, payload, config.window, config.seconds * 1_000, config.max_messages, rate]
      Nodes.call(a, RingbusLoad, :push, args, config.seconds * 1_000 + 60_000) |> report(config)
    end

    memory = push.("memory", nil)
    r1 = push.("r1", nil)
    before = Nodes.call(a, RingbusLoad, :writer_counts, ["r3"])
    r3 = push.("r3", nil)
    counts = Nodes.call(a, RingbusLoad, :writer_counts, ["r3"])
    r3 = Map.put(r3, :batching, batching(before, counts))
    half = push.("r3", r3.msgs_per_s / 2)

    {:ok, info} = Nodes.call(a, Ringbus, :info, ["r3"])
    leader = Enum.find(nodes, &(&1.node == info.leader)) || a
    follower = Enum.find(nodes, &(&1 != leader))
    progress(config, "ringbus #{payload} B: reads")
    read_follower = read(follower, "r3", payload)
    read_memory = read(a, "memory", payload)
    failover_ms = ringbus_failover(nodes, leader, config)

    row = &Map.merge(%{system: &1, payload: payload, producers: config.window}, &2)

    [
      row.("ringbus_memory", Map.merge(memory, %{replicas: 1, durable: "memory"})),
      row.("ringbus_r1", Map.merge(r1, %{replicas: 1, durable: "fsync"})),
      row.(
        "ringbus_r3",
        Map.merge(r3, %{replicas: 3, durable: "fsync", failover_ms: failover_ms})
      ),
      row.("ringbus_r3_half_rate", Map.merge(half, %{replicas: 3, durable: "fsync"})),
      row.(
        "ringbus_r3_read_follower",
        Map.merge(read_follower, %{replicas: 3, durable: "fsync", producers: nil})
      ),
      row.(
        "ringbus_memory_read",
        Map.merge(read_memory, %{replicas: 1, durable: "memory", producers: nil})
      )
    ]
  end

  # Messages per Raft command and the writer's sends per command over the
  # row; the most commands unanswered at once since the channel's creation.
  defp batching(before, counts) do
    commands = counts.commands - before.commands

    if commands > 0,
      do: %{
        per_command: (counts.requests - before.requests) / commands,
        sends_per_command: (counts.sends - before.sends) / commands,
        unanswered_max: counts.unanswered_max
      }
  end

  defp read(node, name, payload) do
    {messages, seconds} = Nodes.call(node, RingbusLoad, :read, [name, 1_000], 60_000)
    rate = if seconds > 0, do: messages / seconds, else: 0.0
    %{count: messages, errors: 0, msgs_per_s: rate, mb_per_s: rate * payload / 1_048_576}
  end

  defp ringbus_failover(nodes, leader, config) do
    survivor = Enum.find(nodes, &(&1 != leader))
    progress(config, "ringbus: kill -9 of the leader's node #{leader.node}")
    killed_at = System.os_time(:microsecond)
    :ok = Nodes.signal(leader, :kill)

    case Nodes.call(survivor, RingbusLoad, :first_ack, ["r3", 100, 30_000], 40_000) do
      nil -> nil
      acked_at -> (acked_at - killed_at) / 1_000
    end
  end

  ## JetStream

  # Fresh servers for each payload: its failover kills one.
  defp jetstream(config) do
    Enum.flat_map(config.payloads, fn payload ->
      progress(config, "jetstream #{payload} B: starting 3 nats-servers")
      nats = NatsServers.start!()

      try do
        r3 = jetstream_row(nats, 3, payload, config)
        r1 = jetstream_row(nats, 1, payload, config)
        failover_ms = jetstream_failover(nats, r3, config)

        for row <- [Map.put(r3, :failover_ms, failover_ms), r1],
            do: Map.drop(row, [:stream, :subject, :leader])
      after
        NatsServers.stop(nats)
      end
    end)
  end

  defp jetstream_row(nats, replicas, payload, config) do
    stream = "BENCH_R#{replicas}_#{payload}"
    subject = "bench.r#{replicas}.#{payload}"
    progress(config, "jetstream #{payload} B: R#{replicas}")
    {:ok, admin} = NatsClient.connect(hd(nats.servers).port)

    config_json =
      ~s({"name":"#{stream}","subjects":["#{subject}"],"storage":"file","num_replicas":#{replicas},) <>
        ~s("retention":"limits","discard":"old","max_bytes":#{@retain_bytes},"max_msgs":#{capacity(payload, config)}})

    try do
      api = "$JS.API.STREAM.CREATE.#{stream}"
      :ok = JetStreamAdmin.create!(admin, api, config_json, Samples.now() + 30_000_000)
      leader = JetStreamAdmin.leader!(admin, stream, Samples.now() + 30_000_000)
      {:ok, client} = NatsClient.connect(NatsServers.server!(nats, leader).port)

      summary =
        try do
          NatsClient.publish(
            client,
            subject,
            payload,
            config.window,
            config.seconds * 1_000,
            config.max_messages
          )
        after
          NatsClient.close(client)
        end

      summary
      |> report(config)
      |> Map.merge(%{
        system: "jetstream_r#{replicas}",
        replicas: replicas,
        durable: "written",
        payload: payload,
        producers: config.window,
        stream: stream,
        subject: subject,
        leader: leader
      })
    after
      NatsClient.close(admin)
    end
  end

  defp jetstream_failover(nats, r3, config) do
    leader = NatsServers.server!(nats, r3.leader)
    survivor = Enum.find(nats.servers, &(&1.name != leader.name))
    progress(config, "jetstream: kill -9 of the stream leader's server #{leader.name}")
    killed_at = System.os_time(:microsecond)
    :ok = NatsServers.kill!(leader)
    {:ok, client} = NatsClient.connect(survivor.port)

    acked_at =
      try do
        js_first_ack(client, r3.subject, Samples.now() + 30_000_000)
      after
        NatsClient.close(client)
      end

    acked_at && (acked_at - killed_at) / 1_000
  end

  defp js_first_ack(client, subject, deadline) do
    case NatsClient.request(client, subject, "failover", 200) do
      {:ok, reply} ->
        if reply =~ ~s("seq") and not (reply =~ ~s("error")),
          do: System.os_time(:microsecond),
          else: js_retry(client, subject, deadline)

      {:error, :timeout} ->
        js_retry(client, subject, deadline)
    end
  end

  defp js_retry(client, subject, deadline) do
    if Samples.now() > deadline,
      do: nil,
      else: JetStreamAdmin.retry(fn -> js_first_ack(client, subject, deadline) end)
  end

  ## Osiris

  defp osiris(config) do
    progress(config, "osiris: starting 3 nodes")
    [a, b, c] = nodes = Nodes.start(3, "bench_osiris", net_ticktime: 4)

    try do
      for n <- nodes,
          do: :ok = Nodes.call(n, OsirisLoad, :start, [Path.join(n.data_dir, "osiris")])

      for payload <- config.payloads do
        progress(config, "osiris #{payload} B")
        name = "bench_#{payload}"
        args = [name, [b.node, c.node], @retain_bytes]
        cluster = Nodes.call(a, OsirisLoad, :start_cluster, args, 30_000)

        args = [
          cluster.leader_pid,
          payload,
          config.window,
          config.seconds * 1_000,
          config.max_messages
        ]

        summary = Nodes.call(a, OsirisLoad, :write, args, config.seconds * 1_000 + 60_000)
        :ok = Nodes.call(a, OsirisLoad, :delete_cluster, [cluster], 30_000)

        summary
        |> report(config)
        |> Map.merge(%{
          system: "osiris",
          replicas: 3,
          durable: "written",
          payload: payload,
          producers: config.window
        })
      end
    after
      Nodes.stop(nodes)
    end
  end

  ## Redis

  defp redis(config) do
    for fsync <- ["always", "everysec"], payload <- config.payloads do
      progress(config, "redis #{payload} B: appendfsync #{fsync}")

      dir =
        Path.join(System.tmp_dir!(), "ringbus_bench_redis_#{System.unique_integer([:positive])}")

      File.mkdir_p!(dir)
      redis = RedisServer.start!(dir: dir, args: ["--appendonly", "yes", "--appendfsync", fsync])

      try do
        args = [redis.port, "s", capacity(payload, config), payload, config.window]

        RedisLoad
        |> apply(:xadd, args ++ [config.seconds * 1_000, config.max_messages])
        |> report(config)
        |> Map.merge(%{
          system: "redis_aof_#{fsync}",
          replicas: 1,
          durable: if(fsync == "always", do: "fsync", else: "fsync_1s"),
          payload: payload,
          producers: config.window
        })
      after
        RedisServer.stop(redis)
        File.rm_rf!(dir)
      end
    end
  end

  ## Output

  # A ring, stream or log of a row keeps every message of the row, up to 64 MB.
  defp capacity(payload, config),
    do: config.max_messages |> min(div(@retain_bytes, payload)) |> max(1_000)

  defp report(summary, config) do
    if summary.errors > 0,
      do: progress(config, "    #{summary.errors} sends failed or were never confirmed")

    summary
  end

  @columns [
    {"system", 26, :left},
    {"replicas", 9, :right},
    {"durable", 10, :right},
    {"payload", 8, :right},
    {"window", 7, :right},
    {"msgs/s", 11, :right},
    {"MB/s", 8, :right},
    {"p50 µs", 9, :right},
    {"p99 µs", 9, :right},
    {"max µs", 9, :right},
    {"failover ms", 12, :right},
    {"errors", 7, :right}
  ]

  defp print(rows) do
    Table.print(@columns, rows, fn r ->
      [
        r.system,
        r.replicas,
        r.durable,
        r.payload,
        r[:producers],
        round(r.msgs_per_s),
        fmt(r.mb_per_s),
        r[:p50_us],
        r[:p99_us],
        r[:max_us],
        fmt(r[:failover_ms]),
        r.errors
      ]
    end)

    IO.puts("\nRatios (the bench prints them; it does not judge):")

    for payload <- rows |> Enum.map(& &1.payload) |> Enum.uniq() do
      find = fn system -> Enum.find(rows, &(&1.system == system and &1.payload == payload)) end
      r3 = find.("ringbus_r3")
      half = find.("ringbus_r3_half_rate")

      IO.puts(
        "  #{payload} B: Ringbus R3 msgs/s / JetStream R3 #{ratio(r3, find.("jetstream_r3"))}, " <>
          "/ Osiris #{ratio(r3, find.("osiris"))}; " <>
          "Ringbus R3 p99 at half its peak (#{rate(half)} msgs/s) #{us(half, :p99_us)} µs, at its peak #{us(r3, :p99_us)} µs; " <>
          "failover Ringbus R3 #{ms(r3)} ms, JetStream R3 #{ms(find.("jetstream_r3"))} ms; " <>
          "follower read / memory read #{ratio(find.("ringbus_r3_read_follower"), find.("ringbus_memory_read"))}; " <>
          "Ringbus R3 #{batching(r3)}"
      )
    end

    IO.puts(
      "\nFigures on a machine shared with other work are noisy; compare the rows of one run.\n"
    )
  end

  defp batching(%{batching: %{} = b}),
    do:
      "#{fmt(b.per_command)} messages per Raft command, #{fmt(b.sends_per_command)} sends per command, " <>
        "at most #{b.unanswered_max} commands unanswered at once"

  defp batching(_row), do: "batching n/a"

  defp ratio(%{msgs_per_s: a}, %{msgs_per_s: b}) when b > 0, do: fmt(a / b) <> "x"
  defp ratio(_a, _b), do: "n/a"

  defp rate(nil), do: "n/a"
  defp rate(row), do: round(row.msgs_per_s)

  defp us(nil, _key), do: "n/a"
  defp us(row, key), do: Map.get(row, key) || "n/a"

  defp ms(%{failover_ms: ms}) when is_number(ms), do: fmt(ms)
  defp ms(_row), do: "n/a"

  defp fmt(nil), do: nil
  defp fmt(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 2)
  defp fmt(x), do: to_string(x)

  defp csv_row(r) do
    [
      r.system,
      r.replicas,
      r.durable,
      r.payload,
      r[:producers],
      round(r.msgs_per_s),
      r.mb_per_s,
      r[:p50_us],
      r[:p99_us],
      r[:max_us],
      r[:failover_ms]
    ]
  end

  defp progress(%{quiet: true}, _message), do: :ok
  defp progress(_config, message), do: IO.puts(:stderr, "==> " <> message)
end
