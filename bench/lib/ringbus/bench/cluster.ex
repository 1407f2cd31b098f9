defmodule Ringbus.Bench.Cluster do
  @moduledoc """
  The cluster bench: what a producer on one node goes through when another
  node it sends to goes silent, with the field report's naive sends and with
  Ringbus's links, in one run; then Ringbus's throughput over a link beside
  the same work done locally.

      mix ringbus.bench cluster
      mix ringbus.bench cluster --silent-s 10 --out cluster.csv --throughput-out link.csv
      mix ringbus.bench cluster --variants nosuspend,ringbus --silent-s 3   # a quick look

  The report ("Some surprising Erlang behavior", 2015): a process that sends
  to a node gone network-silent is suspended once the distribution buffer
  fills, and after the node is declared down, halted for `net_setuptime`
  (7 s) on every send that tries to reconnect. The cures it found:
  `erlang:send/3` with `[:noconnect, :nosuspend]`, and per-node proxies.

  ## What it does

  Each variant gets three fresh nodes, A, B and C, started with `:peer` on
  127.0.0.1 (`Ringbus.Test.Nodes`), all running Ringbus and joined
  into one cluster, with `net_ticktime` `--net-ticktime`. A producer process
  on A calls `--rate` times a second in all, taking turns between a target
  on B (live) and one on C (silent). After `--before-ms`, the bench sends C
  SIGSTOP; `--silent-s` seconds later, SIGCONT; the producer goes on for
  `--after-ms` more. The variants, each a row:

    * `plain_send` - `send/2` to a process on B and one on C (the report's
      naive way);
    * `noconnect` - `:erlang.send/3` with `[:noconnect]`;
    * `nosuspend` - `:erlang.send/3` with `[:noconnect, :nosuspend]`, no link;
    * `ringbus` - `Ringbus.push/2` to a channel homed on B and one on C,
      through the links, with the cluster's default options.

  Every variant carries the same payload, 1 KB by default (`--payload`), so
  that the distribution buffer fills within the silence as it did for the
  report (16 bytes at the default rate would take minutes). With the
  default `--net-ticktime` of 4 s, C is declared down during a 10 s silence,
  so both of the report's stalls can show: the suspension while the buffer
  is full, then the reconnection attempts. Ringbus's reconnection (every
  250 ms, in processes of their own) runs under every variant, since every
  node runs Ringbus; it is what reconnects `noconnect` and `nosuspend`,
  which never connect by themselves. The producer is paced: after a stall
  it skips the calls it missed rather than bursting them.

  ## Output

  A table and, with `--out`, CSV with the columns
  `variant,silent_s,max_block_ms,p99_block_ms,msgs_to_live_per_s,live_ratio,heal_ms`:

    * `max_block_ms`, `p99_block_ms` - the longest and the 99th-percentile
      time one producer call took, over the calls made from SIGSTOP to the
      end (the silence and the healing);
    * `msgs_to_live_per_s` - calls to B that succeeded (a send returned, a
      push was stored) per second during the silence;
    * `live_ratio` - that over the same before the silence;
    * `heal_ms` - from SIGCONT to the first message sent after it that C
      accepted: a push to C that returned its seq, or a message to C's sink
      that arrived. Empty if none did before the end.

  Targets for `ringbus`: `max_block_ms` <= 110 (a push in flight when C
  stops waits `:reply_timeout`, 100 ms, for its answer, then returns
  `{:error, :timeout}`), `p99_block_ms` <= 10, `live_ratio` >= 0.9,
  `heal_ms` <= 1000. `plain_send` should show the report's multi-second
  stall. As a control for what the machine alone costs a process that
  waits, a process on A sleeps 1 ms in a loop during each run, and the
  bench prints how late it woke at worst.

  Then, unless `--no-throughput`, on two fresh nodes (with `call_timeout`
  and `busy_timeout` of 5 s, since these runs measure throughput, not
  waits) with 16-byte payloads:
  remote ingest (`push_many/2` of `--batch` messages from `--producers`
  processes on A into a channel on B, each waiting for each of its pushes,
  so that the link has several requests to batch) beside the same pushes
  into a channel on A, and
  remote subscription delivery (a subscriber on A to a prefilled channel on
  B, acking every batch, credit 10,000, batches of 1,000) beside a
  subscriber on B. Targets: remote ingest >= 2M msg/s, remote delivery
  >= 1M msg/s. `--throughput-out` writes them as CSV with the columns
  `case,where,messages,msgs_per_s,mb_per_s`.

  ## Command line options

    * `--variants` - comma-separated. Defaults to
      `plain_send,noconnect,nosuspend,ringbus`.
    * `--silent-s` - seconds C stays stopped. Defaults to `10`.
    * `--before-ms` - ms of calls before SIGSTOP. Defaults to `3000`.
    * `--after-ms` - ms of calls after SIGCONT. Defaults to `3000`.
    * `--rate` - producer calls per second, both targets together.
      Defaults to `10000`.
    * `--payload` - payload bytes of the variants. Defaults to `1024`.
    * `--net-ticktime` - the nodes' `net_ticktime` in seconds. Defaults to `4`.
    * `--ingest-messages` - messages of each ingest run. Defaults to `2000000`.
    * `--sub-messages` - messages of each delivery run. Defaults to `1000000`.
    * `--batch` - messages per `push_many/2` of the ingest runs. Defaults to `1000`.
    * `--producers` - processes pushing at once in the ingest runs. Defaults to `4`.
    * `--no-throughput` - skip the throughput runs.
    * `-o`, `--out` - write the variant rows as CSV to this file.
    * `--throughput-out` - write the throughput rows as CSV to this file.
    * `-q`, `--quiet` - no progress lines (they go to stderr).
  """

  alias Ringbus.Bench.{Args, CSV}
  alias Ringbus.Bench.Cluster.Producer
  alias Ringbus.Test.Nodes

  @variants ~w(plain_send noconnect nosuspend ringbus)

  @switches [
    variants: :string,
    silent_s: :integer,
    before_ms: :integer,
    after_ms: :integer,
    rate: :integer,
    payload: :integer,
    net_ticktime: :integer,
    ingest_messages: :integer,
    sub_messages: :integer,
    batch: :integer,
    producers: :integer,
    throughput: :boolean,
    out: :string,
    throughput_out: :string,
    quiet: :boolean
  ]

  @aliases [o: :out, q: :quiet]

  @header ~w(variant silent_s max_block_ms p99_block_ms msgs_to_live_per_s live_ratio heal_ms)
  @throughput_header ~w(case where messages msgs_per_s mb_per_s)

  @doc "Runs the bench with command line arguments; returns `{variant_rows, throughput_rows}`."
  @spec run([String.t()]) :: {[map()], [map()]}
  def run(args) do
    {opts, _} = OptionParser.parse!(args, strict: @switches, aliases: @aliases)
    config = config!(opts)

    IO.puts(
      "Ringbus cluster: 3 fresh :peer nodes per variant on 127.0.0.1, net_ticktime #{config.net_ticktime} s; " <>
        "producer on A at #{config.rate} calls/s, B live, C SIGSTOPped for #{config.silent_s} s; " <>
        "payload #{config.payload} B; OTP #{System.otp_release()}, " <>
        "#{:erlang.system_info(:logical_processors_available)} cores\n"
    )

    rows = Enum.map(config.variants, &run_variant(&1, config))
    print(rows)
    throughput = if config.throughput, do: throughput(config), else: []

    if config.out do
      CSV.write!(config.out, @header, Enum.map(rows, &csv_row/1))
      IO.puts("wrote #{config.out}")
    end

    if config.throughput_out do
      CSV.write!(
        config.throughput_out,
        @throughput_header,
        Enum.map(throughput, &throughput_csv/1)
      )

      IO.puts("wrote #{config.throughput_out}")
    end

    {rows, throughput}
  end

  defp config!(opts) do
    variants = Args.names!(opts, :variants, @variants, "variant")

    %{
      variants: Enum.map(variants, &String.to_atom/1),
      silent_s: Args.positive!(opts, :silent_s, 10),
      before_ms: Args.positive!(opts, :before_ms, 3_000),
      after_ms: Args.positive!(opts, :after_ms, 3_000),
      rate: Args.positive!(opts, :rate, 10_000),
      payload: Args.positive!(opts, :payload, 1_024),
      net_ticktime: Args.positive!(opts, :net_ticktime, 4),
      ingest_messages: Args.positive!(opts, :ingest_messages, 2_000_000),
      sub_messages: Args.positive!(opts, :sub_messages, 1_000_000),
      batch: Args.positive!(opts, :batch, 1_000),
      producers: Args.positive!(opts, :producers, 4),
      throughput: Keyword.get(opts, :throughput, true),
      out: opts[:out],
      throughput_out: opts[:throughput_out],
      quiet: Keyword.get(opts, :quiet, false)
    }
  end

  ## Variants

  defp run_variant(variant, config) do
    progress(config, "#{variant}: starting 3 nodes")

    Nodes.with_joined(
      3,
      "bench_cluster_#{variant}",
      [net_ticktime: config.net_ticktime],
      &measure(variant, &1, config)
    )
  end

  defp measure(variant, [a, b, c], config) do
    targets = targets(variant, [a, b, c], config)
    now = System.os_time(:microsecond)
    start = now + 500_000
    stop = start + config.before_ms * 1_000
    cont = stop + config.silent_s * 1_000_000
    schedule = %{start: start, stop: stop, cont: cont, finish: cont + config.after_ms * 1_000}

    producer =
      Task.async(fn ->
        timeout = div(schedule.finish - now, 1_000) + 60_000

        Nodes.call(
          a,
          Producer,
          :run,
          [variant, targets, schedule, config.rate, config.payload],
          timeout
        )
      end)

    sleep_until(stop)
    Nodes.signal(c, :stop)
    progress(config, "#{variant}: C stopped for #{config.silent_s} s")
    sleep_until(cont)
    Nodes.signal(c, :cont)
    if variant != :ringbus, do: Nodes.call(c, Producer, :mark_cont, [targets.silent, cont])
    progress(config, "#{variant}: C continued")
    result = Task.await(producer, :infinity)

    healed_at =
      if variant == :ringbus,
        do: result.healed_at,
        else: elem(Nodes.call(c, Producer, :sink_stats, [targets.silent]), 1)

    before_rate = result.live_before / (config.before_ms / 1_000)
    silent_rate = result.live_silent / config.silent_s

    %{
      variant: variant,
      silent_s: config.silent_s,
      max_block_ms: result.max_block_us && result.max_block_us / 1_000,
      p99_block_ms: result.p99_block_us && result.p99_block_us / 1_000,
      msgs_to_live_per_s: round(silent_rate),
      live_ratio: if(before_rate > 0, do: silent_rate / before_rate),
      heal_ms: healed_at && max(healed_at - cont, 0) / 1_000,
      calls: result.calls,
      results: result.results,
      slowest: result.slowest,
      lateness_ms: result.lateness_us && result.lateness_us / 1_000
    }
  end

  # Rings of at most 32 MB each: a drop-oldest ring keeps the newest.
  defp targets(:ringbus, [a, b, c], config) do
    opts = [capacity: max(div(32 * 1_048_576, config.payload), 100)]

    for {name, home} <- [{"live", b}, {"silent", c}],
        do: :ok = Nodes.call(a, Ringbus, :create, [name, [node: home.node] ++ opts])

    %{live: "live", silent: "silent"}
  end

  defp targets(_bare, [_a, b, c], _config) do
    %{
      live: Nodes.call(b, Producer, :start_sink, []),
      silent: Nodes.call(c, Producer, :start_sink, [])
    }
  end

  # The clock shared by every node on the machine.
  defp sleep_until(at) do
    ms = div(at - System.os_time(:microsecond), 1_000)
    if ms > 0, do: Process.sleep(ms)
  end

  ## Throughput over a link

  defp throughput(config) do
    progress(config, "throughput: starting 2 nodes")
    cluster = [call_timeout: 5_000, busy_timeout: 5_000]

    opts = [net_ticktime: config.net_ticktime, cluster: cluster]
    Nodes.with_joined(2, "bench_cluster_link", opts, &link_throughput(&1, config))
  end

  @link_payload 16

  defp link_throughput([a, b], config) do
    # Whole batches only.
    config = %{
      config
      | ingest_messages: max(div(config.ingest_messages, config.batch), 1) * config.batch,
        sub_messages: max(div(config.sub_messages, config.batch), 1) * config.batch
    }

    capacity = max(config.ingest_messages, config.sub_messages)

    for {name, home} <- [{"near", a}, {"far", b}, {"fill", b}],
        do: :ok = Nodes.call(a, Ringbus, :create, [name, [capacity: capacity, node: home.node]])

    ingest = fn node, name, messages ->
      args = [name, messages, @link_payload, config.batch, config.producers]
      Nodes.call(node, Producer, :ingest, args, 600_000)
    end

    progress(config, "throughput: remote ingest")
    far = ingest.(a, "far", config.ingest_messages)
    progress(config, "throughput: local ingest")
    near = ingest.(a, "near", config.ingest_messages)
    {_seconds, true} = ingest.(b, "fill", config.sub_messages)

    deliver = fn node ->
      args = ["fill", config.sub_messages, [max_credit: 10_000, max_batch: 1_000]]
      Nodes.call(node, Producer, :deliver, args, 600_000)
    end

    progress(config, "throughput: remote delivery")
    remote = deliver.(a)
    progress(config, "throughput: local delivery")
    local = deliver.(b)

    kind = "ingest (#{config.producers} producers, push_many of #{config.batch})"

    rows = [
      rate(kind, "remote", config.ingest_messages, far),
      rate(kind, "local", config.ingest_messages, near),
      rate("subscription delivery", "remote", config.sub_messages, remote),
      rate("subscription delivery", "local", config.sub_messages, local)
    ]

    print_throughput(rows)
    rows
  end

  defp rate(kind, where, messages, {seconds, ok?}) do
    if ok? != true, do: Mix.raise("#{kind} #{where}: not every message made it: #{inspect(ok?)}")
    per_s = messages / seconds

    %{
      case: kind,
      where: where,
      messages: messages,
      msgs_per_s: round(per_s),
      mb_per_s: per_s * @link_payload / 1_048_576
    }
  end

  ## Output

  defp print(rows) do
    IO.puts("")

    IO.puts(
      line([
        "variant",
        "max block ms",
        "p99 block ms",
        "to B/s in silence",
        "live ratio",
        "heal ms",
        "calls",
        "outcomes (to C)"
      ])
    )

    for r <- rows do
      to_c = for {{:silent, outcome}, n} <- Enum.sort(r.results), do: "#{outcome} #{n}"

      IO.puts(
        line([
          r.variant,
          fmt(r.max_block_ms),
          fmt(r.p99_block_ms),
          r.msgs_to_live_per_s,
          fmt(r.live_ratio),
          fmt(r.heal_ms),
          r.calls,
          Enum.join(to_c, ", ")
        ])
      )
    end

    IO.puts("\nThe five longest calls of each variant (ms, to, phase, outcome):")

    for r <- rows do
      slowest =
        for {us, to, phase, outcome} <- Enum.reverse(r.slowest),
            do: "#{fmt(us / 1_000)} #{to} #{phase} #{outcome}"

      IO.puts("  #{r.variant}: " <> Enum.join(slowest, "; "))
    end

    IO.puts(
      "\nThe machine alone: a process on A sleeping 1 ms in a loop woke at worst " <>
        Enum.map_join(rows, ", ", &"#{fmt(&1.lateness_ms)} ms late (#{&1.variant})") <> "."
    )

    IO.puts(
      "\nTargets for ringbus: max block <= 110 ms (reply_timeout + 10), p99 block <= 10 ms, " <>
        "live ratio >= 0.9, heal <= 1000 ms.\n"
    )
  end

  defp print_throughput(rows) do
    IO.puts(line(["16 B messages", "where", "messages", "msgs/s", "MB/s"]))
    for r <- rows, do: IO.puts(line([r.case, r.where, r.messages, r.msgs_per_s, fmt(r.mb_per_s)]))
    IO.puts("\nTargets: remote ingest >= 2M msg/s, remote delivery >= 1M msg/s.\n")
  end

  defp line(cells), do: Enum.map_join(cells, " | ", &to_string/1)

  defp fmt(nil), do: "-"
  defp fmt(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 2)
  defp fmt(x), do: to_string(x)

  defp csv_row(r),
    do: [
      r.variant,
      r.silent_s,
      r.max_block_ms,
      r.p99_block_ms,
      r.msgs_to_live_per_s,
      r.live_ratio,
      r.heal_ms
    ]

  defp throughput_csv(r), do: [r.case, r.where, r.messages, r.msgs_per_s, r.mb_per_s]

  defp progress(%{quiet: true}, _message), do: :ok
  defp progress(_config, message), do: IO.puts(:stderr, "==> " <> message)
end
