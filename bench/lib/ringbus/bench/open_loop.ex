defmodule Ringbus.Bench.OpenLoop do
  @moduledoc """
  The open-loop latency bench with a generator in C: requests sent at fixed
  rates, each timed from the moment it was due to leave, against Redis,
  Ringbus's RESP port, Ringbus's binary port and a bare C responder (the
  floor), at 10%, 25%, 50% and 75% of Redis's per-core peak.

      mix ringbus.bench openloop
      mix ringbus.bench openloop --pin --seconds 5 --out openloop.csv --svg openloop.svg
      mix ringbus.bench openloop --rates 25 --connections 16 --systems floor,redis_xadd~,ringbus_xadd~

  `mix ringbus.bench latency` does the same with a generator in the BEAM,
  whose own p99.9 send lag (2.7-13 ms) was above every tail it was meant to
  measure. This one is `bench/c/openloop.c`, one thread on epoll, built with
  Debian's gcc into `_build/bench/openloop` when missing or older than its
  source (`Ringbus.Bench.OpenLoop.Program`).

  ## What it runs

  Per mode: a `redis-server` (`Ringbus.Bench.RedisServer`), a
  `Ringbus.Server` in a BEAM of its own (`Ringbus.Bench.ServerProcess`) and
  the floor, `openloop floor`, which answers every RESP command at once
  with `+PONG` or `+OK` and stores nothing. Redis's peak is measured first
  with

      taskset -c 1 redis-benchmark -c 50 -P 16 -n PEAK_REQUESTS XADD s MAXLEN 200000 * f <16 bytes>

  against a Redis on core 0 (or taken from `--peak`): the peak of one core
  of Redis, whatever the modes. Then, for each mode, connection count, rate
  and system, the generator sends `rate x --seconds` requests:

    * `floor` - `PING` to the floor: what the generator and the loopback
      cost alone, the latency no row can go below;
    * `redis_xadd`, `ringbus_xadd` - `XADD s MAXLEN 200000 * f <16 bytes>`;
    * `redis_xadd~`, `ringbus_xadd~` - `XADD s MAXLEN ~ 100000 * f <16 bytes>`;
    * `ringbus_ping` (and `redis_ping`, not run by default) - `PING`;
    * `ringbus_push` - a binary `PUSH` of 16 bytes, acked, to a channel of
      200,000 messages (`overflow: :drop_oldest`).

  The stream `s` is deleted before each XADD row.

  ## Open loop

  Request `i` is due `floor(i / burst) * burst / rate` seconds after the
  start, on connection `i mod connections`, and is written then whatever
  the replies do; its latency runs from that intended time to its reply,
  so a stall is counted by every request due during it (no coordinated
  omission, as wrk2's README explains). A server that does not read makes
  the generator queue the bytes, not wait.

  ## When the generator fell behind

  The generator also times itself: how late after its intended time it
  wrote each request (the send lag, p99.9 and max), and the rate it
  achieved. A row is `BEHIND` only when the generator fell behind: its
  p99.9 send lag is above 1 ms, or it achieved more than 2% below its
  target (`Ringbus.Bench.OpenLoop.Result.behind?/1`). Its latencies then
  hold its own delay. The `floor` row of the same mode, connections and
  rate shows what the generator can measure there. A row whose
  `unanswered` is not 0 had requests unanswered 10 s after its last send;
  its percentiles are those of the answered ones.

  ## Modes

    * `pinned` - `redis-server`, the Ringbus server's BEAM (one scheduler,
      `+S 1 +SDcpu 1 +SDio 1`) and the floor on core 0, the generator on
      core 1 (`Ringbus.Bench.Pin`): one core of server, the generator off it.
      The generator polls for the last 50 us before each request is due
      (`--spin-us 50`), so that waking up does not delay its sends.
    * `shared` - every process on every core, the Ringbus server with its
      default schedulers. The generator sleeps until each request is due,
      leaving the CPU to the servers.

  ## Output

  A table per mode, and at the end the run's time. With `--out`, CSV with
  the columns
  `mode,system,command,connections,burst,pct_of_peak,target_rate,achieved_rate,behind,requests,answered,errors,unanswered,seconds,p50_ms,p99_ms,p999_ms,p9999_ms,max_ms,send_lag_p999_ms,send_lag_max_ms`.
  With `--svg`, HdrHistogram-style percentile curves (x: the percentile in
  nines, 0 to 99.999%; y: the latency, log scale) of every system at one
  load, a panel for each mode and connection count
  (`Ringbus.Bench.Chart.grid/2`).

  ## Command line options

    * `--peak N` - Redis's per-core peak XADD requests/s, instead of measuring it.
    * `--peak-requests N` - requests of the peak measurement. Default `500000`.
    * `--rates P,P,...` - the rates, percents of the peak. Default `10,25,50,75`.
    * `--connections N,N,...` - the generator's connections. Default `16,50`.
    * `--systems S,S,...` - of `floor,redis_xadd,redis_xadd~,redis_ping,ringbus_xadd,ringbus_xadd~,ringbus_ping,ringbus_push`.
      Default: all but `redis_ping`.
    * `--modes M,M` - `pinned`, `shared`. Default `pinned,shared`.
    * `--pin` - the pinned mode only (`--modes pinned`).
    * `--seconds S` - each row's sending time. Default `5`; at most 600.
    * `--burst B` - requests due together: `B` every `B / rate` seconds. Default `1`.
    * `--out FILE` - write the CSV to FILE.
    * `--svg FILE` - write the percentile curves to FILE.
    * `--svg-rate P` - the rate (percent of the peak) the curves are drawn
      at. Default: 25 if run, else the first of `--rates`.
  """

  alias Ringbus.Bench.{Args, Chart, CSV, Pin, RedisServer, Resp, ServerProcess, Table}
  alias Ringbus.Bench.OpenLoop.{Program, Result}

  @switches [
    peak: :integer,
    peak_requests: :integer,
    rates: :string,
    connections: :string,
    systems: :string,
    modes: :string,
    pin: :boolean,
    seconds: :float,
    burst: :integer,
    out: :string,
    svg: :string,
    svg_rate: :integer
  ]

  @payload :binary.copy("v", 16)
  @maxlen 200_000
  @channel "openloop"
  # Requests unanswered this long after the last send are counted, not waited for.
  @drain_s 10
  # On its own core the generator polls for the last 50 us before a request is due.
  @pinned_spin_us 50
  @max_seconds 600.0

  # system => {server, command, what the generator sends}
  @systems [
    {"floor", {:floor, "PING", {:resp, ["PING"]}}},
    {"redis_xadd", {:redis, "XADD", {:resp, ~w(XADD s MAXLEN #{@maxlen} * f) ++ [@payload]}}},
    {"redis_xadd~", {:redis, "XADD~", {:resp, ~w(XADD s MAXLEN ~ 100000 * f) ++ [@payload]}}},
    {"redis_ping", {:redis, "PING", {:resp, ["PING"]}}},
    {"ringbus_xadd",
     {:ringbus_resp, "XADD", {:resp, ~w(XADD s MAXLEN #{@maxlen} * f) ++ [@payload]}}},
    {"ringbus_xadd~",
     {:ringbus_resp, "XADD~", {:resp, ~w(XADD s MAXLEN ~ 100000 * f) ++ [@payload]}}},
    {"ringbus_ping", {:ringbus_resp, "PING", {:resp, ["PING"]}}},
    {"ringbus_push", {:ringbus_push, "PUSH", :push}}
  ]
  @names Enum.map(@systems, &elem(&1, 0))
  @default_systems @names -- ["redis_ping"]

  @header ~w(mode system command connections burst pct_of_peak target_rate achieved_rate behind) ++
            ~w(requests answered errors unanswered seconds p50_ms p99_ms p999_ms p9999_ms max_ms) ++
            ~w(send_lag_p999_ms send_lag_max_ms)

  @doc "Runs the bench with command line `args`; returns the rows."
  @spec run([String.t()]) :: [map()]
  def run(args) do
    config = args |> Args.parse!(@switches) |> config!()
    started = System.monotonic_time(:millisecond)
    exe = Program.build!()
    unless RedisServer.available?(), do: Mix.raise("redis-server is not on the PATH")
    if config.peak == nil or "pinned" in config.modes, do: Pin.check!()
    peak = config.peak || measure_peak(config)
    rows_planned = length(config.modes) * length(config.connections) * length(config.rates)
    rows_planned = rows_planned * length(config.systems)

    IO.puts(
      "Open loop (C generator): Redis per-core peak #{peak} XADD/s" <>
        if(config.peak,
          do: " (--peak)",
          else: " (redis-benchmark -c 50 -P 16, pinned, this run)"
        ) <>
        "; #{rows_planned} rows of #{config.seconds} s: about " <>
        "#{round(rows_planned * (config.seconds + 1))} s, at most " <>
        "#{round(rows_planned * (config.seconds + @drain_s + 2))} s"
    )

    rows = Enum.flat_map(config.modes, &run_mode(&1, exe, peak, config))
    if config.out, do: CSV.write!(config.out, @header, Enum.map(rows, &csv_row/1))
    if config.svg, do: write_svg(config, rows, peak)

    IO.puts("\nTook #{Float.round((System.monotonic_time(:millisecond) - started) / 1000, 1)} s.")

    rows
  end

  defp config!(opts) do
    seconds = Keyword.get(opts, :seconds, 5.0)

    unless seconds > 0 and seconds <= @max_seconds,
      do:
        Mix.raise("expected --seconds to be above 0 and at most #{@max_seconds}, got: #{seconds}")

    modes =
      if opts[:pin],
        do: ["pinned"],
        else: Args.names!(opts, :modes, ["pinned", "shared"], "mode")

    systems =
      Args.names!(
        Keyword.put_new(opts, :systems, Enum.join(@default_systems, ",")),
        :systems,
        @names,
        "system"
      )

    rates = positives!(opts, :rates, "10,25,50,75")

    %{
      peak: if(opts[:peak], do: Args.positive!(opts, :peak, 1)),
      peak_requests: Args.positive!(opts, :peak_requests, 500_000),
      rates: rates,
      connections: positives!(opts, :connections, "16,50"),
      systems: systems,
      modes: modes,
      seconds: seconds,
      burst: Args.positive!(opts, :burst, 1),
      out: opts[:out],
      svg: opts[:svg],
      svg_rate: opts[:svg_rate] || if(25 in rates, do: 25, else: hd(rates))
    }
  end

  defp positives!(opts, key, default) do
    text = Keyword.get(opts, key, default)

    values =
      for part <- String.split(text, ",", trim: true) do
        case Integer.parse(String.trim(part)) do
          {n, ""} when n > 0 -> n
          _ -> Mix.raise("expected --#{key} to be positive integers, got: #{inspect(text)}")
        end
      end

    if values == [], do: Mix.raise("expected --#{key} to name at least one value")
    values
  end

  ## Redis's per-core peak

  defp measure_peak(config) do
    bench =
      System.find_executable("redis-benchmark") || Mix.raise("redis-benchmark is not on the PATH")

    redis = RedisServer.start!(core: Pin.server_core())

    try do
      args =
        ~w(-h 127.0.0.1 -p #{redis.port} -c 50 -P 16 -n #{config.peak_requests} --csv) ++
          ~w(XADD s MAXLEN #{@maxlen} * f) ++ [@payload]

      {exe, args} = Pin.command(Pin.generator_core(), bench, args)
      shown = Enum.map_join(Enum.drop(args, -1), " ", &Path.basename/1)
      IO.puts(:stderr, "==> Redis per-core peak: #{Path.basename(exe)} #{shown} <16 bytes>")

      Resp.peak!(exe, args)
    after
      RedisServer.stop(redis)
    end
  end

  ## One mode

  defp run_mode(mode, exe, peak, config) do
    {server_core, generator_core} =
      if mode == "pinned", do: {Pin.server_core(), Pin.generator_core()}, else: {nil, nil}

    servers = servers(config.systems)

    with_servers(servers, exe, server_core, fn ports ->
      rows =
        for connections <- config.connections,
            pct <- config.rates,
            system <- config.systems do
          rate = max(round(peak * pct / 100), 1)
          {server, command, request} = system_spec(system)
          port = Map.fetch!(ports, server)
          if command in ["XADD", "XADD~"], do: RedisServer.del!(port, "s")

          run = %{
            spin_us: if(generator_core, do: @pinned_spin_us, else: 0),
            mode: mode,
            system: system,
            command: command,
            connections: connections,
            pct: pct,
            rate: rate,
            core: generator_core
          }

          measure(exe, run, port, request, config)
        end

      print(mode, rows)
      rows
    end)
  end

  defp system_spec(system), do: @systems |> List.keyfind(system, 0) |> elem(1)

  defp servers(systems), do: systems |> Enum.map(&elem(system_spec(&1), 0)) |> Enum.uniq()

  # Starts the servers the systems need, on `core` or unpinned; stops them after `fun`.
  defp with_servers(servers, exe, core, fun) do
    redis = if :redis in servers, do: RedisServer.start!(core: core)

    try do
      ringbus? = :ringbus_resp in servers or :ringbus_push in servers
      ringbus = if ringbus?, do: ServerProcess.start!(:ringbus, core: core)

      try do
        if :ringbus_push in servers,
          do: ServerProcess.command!(ringbus, "create #{@channel} #{@maxlen}")

        floor = if :floor in servers, do: Program.start_floor!(exe, core)

        try do
          fun.(%{
            floor: floor && floor.port,
            redis: redis && redis.port,
            ringbus_resp: ringbus && ringbus.ports.resp,
            ringbus_push: ringbus && ringbus.ports.binary
          })
        after
          if floor, do: Program.stop_floor(floor)
        end
      after
        if ringbus, do: ServerProcess.stop(ringbus)
      end
    after
      if redis, do: RedisServer.stop(redis)
    end
  end

  defp measure(exe, run, port, request, config) do
    args =
      ~w(--port #{port} --rate #{run.rate} --seconds #{config.seconds}) ++
        ~w(--connections #{run.connections} --burst #{config.burst} --drain #{@drain_s}) ++
        ~w(--spin-us #{run.spin_us}) ++
        request_args(request)

    IO.puts(
      :stderr,
      "==> #{run.mode} #{run.system}, #{run.connections} connections: " <>
        "#{max(round(run.rate * config.seconds), 1)} requests at #{run.rate}/s (#{run.pct}% of peak)"
    )

    case Program.generate(exe, args, run.core) do
      {:ok, result} ->
        Map.merge(run, %{
          result: result,
          burst: config.burst,
          seconds: config.seconds,
          behind: Result.behind?(result)
        })

      {:error, output} ->
        Mix.raise("#{run.system} at #{run.rate}/s: the generator failed: #{output}")
    end
  end

  defp request_args({:resp, command}), do: ["--proto", "resp", "--" | command]

  defp request_args(:push),
    do: ~w(--proto push --channel #{@channel} --payload #{byte_size(@payload)})

  ## Output

  @columns [
    {"system", 14, :left},
    {"conns", 5, :right},
    {"% peak", 7, :right},
    {"target/s", 9, :right},
    {"achieved/s", 11, :right},
    {"", 7, :right},
    {"errors", 7, :right},
    {"unanswered", 11, :right},
    {"p50 ms", 9, :right},
    {"p99 ms", 9, :right},
    {"p99.9 ms", 9, :right},
    {"p99.99 ms", 10, :right},
    {"max ms", 9, :right},
    {"lag p99.9", 10, :right},
    {"lag max", 9, :right}
  ]

  defp print(mode, rows) do
    IO.puts("\n#{mode}: " <> mode_line(mode))

    Table.print(@columns, rows, fn row ->
      r = row.result

      [
        row.system,
        row.connections,
        row.pct,
        row.rate,
        round(r.achieved_rate),
        if(row.behind, do: "BEHIND", else: ""),
        r.errors,
        r.unanswered
      ] ++ latencies_ms(r)
    end)

    IO.puts(
      "lag: how long after its intended time the generator wrote a request (ms). " <>
        "floor: PING to a bare C responder, the least any row can show."
    )

    if Enum.any?(rows, & &1.behind) do
      IO.puts(
        "BEHIND: the generator's p99.9 send lag was above 1 ms or it achieved more than " <>
          "2% below its target: that row's latencies include the generator's own delay."
      )
    end
  end

  defp mode_line("pinned"),
    do:
      "servers and floor on core 0 (the Ringbus BEAM with #{Pin.erl_flags()}), generator on core 1"

  defp mode_line("shared"), do: "every process on every core"

  defp ms(us), do: :erlang.float_to_binary(us / 1000, decimals: 3)

  defp csv_row(row) do
    r = row.result

    [
      row.mode,
      row.system,
      row.command,
      row.connections,
      row.burst,
      row.pct,
      row.rate,
      round(r.achieved_rate),
      if(row.behind, do: "yes", else: "no"),
      r.requests,
      r.answered,
      r.errors,
      r.unanswered,
      row.seconds
    ] ++ latencies_ms(r)
  end

  # The latency and send-lag columns of both the table and the CSV, in ms.
  defp latencies_ms(r) do
    for key <- ~w(p50_us p99_us p999_us p9999_us max_us lag_p999_us lag_max_us)a,
        do: ms(Map.fetch!(r, key))
  end

  # A panel per mode and connection count at --svg-rate; a curve per system.
  defp write_svg(config, rows, peak) do
    pct = config.svg_rate

    panels =
      for mode <- config.modes, connections <- config.connections do
        drawn =
          for row <- rows,
              row.mode == mode,
              row.connections == connections,
              row.pct == pct,
              do: row

        %{title: "#{mode}, #{connections} connections", series: Enum.map(drawn, &series/1)}
      end

    title =
      "Open-loop latency at #{pct}% of Redis's per-core peak " <>
        "(#{max(round(peak * pct / 100), 1)} requests/s), #{config.seconds} s a row"

    notes = ["dashed: the generator", "fell behind (BEHIND), its", "own delay is in the curve"]
    svg = Chart.grid(panels, title: title, columns: length(config.connections), notes: notes)
    File.write!(config.svg, svg)
    IO.puts("Wrote #{config.svg}")
  end

  defp series(%{behind: true} = row), do: {row.system, Result.curve(row.result), :dashed}
  defp series(row), do: {row.system, Result.curve(row.result)}
end
