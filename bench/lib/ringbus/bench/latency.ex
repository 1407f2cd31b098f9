defmodule Ringbus.Bench.Latency do
  @moduledoc """
  The open-loop latency bench: requests sent at a fixed rate, whatever the
  server's answers do, each timed from the moment it was meant to leave,
  against Redis and Ringbus at 25%, 50% and 75% of Redis's peak rate.

      mix ringbus.bench latency
      mix ringbus.bench latency --rates 10,25,50 --seconds 30 --out latency.csv

  ## What it runs

  A `redis-server` of its own (`Ringbus.Bench.RedisServer`) and a
  `Ringbus.Server` in a BEAM of its own (`Ringbus.Bench.ServerProcess`),
  both on free ports of 127.0.0.1. Redis's peak rate is measured first, in
  the same run, with

      redis-benchmark -c 50 -P 16 -n PEAK_REQUESTS XADD s MAXLEN 200000 * f <16 bytes>

  (or taken from `--peak`). Then for each rate (`--rates`, percents of that
  peak) and each system, the generator (`Ringbus.Bench.Latency.Generator`,
  in the bench VM) sends `rate x --seconds` requests over `--connections`
  connections:

    * `floor` - RESP `PING` to the bare responder (`Ringbus.Bench.Resp.Bare`,
      in a BEAM of its own beside the servers), which answers at once and
      stores nothing: the generator's own floor at that rate, which no row
      can go below;
    * `redis` - RESP `XADD s MAXLEN 200000 * f <16 bytes>` to Redis;
    * `ringbus_resp` - the same to Ringbus's RESP port;
    * `ringbus_push` - a binary `PUSH` of 16 bytes, acked, to a channel of
      200,000 messages (`overflow: :drop_oldest`) on Ringbus's binary port.

  The stream `s` is deleted before each XADD run.

  ## Open loop

  Request `i` is due `i / rate` seconds after the start, on connection
  `i mod connections`, and is written then even if earlier ones are still
  unanswered; its latency runs from that intended time to its reply
  (`Ringbus.Bench.Latency.Schedule`). A stall of the server delays every
  request due during it, and all of them count it: unlike a closed-loop
  generator such as `redis-benchmark`, which sends nothing while it waits
  and so never times the requests a stall held back (coordinated omission,
  as wrk2 explains). Latencies go into a log-linear histogram of 1/64
  precision (`Ringbus.Bench.Latency.Histogram`); the max is exact.

  ## The generator

  One process owns every connection and keeps the schedule itself. Its
  loop reads every reply that has arrived (sockets in `active: true` mode,
  so a message carries all a read found; replies counted by binary
  matching, `Ringbus.Bench.Latency.Replies`), timing each as it is read,
  then writes every request due by now, all those of one connection in one
  write. While the next request is due within 2 ms it spins on the
  monotonic clock (the BEAM's timers count whole milliseconds), so it
  takes a core when the rate is high: with `--pin`, core 1, away from the
  servers.

  The generator must not be the bottleneck, and it checks itself. Each row
  gives the rate it achieved (requests over the time to its last actual
  write) against the target; the send lag of its requests (how long after
  its intended time each was written), p99.9 and max; and its busy share
  (the part of the run its loop spent reading and writing rather than
  waiting). Reads and writes share one loop, so a generator late on reading
  is late on writing too. A row is marked `BEHIND` when it achieved more
  than 2% below its target or its p99.9 send lag exceeds 1 ms
  (`Ringbus.Bench.Latency.Schedule.behind?/3`): its latencies include the
  generator's own delay and say little about the server. The `floor` row
  at the same rate shows what the generator and the loopback cost alone.

  ## Per-core mode

  With `--pin`, `redis-server` and the Ringbus server's BEAM (one scheduler,
  `+S 1 +SDcpu 1 +SDio 1`) run pinned to core 0, and the peak's
  `redis-benchmark` on core 1. The generator runs in the bench VM: for the
  measured rows that VM is pinned to core 1 (`taskset -a -p`) with one
  scheduler online (`:erlang.system_flag/2`), both put back after. See
  `Ringbus.Bench.Pin`. The default is the shared mode: every process on
  every core.

  ## Output

  A table and, with `--out`, CSV with the columns
  `mode,system,pct_of_peak,target_rate,achieved_rate,behind,requests,errors,connections,seconds,p50_ms,p99_ms,p999_ms,max_ms,max_send_lag_ms,send_lag_p999_ms,generator_busy_pct`.

  ## Command line options

    * `--peak N` - Redis's peak XADD requests/s, instead of measuring it.
    * `--peak-requests N` - requests of the peak measurement. Default `200000`.
    * `--rates P,P,...` - the rates, percents of the peak. Default `25,50,75`.
    * `--systems S,S,...` - some of `floor,redis,ringbus_resp,ringbus_push` (the default).
    * `--seconds S` - how long each system runs at each rate. Default `10`.
    * `--connections N` - the generator's connections. Default `50`.
    * `--pin` - the per-core mode (see above).
    * `--out FILE` - write the CSV to FILE.
  """

  alias Ringbus.Bench.{Args, CSV, Pin, RedisServer, Resp, ServerProcess, Table}
  alias Ringbus.Bench.Latency.{Generator, Histogram, Schedule}

  @switches [
    peak: :integer,
    peak_requests: :integer,
    rates: :string,
    systems: :string,
    seconds: :float,
    connections: :integer,
    out: :string,
    pin: :boolean
  ]

  @systems ["floor", "redis", "ringbus_resp", "ringbus_push"]
  @payload 16
  @maxlen 200_000
  @channel "latency"

  @header ~w(mode system pct_of_peak target_rate achieved_rate behind requests errors connections seconds) ++
            ~w(p50_ms p99_ms p999_ms max_ms max_send_lag_ms send_lag_p999_ms generator_busy_pct)

  @doc "Runs the bench with command line `args`; returns the rows."
  @spec run([String.t()]) :: [map()]
  def run(args) do
    opts = Args.parse!(args, @switches)
    config = config!(opts)

    bench =
      System.find_executable("redis-benchmark") || Mix.raise("redis-benchmark is not on the PATH")

    unless RedisServer.available?(), do: Mix.raise("redis-server is not on the PATH")

    if config.server_core, do: Pin.check!()
    redis = RedisServer.start!(core: config.server_core)

    try do
      ringbus = ServerProcess.start!(:ringbus, core: config.server_core)

      bare =
        if "floor" in config.systems, do: ServerProcess.start!(:bare, core: config.server_core)

      try do
        ServerProcess.command!(ringbus, "create #{@channel} #{@maxlen}")
        peak = config.peak || measure_peak(bench, redis.port, config)

        ports = %{
          "floor" => {:ping, bare && bare.ports.resp},
          "redis" => {:resp, redis.port},
          "ringbus_resp" => {:resp, ringbus.ports.resp},
          "ringbus_push" => {:push, ringbus.ports.binary}
        }

        IO.puts(
          "Open-loop latency: #{config.connections} connections, #{config.seconds} s a row, " <>
            "#{@payload}-byte payloads; Redis peak #{peak} XADD/s" <>
            if(config.peak, do: " (--peak)", else: " (redis-benchmark -c 50 -P 16, this run)")
        )

        rows =
          Pin.on_core(config.generator_core, "generator", fn ->
            for pct <- config.rates, system <- config.systems do
              rate = max(round(peak * pct / 100), 1)
              measure(system, Map.fetch!(ports, system), pct, rate, config)
            end
          end)

        print(rows)
        if config.out, do: CSV.write!(config.out, @header, Enum.map(rows, &csv_row/1))
        rows
      after
        if bare, do: ServerProcess.stop(bare)
        ServerProcess.stop(ringbus)
      end
    after
      RedisServer.stop(redis)
    end
  end

  defp config!(opts) do
    systems = Args.names!(opts, :systems, @systems, "system")

    rates =
      for part <- opts |> Keyword.get(:rates, "25,50,75") |> String.split(",", trim: true) do
        case Integer.parse(String.trim(part)) do
          {pct, ""} when pct > 0 ->
            pct

          _ ->
            Mix.raise(
              "expected --rates to be positive integers (percents), got: #{inspect(opts[:rates])}"
            )
        end
      end

    seconds = Keyword.get(opts, :seconds, 10.0)
    if seconds <= 0, do: Mix.raise("expected --seconds to be positive, got: #{seconds}")

    %{
      peak: if(opts[:peak], do: Args.positive!(opts, :peak, 1)),
      peak_requests: Args.positive!(opts, :peak_requests, 200_000),
      rates: rates,
      systems: systems,
      seconds: seconds,
      connections: Args.positive!(opts, :connections, 50),
      out: opts[:out],
      server_core: if(opts[:pin], do: Pin.server_core()),
      generator_core: if(opts[:pin], do: Pin.generator_core())
    }
  end

  defp measure_peak(bench, port, config) do
    RedisServer.del!(port, "s")

    args =
      [
        "-h",
        "127.0.0.1",
        "-p",
        "#{port}",
        "-c",
        "50",
        "-P",
        "16",
        "-n",
        "#{config.peak_requests}"
      ] ++
        ["--csv", "XADD", "s", "MAXLEN", "#{@maxlen}", "*", "f", :binary.copy("v", @payload)]

    {exe, args} = Pin.command(config.generator_core, bench, args)
    shown = Enum.map_join(Enum.drop(args, -1), " ", &Path.basename/1)
    IO.puts(:stderr, "==> Redis peak: #{Path.basename(exe)} #{shown} <16 bytes>")

    Resp.peak!(exe, args)
  end

  defp measure(system, {protocol, port}, pct, rate, config) do
    total = max(round(rate * config.seconds), 1)
    schedule = Schedule.new(rate, total, config.connections)
    if protocol == :resp, do: RedisServer.del!(port, "s")
    key = if protocol == :push, do: @channel, else: "s"

    target = %{
      protocol: protocol,
      port: port,
      key: key,
      payload: :binary.copy("v", @payload),
      maxlen: @maxlen
    }

    IO.puts(:stderr, "==> #{system}: #{total} requests at #{rate}/s (#{pct}% of peak)")

    case Generator.run(target, schedule) do
      {:ok, r} when r.answered == total ->
        achieved = Schedule.achieved(schedule, r.last_send)
        h = r.histogram
        lag_p999 = Histogram.percentile(r.send_lags, 0.999)

        %{
          mode: Pin.mode(config.server_core),
          system: system,
          pct: pct,
          rate: rate,
          achieved: achieved,
          behind: Schedule.behind?(schedule, achieved, lag_p999),
          requests: total,
          errors: r.errors,
          connections: min(config.connections, total),
          seconds: config.seconds,
          p50_ms: ms(Histogram.percentile(h, 0.5)),
          p99_ms: ms(Histogram.percentile(h, 0.99)),
          p999_ms: ms(Histogram.percentile(h, 0.999)),
          max_ms: ms(Histogram.max(h)),
          max_lag_ms: ms(r.max_lag),
          lag_p999_ms: ms(lag_p999),
          busy_pct: 100 * r.busy / max(r.duration, 1)
        }

      {:ok, r} ->
        Mix.raise("#{system}: #{r.answered} of #{total} requests were answered")

      {:error, reason} ->
        Mix.raise("#{system} at #{rate}/s: the generator stopped: #{inspect(reason)}")
    end
  end

  defp ms(nil), do: nil
  defp ms(ns), do: ns / 1.0e6

  ## Output

  @columns [
    {"mode", 8, :left},
    {"system", 14, :left},
    {"% peak", 7, :right},
    {"target/s", 10, :right},
    {"achieved/s", 11, :right},
    {"", 8, :right},
    {"requests", 10, :right},
    {"errors", 7, :right},
    {"p50 ms", 9, :right},
    {"p99 ms", 9, :right},
    {"p99.9 ms", 9, :right},
    {"max ms", 9, :right},
    {"lag p99.9", 10, :right},
    {"lag max", 9, :right},
    {"gen busy", 9, :right}
  ]

  defp print(rows) do
    IO.puts("")

    Table.print(@columns, rows, fn row ->
      [
        row.mode,
        row.system,
        row.pct,
        row.rate,
        round(row.achieved),
        if(row.behind, do: "BEHIND", else: ""),
        row.requests,
        row.errors,
        fmt(row.p50_ms),
        fmt(row.p99_ms),
        fmt(row.p999_ms),
        fmt(row.max_ms),
        fmt(row.lag_p999_ms),
        fmt(row.max_lag_ms),
        "#{round(row.busy_pct)}%"
      ]
    end)

    IO.puts(
      "\nlag: how long after its intended time a request was written (ms); gen busy: " <>
        "the share of the run the generator spent reading and writing, not waiting."
    )

    if Enum.any?(rows, &(&1.system == "floor")) do
      IO.puts(
        "floor: the same generator sending PING to a bare responder that answers at once " <>
          "(its own BEAM, on the servers' core): the latencies no row can go below."
      )
    end

    if Enum.any?(rows, & &1.behind) do
      IO.puts(
        "BEHIND: the generator achieved more than 2% below its target rate, or wrote " <>
          "its requests more than 1 ms late (p99.9 send lag); that row's latencies include its own delay."
      )
    end

    :ok
  end

  defp fmt(nil), do: nil
  defp fmt(value), do: :erlang.float_to_binary(value / 1, decimals: 3)

  defp csv_row(row) do
    [
      row.mode,
      row.system,
      row.pct,
      row.rate,
      round(row.achieved),
      if(row.behind, do: "yes", else: "no"),
      row.requests,
      row.errors,
      row.connections,
      row.seconds,
      fmt(row.p50_ms),
      fmt(row.p99_ms),
      fmt(row.p999_ms),
      fmt(row.max_ms),
      fmt(row.max_lag_ms),
      fmt(row.lag_p999_ms),
      :erlang.float_to_binary(row.busy_pct / 1, decimals: 1)
    ]
  end
end
