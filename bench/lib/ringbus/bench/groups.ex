defmodule Ringbus.Bench.Groups do
  @moduledoc """
  The consumer groups bench: consume-and-ack throughput, push-to-delivery
  latency and redelivery after a consumer's crash, for Ringbus's groups
  (`Ringbus.Groups`) on a memory channel and on `replicas: 1` and
  `replicas: 3` channels, beside Redis stream groups with an fsynced
  append-only file, a NATS JetStream R3 pull consumer and a RabbitMQ quorum
  queue of three nodes, in one run on this machine's loopback.

      mix ringbus.bench groups --out groups.csv
      mix ringbus.bench groups --pin --only ringbus_memory,redis_aof_always
      mix ringbus.bench groups --sizes 16 --consumers 4 --seconds 5

  ## What a row runs

  For each size (16 B and 1 KB by default) and each count of consumers (1
  and 4), `--producers` producers and the consumers run together for
  `--seconds` or `--max-messages`, whichever comes first. A producer pushes
  `--batch` messages and waits for their confirms; it waits while
  `--backlog` messages are pushed and not yet acked, so every system runs
  with the same bound on its backlog. A consumer fetches up to `--batch`
  messages (waiting up to 100 ms when there are none) and acks what it got
  in one request (Ringbus's: with its next fetch, see below; JetStream's
  acks are not answered). Each payload starts with its push time (OS µs, which
  every process of the machine shares), so a delivery's latency is read
  off the payload; only first deliveries are timed.

  Then a consumer's crash: `--batch` messages pushed, fetched by a fresh
  consumer that does not ack them, another consumer fetching; then the
  first one's process is killed (which closes its sockets), and the time
  to the other consumer's getting those messages back is taken, the first
  and the last of them. Every system is given the same `--ack-wait`.

  The systems (`--only` takes these names):

    * `ringbus_memory` - a memory channel in this VM, producers and
      consumers in it (the embedded API, same node): `Ringbus.push_many/2`,
      `Ringbus.Groups.ack_fetch/6` (a batch's acks go with the next
      fetch, one request: on a replicated channel, one command of its log
      where a fetch and an ack are two; a fetch that carries acks does
      not wait, one with none waits with `timeout:`; with
      `--ack-apart`, `Ringbus.Groups.fetch/5` then `Ringbus.Groups.ack/3`).
      A consumer's process owns its messages, so its exit makes them due
      at once.
    * `ringbus_r1`, `ringbus_r3` - `replicas: 1` and `replicas: 3` channels
      on three fresh `:peer` nodes (`Ringbus.Test.Nodes`), the producers
      and consumers on one node (`Ringbus.Bench.Groups.Load` run there
      through `:peer`): a member of both channels that is not the
      `replicas: 3` channel's leader when it is created. After the rows of
      a size, failover: on that node (or another member, should the
      leadership have moved to it) a producer pushes a message every few
      ms and a consumer of a fresh group fetches, then `kill -9` of the OS
      process of the leader's node (the leader as that node sees it just
      before); `failover_ms` is from just before the kill to the first
      delivery of a message pushed after `kill` returned. A replicated
      channel's groups are kept in its Raft log (`Ringbus.Groups`,
      "Replicated channels"): every fetch and ack is a command of the
      log, a consumer's exit is sent through it, and the group carries on
      under the new leader.
    * `redis_aof_always` - one `redis-server` (Debian's) with `appendonly
      yes` and `appendfsync always`, one connection per producer or
      consumer: `XADD` pipelined a batch at a time, `XREADGROUP ... COUNT n
      BLOCK 100 ... >`, one `XACK` of the batch. Redis does not notice a
      consumer's death: the other consumer takes its messages with
      `XAUTOCLAIM` once they are `--ack-wait` idle, polled every 10 ms.
    * `jetstream_r3` - three `nats-server`s (Debian's 2.9) in a JetStream
      cluster on loopback (`Ringbus.Bench.Replication.NatsServers`), a
      stream with file storage and 3 replicas, a durable pull consumer
      per row with explicit acks, `ack_wait` = `--ack-wait`; every
      connection to the stream leader's server. A consumer sends
      `$JS.API.CONSUMER.MSG.NEXT` with `{"batch":n,"expires":100 ms}` and
      acks each message it got (an empty `PUB` to its ack subject), all in
      one write. Not AckAll, which would ack the messages other consumers
      hold too, a crashed one's among them. JetStream delivers a crashed
      consumer's messages again after `ack_wait`.

    * `rabbitmq_quorum` - a quorum queue (`x-queue-type: quorum`, 3
      members, its leader on the node it is declared through) on three
      RabbitMQ 3.10 nodes clustered on loopback
      (`Ringbus.Bench.Groups.RabbitServers`: Debian's `rabbitmq-server`
      package, which `bin/setup-rabbitmq` unpacks into `_vendor/rabbitmq/`,
      run with this machine's `erl`), a queue per row; every connection to
      the leader's node, with the Erlang AMQP client from the same package
      (`Ringbus.Bench.Groups.RabbitClient`). A producer publishes a batch
      on a channel in confirm mode and waits for its confirms; a consumer
      consumes with manual acks and a prefetch of `--batch`, takes the
      deliveries that came (waiting up to 100 ms for the first) and acks
      them with one `basic.ack` (`multiple`). A consumer's connection
      closes when its process dies, and the queue delivers its unacked
      messages again at once; `--ack-wait` does not apply (RabbitMQ's
      `consumer_timeout` is a channel's death, not a redelivery).

  With `--pin`, the rows compared per core run pinned (`Ringbus.Bench.Pin`):
  `ringbus_memory` with this VM on core 0 alone, one scheduler online,
  its producers and consumers sharing that core with it; `redis-server`
  on core 0 and this VM, its clients, on core 1 with one scheduler. The
  other rows run in the shared mode whatever `--pin` says.

  ## Output

  A table and, with `--out`, CSV with the columns
  `system,replicas,durable,mode,clients_on,payload,producers,consumers,acked,msgs_per_s,p50_us,p99_us,max_us,redelivered,errors,crash_first_ms,crash_all_ms,crash_missing,failover_ms,ratio_to,ratio`:

    * `msgs_per_s` - messages acked over the row's time (until its last
      consumer stopped: it stops once all that was pushed is acked, or
      5 s past the row's end);
    * `p50_us`, `p99_us`, `max_us` - from push to a consumer's delivery;
    * `redelivered` - deliveries after the first during the load (a
      message not acked within `--ack-wait`);
    * `errors` - pushes, fetches or acks that failed;
    * `crash_first_ms`, `crash_all_ms`, `crash_missing` - the crash above;
    * `failover_ms` - on the first `ringbus_r3` row of each size;
    * `ratio_to`, `ratio` - the targets' ratios: `ringbus_r3`'s rate over
      `jetstream_r3`'s, `ringbus_memory`'s over `redis_aof_always`'s (same
      size and consumers); empty on the other rows.

  Then the ratios the targets name (the bench prints them; it does not
  judge them): `ringbus_r3` over `jetstream_r3` in msgs/s, and
  `ringbus_memory` over `redis_aof_always` (per core with `--pin`).

  ## Command line options

    * `--only` - comma-separated, some of
      `ringbus_memory,ringbus_r1,ringbus_r3,redis_aof_always,jetstream_r3,rabbitmq_quorum`.
      Defaults to all.
    * `--sizes` - payload sizes in bytes, at least 8. Defaults to `16,1024`.
    * `--consumers` - consumer counts. Defaults to `1,4`.
    * `--producers` - producers of each row. Defaults to `2`.
    * `--seconds` - seconds of load per row at most. Defaults to `3`.
    * `--max-messages` - messages per row at most. Defaults to `1000000`.
    * `--batch` - messages a push or a fetch carries at most. Defaults to `100`.
    * `--backlog` - messages pushed and not acked at most. Defaults to `2000`.
    * `--ack-wait` - ms before an unacked message is delivered again.
      Defaults to `1000`.
    * `--ack-apart` - Ringbus's consumers ack each batch in a request of
      its own, as the other systems' do, not with their next fetch (see
      `ringbus_memory`).
    * `--pin` - the per-core mode (see above).
    * `-o`, `--out` - write the CSV to this file.
    * `-q`, `--quiet` - no progress lines (they go to stderr).
  """

  alias Ringbus.Bench.{Args, Pin, RedisServer}

  alias Ringbus.Bench.Groups.{
    Failover,
    JetStreamClient,
    Load,
    RabbitClient,
    RabbitServers,
    RedisClient,
    Report,
    RingbusClient
  }

  alias Ringbus.Bench.Replication.{JetStreamAdmin, NatsClient, NatsServers, Samples}
  alias Ringbus.Test.{Nodes, RespClient}

  @compile {:no_warn_undefined, :amqp_channel}

  @systems ~w(ringbus_memory ringbus_r1 ringbus_r3 redis_aof_always jetstream_r3 rabbitmq_quorum)
  @switches [
    only: :string,
    sizes: :string,
    consumers: :string,
    producers: :integer,
    seconds: :integer,
    max_messages: :integer,
    batch: :integer,
    backlog: :integer,
    ack_wait: :integer,
    ack_apart: :boolean,
    pin: :boolean,
    out: :string,
    quiet: :boolean
  ]
  @aliases [o: :out, q: :quiet]
  # What a fetch waits for a message when there is none.
  @wait_ms 100
  # Every ring, stream or log of a size holds at most this much.
  @retain_bytes 64 * 1_048_576
  # RabbitMQ's nodes, as many as JetStream's servers and `ringbus_r3`'s members.
  @rabbit_nodes 3

  @doc "Runs the bench with command line `args`; returns the rows."
  @spec run([String.t()]) :: [map()]
  def run(args) do
    config = args |> Args.parse!(@switches, @aliases) |> config!()
    check_available!(config)

    IO.puts(
      "Consumer groups: #{Enum.join(config.systems, ", ")}; sizes #{Enum.join(config.sizes, ", ")} B; " <>
        "consumers #{Enum.join(config.consumers, ", ")}, producers #{config.run.producers}, " <>
        "batch #{config.run.batch}, backlog #{config.run.backlog}, ack wait #{config.run.ack_wait} ms; " <>
        "#{config.seconds} s or #{config.run.max} messages a row; " <>
        "#{if config.pin, do: "ringbus_memory and redis_aof_always pinned, the rest shared", else: "shared mode"}; " <>
        "OTP #{System.otp_release()}, #{:erlang.system_info(:logical_processors_available)} cores\n"
    )

    rows =
      for size <- config.sizes,
          system <- [
            "ringbus_memory",
            "redis_aof_always",
            "ringbus",
            "jetstream_r3",
            "rabbitmq_quorum"
          ],
          row <- run_system(system, size, config),
          do: row

    Report.print(rows)
    if config.out, do: Report.write!(config.out, rows)
    rows
  end

  defp config!(opts) do
    sizes = Args.sizes!(opts[:sizes], [16, 1024])

    if hd(sizes) < 8,
      do: Mix.raise("expected --sizes to be at least 8 (a payload carries its push time)")

    seconds = Args.positive!(opts, :seconds, 3)

    %{
      systems: Enum.filter(@systems, &(&1 in Args.names!(opts, :only, @systems, "system"))),
      sizes: sizes,
      consumers: Args.sizes!(opts[:consumers], [1, 4], "--consumers"),
      seconds: seconds,
      pin: Keyword.get(opts, :pin, false),
      out: opts[:out],
      quiet: Keyword.get(opts, :quiet, false),
      run: %{
        producers: Args.positive!(opts, :producers, 2),
        batch: Args.positive!(opts, :batch, 100),
        backlog: Args.positive!(opts, :backlog, 2_000),
        ack_wait: Args.positive!(opts, :ack_wait, 1_000),
        ack_apart: Keyword.get(opts, :ack_apart, false),
        max: Args.positive!(opts, :max_messages, 1_000_000),
        ms: seconds * 1_000,
        wait_ms: @wait_ms
      }
    }
  end

  defp check_available!(config) do
    if config.pin, do: Pin.check!()

    if "jetstream_r3" in config.systems and NatsServers.executable() == nil,
      do:
        Mix.raise("nats-server is not installed (Debian: nats-server); or leave out jetstream_r3")

    if "redis_aof_always" in config.systems and not RedisServer.available?(),
      do:
        Mix.raise(
          "redis-server is not on the PATH (Debian: redis-server); or leave out redis_aof_always"
        )

    if "rabbitmq_quorum" in config.systems, do: rabbit_available!()
  end

  defp rabbit_available! do
    if System.find_executable("erl") == nil, do: Mix.raise("erl is not on the PATH")
    RabbitServers.ensure!()
  rescue
    e in RuntimeError ->
      Mix.raise("RabbitMQ cannot be started: #{e.message}; or leave out rabbitmq_quorum")
  end

  defp run_system("ringbus", size, config) do
    if Enum.any?(["ringbus_r1", "ringbus_r3"], &(&1 in config.systems)),
      do: replicated(size, config),
      else: []
  end

  defp run_system(system, size, config) do
    if system in config.systems, do: run_one(system, size, config), else: []
  end

  # One row per count of consumers, each with a group of its own.
  defp rows(system, size, config, extra, fun) do
    for consumers <- config.consumers do
      progress(config, "#{system} #{size} B, #{consumers} consumer(s)")
      run = Map.merge(config.run, %{size: size, consumers: consumers})
      {summary, crash} = fun.("g#{consumers}", run)

      if summary.errors > 0,
        do: progress(config, "    #{summary.errors} pushes, fetches or acks failed")

      summary
      |> Map.merge(extra)
      |> Map.merge(%{
        system: system,
        payload: size,
        producers: run.producers,
        consumers: consumers,
        crash: crash
      })
    end
  end

  ## Ringbus memory, in this VM

  defp run_one("ringbus_memory", size, config) do
    channel = "groups_bench_memory_#{size}_#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(channel, capacity: capacity(size, config))
    core = if config.pin, do: Pin.server_core()
    extra = %{replicas: 1, durable: "memory", mode: Pin.mode(core), clients_on: "same_node"}

    try do
      Pin.on_core(core, "ringbus_memory", fn ->
        rows("ringbus_memory", size, config, extra, fn group, run ->
          :ok = create_group(channel, group, run)
          target = %{channel: channel, group: group}
          {Load.run(RingbusClient, target, run), Load.crash(RingbusClient, target, run)}
        end)
      end)
    after
      Ringbus.delete(channel)
    end
  end

  ## Redis

  defp run_one("redis_aof_always", size, config) do
    dir =
      Path.join(System.tmp_dir!(), "ringbus_bench_groups_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)

    {server_core, generator_core} =
      if config.pin, do: {Pin.server_core(), Pin.generator_core()}, else: {nil, nil}

    args = ["--appendonly", "yes", "--appendfsync", "always"]
    redis = RedisServer.start!(dir: dir, args: args, core: server_core)
    extra = %{replicas: 1, durable: "fsync", mode: Pin.mode(server_core), clients_on: "bench_vm"}

    try do
      Pin.on_core(generator_core, "redis clients", fn ->
        rows("redis_aof_always", size, config, extra, fn group, run ->
          admin = RespClient.connect!(redis.port)
          {[{:simple, "OK"}], _} = RespClient.call(admin, ~w(XGROUP CREATE s #{group} $ MKSTREAM))
          RespClient.close(admin)

          target = %{port: redis.port, stream: "s", group: group, ack_wait: run.ack_wait}
          target = Map.put(target, :maxlen, capacity(size, config))
          {Load.run(RedisClient, target, run), Load.crash(RedisClient, target, run)}
        end)
      end)
    after
      RedisServer.stop(redis)
      File.rm_rf!(dir)
    end
  end

  ## JetStream

  defp run_one("jetstream_r3", size, config) do
    progress(config, "jetstream_r3 #{size} B: starting 3 nats-servers")
    nats = NatsServers.start!()
    stream = "GROUPS_#{size}"
    subject = "groups.#{size}"
    extra = %{replicas: 3, durable: "written", mode: "shared", clients_on: "bench_vm"}

    try do
      {:ok, admin} = NatsClient.connect(hd(nats.servers).port)

      json =
        ~s({"name":"#{stream}","subjects":["#{subject}"],"storage":"file","num_replicas":3,) <>
          ~s("retention":"limits","discard":"old","max_bytes":#{@retain_bytes},"max_msgs":#{capacity(size, config)}})

      deadline = Samples.now() + 30_000_000
      :ok = JetStreamAdmin.create!(admin, "$JS.API.STREAM.CREATE.#{stream}", json, deadline)
      leader = NatsServers.server!(nats, JetStreamAdmin.leader!(admin, stream, deadline))

      rows("jetstream_r3", size, config, extra, fn group, run ->
        :ok = durable!(admin, stream, group, run)
        target = %{port: leader.port, stream: stream, subject: subject, durable: group}
        {Load.run(JetStreamClient, target, run), Load.crash(JetStreamClient, target, run)}
      end)
    after
      NatsServers.stop(nats)
    end
  end

  ## RabbitMQ quorum queues

  defp run_one("rabbitmq_quorum", size, config) do
    progress(config, "rabbitmq_quorum #{size} B: starting #{@rabbit_nodes} RabbitMQ nodes")
    rabbit = RabbitServers.start!(@rabbit_nodes)
    leader = hd(rabbit.nodes)
    leader_node = leader.node
    extra = %{replicas: @rabbit_nodes, durable: "fsync", mode: "shared", clients_on: "bench_vm"}

    try do
      :ok = RabbitServers.load_client!(RabbitServers.home())

      rows("rabbitmq_quorum", size, config, extra, fn group, run ->
        queue = "groups_#{size}_#{group}"
        :ok = declare_quorum!(leader.port, queue, capacity(size, config))
        %{leader: ^leader_node} = RabbitServers.quorum_members!(rabbit, queue)
        target = %{port: leader.port, queue: queue, prefetch: run.batch}
        {Load.run(RabbitClient, target, run), Load.crash(RabbitClient, target, run)}
      end)
    after
      RabbitServers.stop(rabbit)
    end
  end

  # A quorum queue of every node, led by the node it is declared through,
  # bounded as the other systems' streams are (the oldest dropped).
  defp declare_quorum!(port, queue, capacity) do
    admin = RabbitClient.producer(%{port: port, queue: queue}, 0)

    arguments = [
      {"x-queue-type", :longstr, "quorum"},
      {"x-quorum-initial-group-size", :long, @rabbit_nodes},
      {"x-queue-leader-locator", :longstr, "client-local"},
      {"x-max-length", :long, capacity},
      {"x-max-length-bytes", :long, @retain_bytes}
    ]

    declare =
      RabbitClient.method(:"queue.declare", queue: queue, durable: true, arguments: arguments)

    ok = :amqp_channel.call(admin.channel, declare)
    RabbitClient.close(admin)
    if elem(ok, 0) == :"queue.declare_ok", do: :ok, else: raise("queue.declare: #{inspect(ok)}")
  end

  # A durable pull consumer of the messages published from now on.
  defp durable!(admin, stream, name, run) do
    json =
      ~s({"stream_name":"#{stream}","config":{"durable_name":"#{name}","deliver_policy":"new",) <>
        ~s("ack_policy":"explicit","ack_wait":#{run.ack_wait * 1_000_000},) <>
        ~s("max_ack_pending":#{max_pending(run)},"max_waiting":512}})

    api = "$JS.API.CONSUMER.DURABLE.CREATE.#{stream}.#{name}"
    JetStreamAdmin.create!(admin, api, json, Samples.now() + 30_000_000)
  end

  ## Ringbus replicas: 1 and 3, on three :peer nodes

  defp replicated(size, config) do
    progress(config, "ringbus #{size} B: starting 3 nodes")
    Nodes.with_joined(3, "bench_groups", [net_ticktime: 4], &replicated_rows(&1, size, config))
  end

  defp replicated_rows([a | _] = nodes, size, config) do
    capacity = capacity(size, config)
    :ok = Nodes.call(a, Ringbus, :create, ["r3", [capacity: capacity, replicas: 3]], 60_000)
    {:ok, info} = Nodes.call(a, Ringbus, :info, ["r3"])
    leader = Enum.find(nodes, &(&1.node == info.leader))
    # The clients' node: a member that does not lead `r3`, and the member of `r1`.
    load = Enum.find(nodes, &(&1 != leader))
    :ok = Nodes.call(load, Ringbus, :create, ["r1", [capacity: capacity, replicas: 1]], 60_000)

    on_load = fn system, channel, replicas ->
      extra = %{replicas: replicas, durable: "fsync", mode: "shared", clients_on: "r3_follower"}

      rows(system, size, config, extra, fn group, run ->
        :ok = Nodes.call(load, __MODULE__, :create_group, [channel, group, run], 30_000)
        target = %{channel: channel, group: group}
        timeout = run.ms + 120_000
        summary = Nodes.call(load, Load, :run, [RingbusClient, target, run], timeout)
        {summary, Nodes.call(load, Load, :crash, [RingbusClient, target, run], timeout)}
      end)
    end

    r1 = if "ringbus_r1" in config.systems, do: on_load.("ringbus_r1", "r1", 1), else: []

    if "ringbus_r3" in config.systems do
      [first | rest] = on_load.("ringbus_r3", "r3", 3)
      r1 ++ [Map.put(first, :failover, failover(nodes, load, config)) | rest]
    else
      r1
    end
  end

  # The leader as the clients' node sees it now (it may have moved since
  # the channel's creation); the probe runs on a member that is not it.
  defp failover(nodes, load, config) do
    {:ok, info} = Nodes.call(load, Ringbus, :info, ["r3"])
    leader = Enum.find(nodes, &(&1.node == info.leader)) || raise "r3 has no leader"
    probe = if load != leader, do: load, else: Enum.find(nodes, &(&1 != leader))
    progress(config, "ringbus_r3: kill -9 of the leader's node #{leader.node}")
    :ok = Nodes.call(probe, __MODULE__, :create_group, ["r3", "failover", config.run], 30_000)
    args = ["r3", "failover", leader.os_pid, 30_000]
    result = Nodes.call(probe, Failover, :run, args, 40_000)

    Map.merge(result, %{
      killed: leader.node,
      leader_after: new_leader(probe, leader),
      probe: probe.node
    })
  end

  # Ra's info is as of its last tick: a new leader shows within a few seconds.
  defp new_leader(probe, old) do
    leader = fn -> elem(Nodes.call(probe, Ringbus, :info, ["r3"]), 1).leader end
    deadline = System.monotonic_time(:millisecond) + 10_000
    _ = Nodes.wait_until(deadline, fn -> leader.() not in [nil, old.node] end)
    leader.()
  end

  @doc false
  # Runs where the channel's clients run (through `:peer` for a replicated one).
  @spec create_group(Ringbus.name(), binary(), map()) :: :ok | {:error, term()}
  def create_group(channel, group, run) do
    Ringbus.Groups.create(channel, group,
      from: :latest,
      ack_wait: run.ack_wait,
      max_pending: max_pending(run)
    )
  end

  # Room for the whole backlog, and a batch for each consumer on top.
  defp max_pending(run),
    do: min(run.backlog + run.batch * Map.get(run, :consumers, 1), 1_000_000)

  # A ring or stream keeps a size's messages, up to 64 MB.
  defp capacity(size, config),
    do: (config.run.max * 2) |> min(div(@retain_bytes, size)) |> max(10_000)

  defp progress(%{quiet: true}, _message), do: :ok
  defp progress(_config, message), do: IO.puts(:stderr, "==> " <> message)
end
