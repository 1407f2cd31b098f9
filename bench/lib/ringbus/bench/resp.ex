defmodule Ringbus.Bench.Resp do
  @moduledoc """
  The RESP bench: `redis-benchmark` with identical command lines against a
  `redis-server` and against Ringbus's RESP listener (`Ringbus.Resp`), in
  one run, turn by turn.

      mix ringbus.bench resp
      mix ringbus.bench resp --requests 1000000 --out resp.csv

  ## What it runs

  A `redis-server` of its own on a free port of 127.0.0.1, with no
  persistence (`Ringbus.Bench.RedisServer`), and a `Ringbus.Server` in the
  bench VM with `resp_port: 0`. Then, for each workload and pipeline depth
  (`-P 1` and `-P 16`, or those `--pipelines` names), the same command
  line against Redis and then Ringbus, 50 clients (`-c 50`):

    * `XADD s MAXLEN 200000 * f <payload>` with a 16-byte and a 1,024-byte
      payload: a bounded log of 200,000 entries, a ring of that capacity in
      Ringbus (MAXLEN on a new stream is its capacity);
    * `XADD s MAXLEN ~ 100000 * f <payload>` with a 16-byte payload
      (`XADD~` in the table): an approximate bound, which Redis keeps by
      dropping whole nodes of 100 entries and Ringbus by one trim where the
      stream lives; the stream's ring is as large as the server makes
      streams (`:resp_stream_max_bytes`), so the trims do the bounding;
    * `XRANGE s - + COUNT 10`, on the stream the XADDs left;
    * `PING`.

  Before each XADD workload the stream `s` is deleted on both servers, so
  each starts empty. Both servers share the machine's cores with
  `redis-benchmark`; Redis uses one thread, Ringbus every scheduler.

  `PING` also runs against a third server, `bare`: a `gen_tcp` listener in
  the bench VM that answers `PING` and nothing useful else, one process per
  connection and one write per read (`Ringbus.Bench.Resp.Bare`). It stores
  nothing, so its rows are the floor under any RESP server on the VM's TCP
  stack: what a read, a process wakeup and a write cost on this machine.

  ## Per-core mode

  With `--pin`, each server runs in an OS process of its own pinned to core
  0, and `redis-benchmark` runs pinned to core 1 (`taskset -c`, see
  `Ringbus.Bench.Pin`): `redis-server`, the Ringbus server in a BEAM of its
  own with one scheduler (`+S 1 +SDcpu 1 +SDio 1`,
  `Ringbus.Bench.ServerProcess`), and `bare` in a BEAM like it. Each is
  stopped by its OS pid at the end. Without `--pin` (the shared mode) Ringbus
  and `bare` run in the bench VM, and every process may use every core.

  ## Output

  A table and, with `--out`, CSV with the columns
  `mode,server,command,payload_bytes,pipeline,clients,requests_per_s,p50_ms,p99_ms,max_ms,command_line`,
  from `redis-benchmark --csv`; `mode` is `pinned` or `shared`. Below the
  table, the tails of every `-P 1` workload side by side: p50, p99 and max
  of Redis, Ringbus and (for `PING`) `bare`. The command line is the exact one run, with
  the payload written as the shell expression that makes it. A run that
  ends within redis-benchmark's clock tick (1 ms), which it reports as `inf`
  requests/s, is not timed: its rate is left empty, shown as `not timed`,
  and its ratios as `n/a`; raise `--requests` to time it. Then the
  targets: Ringbus at least 1.5x Redis's requests/s on XADD at `-P 16`, and a
  p99 no worse than Redis's at `-P 1`; and the floor: `bare`'s `PING` rate
  and p99 against Redis's.

  ## Command line options

    * `--requests N` - requests per workload and server (`-n`). Default `200000`.
    * `--clients N` - connections (`-c`). Default `50`.
    * `--pin` - the per-core mode (see above).
    * `--pipelines LIST` - pipeline depths, comma-separated. Default `1,16`.
    * `--only LIST` - workloads to run, comma-separated, of `XADD`,
      `XADD~`, `XRANGE` and `PING`. Default: all.
    * `--out FILE` - write the CSV to FILE.
  """

  alias Ringbus.Bench.{Args, CSV, Pin, RedisServer, ServerProcess, Table}
  alias Ringbus.Bench.Resp.Bare

  @switches [
    requests: :integer,
    clients: :integer,
    out: :string,
    pin: :boolean,
    pipelines: :string,
    only: :string
  ]
  @maxlen 200_000
  @header ~w(mode server command payload_bytes pipeline clients requests_per_s p50_ms p99_ms max_ms command_line)

  @doc "Runs the bench with command line `args`; returns the rows."
  @spec run([String.t()]) :: [map()]
  def run(args) do
    {opts, _} = OptionParser.parse!(args, strict: @switches)
    requests = Args.positive!(opts, :requests, 200_000)
    clients = Args.positive!(opts, :clients, 50)
    pipelines = opts |> Keyword.get(:pipelines, "1,16") |> positives!(:pipelines)
    workloads = workloads(opts[:only])

    bench =
      System.find_executable("redis-benchmark") || Mix.raise("redis-benchmark is not on the PATH")

    unless RedisServer.available?(), do: Mix.raise("redis-server is not on the PATH")
    pin? = Keyword.get(opts, :pin, false)
    if pin?, do: Pin.check!()

    {server_core, generator_core} =
      if pin?, do: {Pin.server_core(), Pin.generator_core()}, else: {nil, nil}

    redis = RedisServer.start!(core: server_core)

    try do
      with_servers(server_core, fn ringbus_port, bare_port ->
        ports = [redis: redis.port, ringbus: ringbus_port, bare: bare_port]
        run = %{bench: bench, requests: requests, clients: clients, core: generator_core}

        rows =
          for {command, payload} <- workloads,
              pipeline <- pipelines,
              {name, port} <- ports,
              name != :bare or command == "PING" do
            if command in ["XADD", "XADD~"], do: RedisServer.del!(port, "s")
            measure(run, name, port, command, payload, pipeline)
          end

        print(rows)
        if opts[:out], do: CSV.write!(opts[:out], @header, Enum.map(rows, &csv_row/1))
        rows
      end)
    after
      RedisServer.stop(redis)
    end
  end

  # Ringbus and bare in this VM (shared), or each in a pinned BEAM of its own.
  defp with_servers(nil, fun) do
    {:ok, server} = Ringbus.Server.start_link(port: 0, resp_port: 0)
    {bare, bare_port} = Bare.start()

    try do
      fun.(Ringbus.Server.port(server, :resp), bare_port)
    after
      Ringbus.delete("s")
      Supervisor.stop(server)
      Bare.stop(bare)
    end
  end

  defp with_servers(core, fun) do
    ringbus = ServerProcess.start!(:ringbus, core: core)

    try do
      bare = ServerProcess.start!(:bare, core: core)

      try do
        fun.(ringbus.ports.resp, bare.ports.resp)
      after
        ServerProcess.stop(bare)
      end
    after
      ServerProcess.stop(ringbus)
    end
  end

  @workloads [{"XADD", 16}, {"XADD", 1024}, {"XADD~", 16}, {"XRANGE", nil}, {"PING", nil}]

  defp workloads(nil), do: @workloads

  defp workloads(only) do
    names = String.split(only, ",", trim: true)

    for name <- names,
        not List.keymember?(@workloads, name, 0),
        do: Mix.raise("--only: unknown workload #{inspect(name)}")

    Enum.filter(@workloads, fn {name, _} -> name in names end)
  end

  defp positives!(text, option) do
    for part <- String.split(text, ",", trim: true) do
      case Integer.parse(part) do
        {n, ""} when n > 0 -> n
        _ -> Mix.raise("--#{option}: expected positive integers, got #{inspect(text)}")
      end
    end
  end

  defp command_args("XADD", size),
    do: ["XADD", "s", "MAXLEN", "#{@maxlen}", "*", "f", :binary.copy("v", size)]

  defp command_args("XADD~", size),
    do: ["XADD", "s", "MAXLEN", "~", "100000", "*", "f", :binary.copy("v", size)]

  defp command_args("XRANGE", nil), do: ~w(XRANGE s - + COUNT 10)
  defp command_args("PING", nil), do: ~w(PING)

  defp measure(run, name, port, command, payload, pipeline) do
    %{requests: requests, clients: clients} = run

    args =
      ["-h", "127.0.0.1", "-p", "#{port}", "-c", "#{clients}", "-n", "#{requests}"] ++
        ["-P", "#{pipeline}", "--csv"] ++ command_args(command, payload)

    {exe, args} = Pin.command(run.core, run.bench, args)
    line = command_line(exe, args, payload)
    IO.puts(:stderr, "==> #{name}: #{line}")

    case System.cmd(exe, args, stderr_to_stdout: true) do
      {out, 0} ->
        {rps, p50, p99, max} = parse(out)
        if rps == nil, do: IO.puts(:stderr, "    not timed: it ended within 1 ms")

        %{
          mode: Pin.mode(run.core),
          server: name,
          command: command,
          payload_bytes: payload,
          pipeline: pipeline,
          clients: clients,
          requests_per_s: rps,
          p50_ms: p50,
          p99_ms: p99,
          max_ms: max,
          command_line: line
        }

      {out, status} ->
        Mix.raise("redis-benchmark exited #{status}: #{out}")
    end
  end

  # The command line as a shell would run it, the payload as the expression that makes it.
  defp command_line(exe, args, payload) do
    value = if payload, do: :binary.copy("v", payload)

    Enum.map_join([Path.basename(exe) | args], " ", fn
      "/" <> _ = path ->
        Path.basename(path)

      ^value when value != nil ->
        ~s["$(head -c #{payload} /dev/zero | tr '\\0' v)"]

      "*" ->
        "'*'"

      arg ->
        arg
    end)
  end

  @doc false
  # A peak run of `redis-benchmark` (`exe` with `args`, `--csv`): its
  # requests/s, rounded; raises when it failed or ended untimed.
  def peak!(exe, args) do
    case System.cmd(exe, args, stderr_to_stdout: true) do
      {out, 0} ->
        case parse(out) do
          {nil, _, _, _} -> Mix.raise("the peak run ended within 1 ms: raise --peak-requests")
          {rps, _, _, _} -> round(rps)
        end

      {out, status} ->
        Mix.raise("redis-benchmark exited #{status}: #{out}")
    end
  end

  @doc false
  # The last line of `redis-benchmark --csv`:
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  # The rate is nil for a run too short to time, which redis-benchmark says is "inf".
  def parse(out) do
    out
    |> String.split(["\r", "\n"], trim: true)
    |> Enum.filter(&String.starts_with?(&1, "\""))
    |> List.last()
    |> case do
      nil ->
        Mix.raise("cannot read redis-benchmark's output: #{inspect(out)}")

      line ->
        fields = line |> String.split("\",\"") |> Enum.map(&String.trim(&1, "\""))
        [_test, rps, _avg, _min, p50, _p95, p99, max | _] = fields
        {to_rate(rps), to_float(p50), to_float(p99), to_float(max)}
    end
  end

  defp to_rate("inf"), do: nil
  defp to_rate(text), do: to_float(text)

  defp to_float(text) do
    case Float.parse(text) do
      {value, _} -> value
      :error -> Mix.raise("cannot read #{inspect(text)} as a number")
    end
  end

  ## Output

  @columns [
    {"mode", 8, :left},
    {"server", 9, :left},
    {"command", 8, :left},
    {"payload", 8, :right},
    {"-P", 4, :right},
    {"-c", 4, :right},
    {"requests/s", 12, :right},
    {"p50 ms", 9, :right},
    {"p99 ms", 9, :right},
    {"max ms", 9, :right}
  ]

  defp print(rows) do
    IO.puts("")

    Table.print(@columns, rows, fn row ->
      [
        row.mode,
        row.server,
        row.command,
        row.payload_bytes,
        row.pipeline,
        row.clients,
        rate(row.requests_per_s),
        fmt(row.p50_ms),
        fmt(row.p99_ms),
        fmt(row.max_ms)
      ]
    end)

    print_tails(rows)
    IO.puts("")

    for payload <- [16, 1024] do
      with [%{} = redis16, %{} = redis1, %{} = ours16, %{} = ours1] <-
             for(s <- [:redis, :ringbus], p <- [16, 1], do: find(rows, s, "XADD", payload, p)) do
        IO.puts(
          "XADD #{payload} B: -P 16 Ringbus/Redis #{ratio(ours16, redis16)}x " <>
            "(target >= 1.5x); -P 1 p99 Ringbus #{fmt(ours1.p99_ms)} ms vs Redis " <>
            "#{fmt(redis1.p99_ms)} ms (target: no worse)"
        )
      end
    end

    # XADD with MAXLEN ~: each depth against Redis's, and against the
    # Ringbus rate at the shallowest depth run (its rate should not fall).
    approx = for row <- rows, row.command == "XADD~", row.server == :ringbus, do: row

    for %{pipeline: p} = ours <- approx do
      with %{} = redis <- find(rows, :redis, "XADD~", 16, p) do
        IO.puts(
          "XADD~ 16 B -P #{p}: Ringbus/Redis #{ratio(ours, redis)}x (target >= 0.5x); " <>
            "Ringbus vs its -P #{hd(approx).pipeline} #{ratio(ours, hd(approx))}x"
        )
      end
    end

    for pipeline <- [1, 16] do
      with [%{} = redis, %{} = ours, %{} = bare] <-
             for(s <- [:redis, :ringbus, :bare], do: ping(rows, s, pipeline)) do
        IO.puts(
          "PING -P #{pipeline}: bare gen_tcp floor/Redis #{ratio(bare, redis)}x, " <>
            "Ringbus/bare #{ratio(ours, bare)}x; " <>
            "p99 Redis #{fmt(redis.p99_ms)} ms, bare #{fmt(bare.p99_ms)} ms, " <>
            "Ringbus #{fmt(ours.p99_ms)} ms"
        )
      end
    end
  end

  # At -P 1 each request waits for its reply, so the tails are each server's own.
  defp print_tails(rows) do
    IO.puts("\n-P 1 tails, p50 / p99 / max ms:")

    for {command, payload} <- @workloads do
      tails =
        for server <- [:redis, :ringbus, :bare],
            row = Enum.find(rows, &tail_row?(&1, server, command, payload)),
            do: "#{server} #{fmt(row.p50_ms)} / #{fmt(row.p99_ms)} / #{fmt(row.max_ms)}"

      name = if payload, do: "#{command} #{payload} B", else: command
      if tails != [], do: IO.puts("  " <> String.pad_trailing(name, 12) <> Enum.join(tails, ", "))
    end
  end

  defp tail_row?(row, server, command, payload),
    do:
      row.server == server and row.command == command and row.payload_bytes == payload and
        row.pipeline == 1

  defp ping(rows, server, pipeline),
    do:
      Enum.find(rows, &(&1.server == server and &1.command == "PING" and &1.pipeline == pipeline))

  defp find(rows, server, command, payload, pipeline),
    do:
      Enum.find(
        rows,
        &(&1.server == server and &1.command == command and &1.payload_bytes == payload and
            &1.pipeline == pipeline)
      )

  defp fmt(value), do: :erlang.float_to_binary(value / 1, decimals: 2)

  defp rate(nil), do: "not timed"
  defp rate(rps), do: Integer.to_string(round(rps))

  # Of two rows' rates; n/a when either run was too short to time.
  defp ratio(%{requests_per_s: a}, %{requests_per_s: b}) when is_number(a) and is_number(b),
    do: fmt(a / b)

  defp ratio(_row, _other), do: "n/a"

  defp csv_row(row) do
    [
      row.mode,
      row.server,
      row.command,
      row.payload_bytes,
      row.pipeline,
      row.clients,
      row.requests_per_s && round(row.requests_per_s),
      row.p50_ms,
      row.p99_ms,
      row.max_ms,
      row.command_line
    ]
  end
end
