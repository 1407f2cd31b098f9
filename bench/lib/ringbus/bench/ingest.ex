defmodule Ringbus.Bench.Ingest do
  @moduledoc """
  The TCP ingest bench: how many messages a producer gets stored **and
  acknowledged** by `Ringbus.Server`, by the way it pushes, with the CPU each
  side spends per message, and against Redis `XADD` in the same run, like for
  like.

      mix ringbus.bench ingest
      mix ringbus.bench ingest --vs-redis --out ingest.csv
      mix ringbus.bench ingest --vs-redis --connections 50 --pipeline 16
      mix ringbus.bench ingest --messages 200000 --modes pipelined,encoded   # a quick look

  ## What it does

  The bench VM starts a `Ringbus.Server` on 127.0.0.1 (port 0). For each mode
  it creates a fresh channel, `overflow: :drop_oldest` (so with more messages
  than the capacity the ring really overwrites), and starts the load
  generator in a **separate OS process**: a second BEAM
  (`elixir -pa <this build's ebin> -e ...`) running
  `Ringbus.Bench.Ingest.Generator`. Client and server share the machine's
  cores as two separate VMs would, and neither sees the other's scheduler.

  The generator says when it is connected and ready, times itself from then
  to the last ack, and reports on a stdout line that the bench parses. Every
  push is acked (no no-ack mode). A mode counts only when every ack came back
  without error, the acks number one per `PUSH` (or per `PUSH_BATCH`), and
  the server's `Ringbus.info/1` of the channel says `pushed` equals the
  messages sent.

  ## The modes

  Each mode (`--modes`) is a row. Four use `Ringbus.Client`, whose own cost
  per message is part of what they measure:

    * `request_reply` - `Ringbus.Client.push/3`: one push, wait for its ack,
      the next. Bounded by `--rr-messages` since it is slow.
    * `pipelined` - `Ringbus.Client.push_async/4` of single payloads: one
      `PUSH` frame and one ack entry per message, up to the client's
      `max_pending` (100,000) in flight; the acks of one server read come
      back in one `PUSH_ACKS` frame. The producer takes acks only when the
      client says `:backpressure`, and keeps its mailbox off the heap, as
      `Ringbus.Client` advises.
    * `coalesced` - as `pipelined`, with the client's `linger: 0`: it
      gathers the single pushes queued at once into `PUSH_BATCH` frames, and
      still gives one ack entry per push.
    * `batched` - **batched**: `push_async/4` of lists of `--batch`
      payloads, one `PUSH_BATCH` frame and one ack entry per batch.
    * `batched_1kb` - as `batched`, with 1,024-byte payloads.

  Two use a generator that does the least a producer can
  (`Ringbus.Bench.Ingest.Encoded`): every frame is a single `PUSH`, encoded
  once before the clock starts with its own correlation id, written from a
  raw socket in chunks of many frames; the acks are read off the socket and
  counted, each checked to answer the oldest push in flight. What these rows
  measure is the server:

    * `encoded` - `--payload`-byte messages on one connection, writes of
      `--chunk-bytes`, at most `--window` messages in flight.
    * `encoded_1kb` - **like for like with Redis**: 1,024-byte messages, one
      `PUSH` frame and one ack entry per message, over `--connections`
      connections, each writing `--pipeline` frames and waiting for their
      acks before the next ones, as `redis-benchmark -c --connections -P
      --pipeline` does.

  A batch holds `--batch` messages or `--batch-bytes` of payload, whichever
  is fewer: 1,000 messages of 16 bytes, 256 of 1 KB. A producer that batches
  by count alone sends 1 MB frames of 1 KB messages, and every such frame is
  above the binary allocator's single-block carrier threshold (512 KB by
  default, `+MBsbct`): the server then joins each one into memory of its own,
  an mmap and fresh pages per frame.

  The channels of the 1 KB rows keep 200,000 messages, the `MAXLEN` Redis
  keeps below, so both servers hold the same 200 MB; the other rows use
  `--capacity`. `request_reply`, `pipelined`, `batched` and `encoded` use
  `--payload` bytes (16 by default). MB/s counts payload bytes only.

  ## Redis, like for like

  With `--vs-redis`, if `redis-server` and `redis-benchmark` are on the PATH
  (Debian's `redis-server` and `redis-tools`), the bench starts
  `redis-server` on a free port of 127.0.0.1 with no persistence
  (`--save "" --appendonly no`) and runs

      redis-benchmark -h 127.0.0.1 -p PORT -c CONNECTIONS -P PIPELINE -n N XADD s MAXLEN 200000 * f <1,024 bytes>

  with `--connections` and `--pipeline`, the same as `encoded_1kb`, and N
  its messages: one XADD per message and one reply per XADD. The row
  `redis_xadd_1kb` takes the rate and the requests completed from
  redis-benchmark's summary, checks with `INFO commandstats` and `XLEN` that
  Redis executed every XADD and holds the stream it should, and stops the
  server. The bench prints two ratios, each naming its rows:
  `encoded_1kb / redis_xadd_1kb`, like for like, and
  `batched_1kb / redis_xadd_1kb`, which is not (batches in one frame, one
  ack per batch, one connection). Without Redis the bench says what is
  missing and skips the row and the ratios.

  ## Per-core mode

  With `--pin`, the server runs in a BEAM of its own pinned to core 0 with
  one scheduler (`taskset -c 0`, `+S 1 +SDcpu 1 +SDio 1`;
  `Ringbus.Bench.Pin`, `Ringbus.Bench.ServerProcess`), and the generator's
  BEAM is pinned to core 1 with the same flags; with `--vs-redis`,
  `redis-server` runs on core 0 and `redis-benchmark` on core 1. The server's
  channels are then created, read and deleted through that BEAM's command
  lines, and its CPU is read from `/proc/PID/stat`. Without `--pin` (the
  shared mode, the default) the server runs in the bench VM as described
  above.

  ## CPU per message

  Every row gives the server's CPU time per message, user and system, beside
  its rate: for Ringbus the bench VM's (`/proc/self/stat`, every thread;
  `Ringbus.Bench.CPU`) from the generator's ready line to its result line;
  for Redis, `redis-server`'s from `INFO cpu`. The share of it spent in the
  kernel is printed too. The generator's CPU per message is printed beside
  it: the generator BEAM's own over its timed span, or redis-benchmark's. On
  a machine without `/proc` these read `-`. A VM's schedulers spin a little
  before they sleep when they run out of work, so at low rates (the
  `request_reply` row) that spinning is most of the server's figure.

  ## Output

  A table with one row per mode, then the ratios to Redis and the targets.
  `--out` writes the rows as CSV with the columns
  `mode,how,payload_bytes,messages,connections,pipeline,msgs_per_frame,acks,ack_frames,seconds,msgs_per_s,mb_per_s,server_cpu_us_per_msg,server_sys_pct,generator_cpu_us_per_msg,overwritten,vs_redis_xadd,cpu_mode`:
  `connections` and `pipeline` (the most messages in flight on a connection)
  give each row's shape, `msgs_per_frame` is 1 for a `PUSH` or an XADD,
  `acks` the ack entries (or Redis replies) received, `ack_frames` the
  `PUSH_ACKS` frames they came in (empty where not seen), and
  `vs_redis_xadd` a 1 KB row's rate over Redis's, and `cpu_mode` says
  whether the row ran `pinned` or `shared` (the table's `cpu` column).

  ## Command line options

    * `-n`, `--messages` - messages of every mode but `request_reply`, and of
      Redis. Defaults to `2000000`.
    * `--rr-messages` - messages of the `request_reply` mode, at most
      `--messages`. Defaults to `200000`.
    * `-p`, `--payload` - payload bytes of `request_reply`, `pipelined`,
      `batched` and `encoded`. Defaults to `16`.
    * `-m`, `--modes` - the modes to run, comma-separated. Defaults to
      `request_reply,pipelined,batched,batched_1kb,encoded,encoded_1kb`.
      An empty list runs none (with `--vs-redis`, Redis alone).
    * `-b`, `--batch` - messages per `PUSH_BATCH` frame. Defaults to `1000`.
    * `--batch-bytes` - payload bytes per `PUSH_BATCH` frame at most (see
      above). Defaults to `262144`.
    * `-c`, `--capacity` - the channel's capacity in every mode but the 1 KB
      ones. Defaults to `1000000`.
    * `--window` - messages in flight at most in `encoded`. Defaults to
      `65536`.
    * `--chunk-bytes` - bytes per socket write in `encoded`, in whole frames
      (at least one, at most `--window`). Defaults to `262144`.
    * `--connections` - connections of `encoded_1kb` and of redis-benchmark
      (`-c`). Defaults to `50`.
    * `--pipeline` - messages in flight per connection in `encoded_1kb` and
      redis-benchmark (`-P`). Defaults to `16`.
    * `--vs-redis` - run redis-benchmark `XADD` as the baseline (see above).
    * `-o`, `--out` - write the rows as CSV to this file.
    * `--timeout` - the most seconds one mode may take before the generator
      gives up. Defaults to `300`.
    * `-q`, `--quiet` - no progress lines.
    * `--pin` - the per-core mode (see above).

  Progress goes to stderr, a line per 10% of each client mode's messages.
  """

  alias Ringbus.Bench.{Args, CPU, CSV, Pin, ServerProcess, Table}
  alias Ringbus.Bench.Ingest.Redis
  alias Ringbus.Wire.Frame

  @modes [
    "request_reply",
    "pipelined",
    "coalesced",
    "batched",
    "batched_1kb",
    "encoded",
    "encoded_1kb"
  ]

  @switches [
    messages: :integer,
    rr_messages: :integer,
    payload: :integer,
    modes: :string,
    batch: :integer,
    batch_bytes: :integer,
    capacity: :integer,
    window: :integer,
    chunk_bytes: :integer,
    connections: :integer,
    pipeline: :integer,
    vs_redis: :boolean,
    out: :string,
    timeout: :integer,
    quiet: :boolean,
    pin: :boolean
  ]

  @aliases [n: :messages, p: :payload, m: :modes, b: :batch, c: :capacity, o: :out, q: :quiet]

  @header [
    "mode",
    "how",
    "payload_bytes",
    "messages",
    "connections",
    "pipeline",
    "msgs_per_frame",
    "acks",
    "ack_frames",
    "seconds",
    "msgs_per_s",
    "mb_per_s",
    "server_cpu_us_per_msg",
    "server_sys_pct",
    "generator_cpu_us_per_msg",
    "overwritten",
    "vs_redis_xadd",
    "cpu_mode"
  ]

  @kb 1024
  # The generator's schedulers sleep as soon as they have nothing to do,
  # instead of spinning first on the cores the server needs.
  @generator_erl "+sbwt none +sbwtdcpu none +sbwtdio none"
  @redis_maxlen 200_000
  @max_pending 100_000

  # Targets, printed with the figures: rates, and the like-for-like ratio.
  @encoded_target 3_300_000
  @pipelined_target 1_500_000
  @vs_redis_target 3.0

  @typedoc "One row of the table: a mode, or Redis."
  @type row :: %{
          required(:mode) => String.t(),
          required(:msgs_per_s) => float(),
          optional(atom()) => term()
        }

  @doc """
  Runs the bench with command line arguments (see the module doc), prints the
  table and returns its rows. Raises `OptionParser.ParseError` on an unknown
  option and `Mix.Error` on a bad value or when a mode lost an ack.
  """
  @spec run([String.t()]) :: [row()]
  def run(args) do
    opts = Args.parse!(args, @switches, @aliases)
    config = config!(opts)

    server = start_server(config)
    config = Map.put(config, :server, server)
    port = server_port(server)

    IO.puts(
      "Ringbus ingest, #{Pin.mode(config.server_core)}: server on 127.0.0.1:#{port} " <>
        where(config) <>
        "OTP #{System.otp_release()}, " <>
        "#{:erlang.system_info(:logical_processors_available)} cores available"
    )

    IO.puts(
      "channel capacity #{config.capacity} (1 KB rows: #{@redis_maxlen}), overflow drop_oldest; " <>
        "every push acked; client max_pending #{@max_pending}; " <>
        "encoded: #{config.window} in flight, #{config.chunk_bytes}-byte writes; " <>
        "encoded_1kb and Redis: #{config.connections} connections x #{config.pipeline} in flight"
    )

    IO.puts("VM memory: #{Ringbus.Server.Memory.describe()}\n")

    rows =
      try do
        Enum.map(config.modes, &run_mode(&1, port, config))
      after
        stop_server(server)
      end

    redis = if config.vs_redis, do: redis(rows, config)
    all = with_ratios(rows ++ List.wrap(redis))
    print(all, config)

    if config.out do
      CSV.write!(config.out, @header, Enum.map(all, &csv_row/1))
      IO.puts("wrote #{config.out}")
    end

    all
  end

  defp where(%{server_core: nil}) do
    "in this VM (#{System.schedulers_online()} schedulers), " <>
      "load generator in a separate BEAM, every process on every core; "
  end

  defp where(config) do
    "in a BEAM of its own on core #{config.server_core} (#{Pin.erl_flags()}), " <>
      "load generator in a BEAM on core #{config.generator_core} (the same flags; " <>
      "redis-server and redis-benchmark the same way); "
  end

  # The server under test: in this VM (shared), or in a pinned BEAM of its own.
  defp start_server(%{server_core: nil}) do
    {:ok, server} = Ringbus.Server.start_link(port: 0, auto_create: false)
    {:local, server}
  end

  defp start_server(config) do
    Pin.check!()
    {:process, ServerProcess.start!(:ringbus, core: config.server_core, auto_create: false)}
  end

  defp stop_server({:local, server}), do: Supervisor.stop(server)
  defp stop_server({:process, server}), do: ServerProcess.stop(server)

  defp server_port({:local, server}), do: Ringbus.Server.port(server)
  defp server_port({:process, server}), do: server.ports.binary

  defp server_cpu({:local, _}), do: CPU.sample()
  defp server_cpu({:process, server}), do: CPU.sample(server.os_pid)

  defp create_channel({:local, _}, channel, capacity),
    do: :ok = Ringbus.create(channel, capacity: capacity, overflow: :drop_oldest)

  defp create_channel({:process, server}, channel, capacity) do
    ServerProcess.command!(server, "create #{channel} #{capacity}")
    :ok
  end

  # The channel's pushed and overwritten counts, then it is deleted.
  defp take_channel({:local, _}, channel) do
    {:ok, info} = Ringbus.info(channel)
    :ok = Ringbus.delete(channel)
    %{pushed: info.pushed, overwritten: info.overwritten}
  end

  defp take_channel({:process, server}, channel) do
    info = ServerProcess.command!(server, "info #{channel}")
    ServerProcess.command!(server, "delete #{channel}")

    %{
      pushed: String.to_integer(info.pushed),
      overwritten: String.to_integer(info.overwritten)
    }
  end

  defp config!(opts) do
    messages = Args.positive!(opts, :messages, 2_000_000)
    pin? = Keyword.get(opts, :pin, false)
    modes = Args.names!(opts, :modes, @modes, "mode")

    config = %{
      messages: messages,
      rr_messages: min(Args.positive!(opts, :rr_messages, 200_000), messages),
      payload: Keyword.get(opts, :payload, 16),
      modes: modes,
      batch: Args.positive!(opts, :batch, 1_000),
      batch_bytes: Args.positive!(opts, :batch_bytes, 256 * @kb),
      capacity: Args.positive!(opts, :capacity, 1_000_000),
      window: Args.positive!(opts, :window, 65_536),
      chunk_bytes: Args.positive!(opts, :chunk_bytes, 256 * @kb),
      connections: Args.positive!(opts, :connections, 50),
      pipeline: Args.positive!(opts, :pipeline, 16),
      vs_redis: Keyword.get(opts, :vs_redis, false),
      out: Keyword.get(opts, :out),
      timeout: Args.positive!(opts, :timeout, 300),
      quiet: Keyword.get(opts, :quiet, false),
      server_core: if(pin?, do: Pin.server_core()),
      generator_core: if(pin?, do: Pin.generator_core()),
      hz: CPU.ticks_per_second()
    }

    if not is_integer(config.payload) or config.payload < 0,
      do: Mix.raise("expected --payload to be a non-negative integer, got: #{config.payload}")

    config
  end

  ## Ringbus modes

  # What a mode sends, and its generator's arguments.
  defp spec("request_reply", c) do
    %{generator: "request_reply", payload: c.payload, n: c.rr_messages, capacity: c.capacity}
    |> Map.merge(%{connections: 1, pipeline: 1, per_frame: 1, how: "Client.push/3 waits for each"})
  end

  defp spec("pipelined", c) do
    %{generator: "pipelined", payload: c.payload, n: c.messages, capacity: c.capacity}
    |> Map.merge(%{connections: 1, pipeline: @max_pending, per_frame: 1})
    |> Map.put(:how, "Client.push_async/4")
  end

  defp spec("coalesced", c) do
    %{generator: "pipelined", payload: c.payload, n: c.messages, capacity: c.capacity}
    |> Map.merge(%{connections: 1, pipeline: @max_pending, per_frame: 1, linger: 0})
    |> Map.put(:how, "push_async/4 with linger: 0")
  end

  defp spec("batched", c), do: batched(c.payload, c.capacity, c)
  defp spec("batched_1kb", c), do: batched(@kb, @redis_maxlen, c)

  defp spec("encoded", c) do
    frames = div(c.chunk_bytes, push_frame_bytes(channel("encoded"), c.payload))
    chunk = frames |> min(c.window) |> max(1)

    %{generator: "encoded", payload: c.payload, n: c.messages, capacity: c.capacity}
    |> Map.merge(%{connections: 1, pipeline: c.window, per_frame: 1, chunk: chunk})
    |> Map.put(:how, "pre-encoded PUSH: #{chunk}-frame writes")
  end

  defp spec("encoded_1kb", c) do
    %{generator: "encoded", payload: @kb, n: c.messages, capacity: @redis_maxlen}
    |> Map.merge(%{connections: c.connections, pipeline: c.pipeline, per_frame: 1})
    |> Map.merge(%{chunk: c.pipeline, how: "pre-encoded PUSH as redis-benchmark"})
  end

  defp batched(payload, capacity, c) do
    batch = c.batch |> min(div(c.batch_bytes, max(payload, 1))) |> max(1)

    %{generator: "batched", payload: payload, n: c.messages, capacity: capacity}
    |> Map.merge(%{connections: 1, pipeline: @max_pending, per_frame: batch, batch: batch})
    |> Map.put(:how, "batched: PUSH_BATCH of #{batch}")
  end

  defp push_frame_bytes(channel, payload),
    do: IO.iodata_length(Frame.encode({:push, 1, :ack, channel, :binary.copy("x", payload)}))

  defp channel(mode), do: "ingest.#{mode}"

  defp run_mode(mode, port, config) do
    spec = spec(mode, config)
    channel = channel(mode)
    :ok = create_channel(config.server, channel, spec.capacity)

    unless config.quiet do
      IO.puts(
        :stderr,
        "==> #{mode}: #{spec.n} messages of #{spec.payload} bytes (#{spec.how}; " <>
          "#{spec.connections} connection(s), #{spec.pipeline} in flight each)"
      )
    end

    args =
      [port: port, mode: spec.generator, messages: spec.n, payload: spec.payload]
      |> Keyword.merge(channel: channel, timeout: config.timeout, max_pending: @max_pending)
      |> Keyword.merge(connections: spec.connections, window: spec.pipeline)
      |> Keyword.merge(Keyword.take(Map.to_list(spec), [:batch, :chunk, :linger]))
      |> Enum.flat_map(fn {key, value} -> ["--#{key |> to_string() |> dash()}", "#{value}"] end)

    args = if config.quiet, do: args ++ ["--quiet"], else: args
    {result, server_cpu} = generate(args, config)
    info = take_channel(config.server, channel)

    expected_acks = div(spec.n + spec.per_frame - 1, spec.per_frame)

    cond do
      result.errors > 0 ->
        Mix.raise("#{mode}: #{result.errors} pushes were acked with an error")

      result.acks != expected_acks ->
        Mix.raise("#{mode}: #{result.acks} ack entries came back, expected #{expected_acks}")

      info.pushed != spec.n ->
        Mix.raise("#{mode}: the server stored #{info.pushed} messages, expected #{spec.n}")

      true ->
        seconds = result.elapsed_us / 1.0e6

        Map.merge(spec, %{
          mode: mode,
          payload_bytes: spec.payload,
          messages: spec.n,
          acks: result.acks,
          ack_frames: result.ack_frames,
          seconds: seconds,
          msgs_per_s: spec.n / seconds,
          mb_per_s: spec.n * spec.payload / seconds / 1.0e6,
          overwritten: info.overwritten,
          server_cpu: server_cpu,
          generator_cpu: result.cpu,
          generator_cores: result.cores,
          cpu_mode: Pin.mode(config.server_core)
        })
    end
  end

  defp dash(key), do: String.replace(key, "_", "-")

  # Runs the generator in its own BEAM; reads this VM's CPU time when it says
  # it is ready and when it gives its result.
  defp generate(args, config) do
    elixir = System.find_executable("elixir") || Mix.raise("elixir is not on the PATH")
    ebin = :code.which(Ringbus.Client) |> to_string() |> Path.dirname()
    # The elixir CLI reads options up to the first plain argument: "generate".
    code = "Ringbus.Bench.Ingest.Generator.main(tl(System.argv()))"

    erl =
      if config.generator_core, do: "#{@generator_erl} #{Pin.erl_flags()}", else: @generator_erl

    args = ["--erl", erl, "-pa", ebin, "-e", code, "generate" | args]
    {exe, args} = Pin.command(config.generator_core, elixir, args)

    port =
      Port.open({:spawn_executable, exe}, [:binary, :exit_status, {:line, 64 * @kb}, args: args])

    deadline = System.monotonic_time(:millisecond) + (config.timeout + 60) * 1000
    state = %{lines: [], cpu0: nil, result: nil, cpu1: nil, server: config.server}
    state = collect(port, state, deadline)

    case state.result do
      nil ->
        Mix.raise(
          "the generator printed no result: #{Enum.join(Enum.reverse(state.lines), "\n")}"
        )

      result ->
        {result, CPU.used(state.cpu0, state.cpu1, config.hz)}
    end
  end

  defp collect(port, state, deadline) do
    left = max(deadline - System.monotonic_time(:millisecond), 0)

    receive do
      {^port, {:data, {:eol, "READY"}}} ->
        collect(port, %{state | cpu0: server_cpu(state.server)}, deadline)

      {^port, {:data, {:eol, "RESULT " <> fields}}} ->
        state = %{state | cpu1: server_cpu(state.server), result: parse_result(fields)}
        collect(port, state, deadline)

      {^port, {:data, {_eol, line}}} ->
        collect(port, %{state | lines: [line | state.lines]}, deadline)

      {^port, {:exit_status, 0}} ->
        state

      {^port, {:exit_status, status}} ->
        Mix.raise(
          "the generator failed with status #{status}: " <>
            Enum.join(Enum.reverse(state.lines), "\n")
        )
    after
      left ->
        with {:os_pid, pid} <- Port.info(port, :os_pid), do: System.cmd("kill", ["#{pid}"])
        Mix.raise("the generator did not finish within --timeout")
    end
  end

  defp parse_result(fields) do
    result =
      fields
      |> String.split()
      |> Map.new(fn field ->
        [key, value] = String.split(field, "=")
        {String.to_atom(key), if(value == "-", do: nil, else: String.to_integer(value))}
      end)

    cpu =
      if result.cpu_user_us && result.cpu_sys_us,
        do: %{user_us: result.cpu_user_us, sys_us: result.cpu_sys_us}

    Map.put(result, :cpu, cpu)
  end

  ## Redis baseline

  defp redis(rows, config) do
    case Redis.missing() do
      [] ->
        kb = Enum.find(rows, &(&1.mode == "encoded_1kb")) || Enum.find(rows, &(&1.payload == @kb))
        n = if kb, do: kb.messages, else: config.messages

        opts = %{
          n: n,
          connections: config.connections,
          pipeline: config.pipeline,
          value_size: @kb,
          maxlen: @redis_maxlen,
          hz: config.hz,
          quiet: config.quiet,
          server_core: config.server_core,
          generator_core: config.generator_core
        }

        r = Redis.xadd(opts)

        %{
          mode: "redis_xadd_1kb",
          how: "redis-benchmark XADD MAXLEN #{@redis_maxlen}",
          command: r.command,
          payload_bytes: @kb,
          messages: n,
          connections: config.connections,
          pipeline: config.pipeline,
          per_frame: 1,
          acks: r.completed,
          ack_frames: nil,
          seconds: r.seconds,
          msgs_per_s: r.rate,
          mb_per_s: r.rate * @kb / 1.0e6,
          overwritten: nil,
          server_cpu: r.server_cpu,
          generator_cpu: r.generator_cpu,
          cpu_mode: Pin.mode(config.server_core)
        }

      missing ->
        IO.puts(
          "--vs-redis: #{Enum.join(missing, " and ")} not on the PATH " <>
            "(Debian packages redis-server and redis-tools): no Redis row, no ratio to Redis.\n"
        )

        nil
    end
  end

  # A 1 KB row's rate over Redis's, when Redis ran.
  defp with_ratios(rows) do
    case Enum.find(rows, &(&1.mode == "redis_xadd_1kb")) do
      nil ->
        Enum.map(rows, &Map.put(&1, :vs_redis, nil))

      redis ->
        Enum.map(rows, fn row ->
          ratio =
            if row.mode in ["encoded_1kb", "batched_1kb"], do: row.msgs_per_s / redis.msgs_per_s

          Map.put(row, :vs_redis, ratio)
        end)
    end
  end

  ## Output

  @columns [
    {"cpu", 7, :left},
    {"mode", 16, :left},
    {"how", 34, :left},
    {"conns", 6, :right},
    {"in flight", 10, :right},
    {"msgs/frame", 11, :right},
    {"payload", 8, :right},
    {"messages", 10, :right},
    {"seconds", 8, :right},
    {"msgs/s", 11, :right},
    {"srv µs/msg", 11, :right},
    {"srv sys%", 9, :right},
    {"gen µs/msg", 11, :right},
    {"MB/s", 8, :right},
    {"acks", 9, :right},
    {"ack frames", 11, :right},
    {"overwr.", 9, :right}
  ]

  defp print(rows, config) do
    IO.puts("")

    Table.print(@columns, rows, fn row ->
      [
        row.cpu_mode,
        row.mode,
        row.how,
        row.connections,
        row.pipeline,
        row.per_frame,
        row.payload_bytes,
        row.messages,
        fmt(row.seconds, 2),
        round(row.msgs_per_s),
        fmt(per_msg(row.server_cpu, row), 2),
        fmt(sys_pct(row.server_cpu), 0),
        fmt(per_msg(row.generator_cpu, row), 2),
        fmt(row.mb_per_s, 1),
        row.acks,
        row.ack_frames,
        row.overwritten
      ]
    end)

    if redis = Enum.find(rows, &(&1.mode == "redis_xadd_1kb")),
      do: IO.puts("\nRedis: " <> redis.command)

    print_ratios(rows)
    print_targets(rows, config)
  end

  defp print_ratios(rows) do
    redis = Enum.find(rows, &(&1.mode == "redis_xadd_1kb"))

    for %{vs_redis: ratio} = row when is_float(ratio) <- rows do
      like? = row.mode == "encoded_1kb"

      IO.puts(
        "#{row.mode} / redis_xadd_1kb: #{fmt(ratio, 2)}x " <>
          "(#{round(row.msgs_per_s)} vs #{round(redis.msgs_per_s)} msgs/s, same run; " <>
          if(like?,
            do:
              "like for like: a frame and an ack per message, " <>
                "#{row.connections} connections x #{row.pipeline} in flight on both sides)",
            else:
              "not like for like: #{row.per_frame} messages a frame and one ack per batch " <>
                "over #{row.connections} connection, against one XADD and one reply per message)"
          )
      )
    end

    :ok
  end

  defp print_targets(rows, config) do
    targets = rows |> Enum.map(&target(&1, config)) |> Enum.reject(&is_nil/1)

    if targets != [] do
      IO.puts("\nTargets:")
      Enum.each(targets, &IO.puts("  " <> &1))
    end

    :ok
  end

  defp target(%{mode: "encoded"} = row, _config) do
    "encoded, #{row.payload_bytes} B PUSH frames each acked and stored: " <>
      "#{round(row.msgs_per_s)} msgs/s (target >= #{@encoded_target}): " <>
      verdict(row.msgs_per_s >= @encoded_target)
  end

  defp target(%{mode: "coalesced"} = row, _config) do
    "coalesced, push_async/4 with linger: 0: #{round(row.msgs_per_s)} msgs/s " <>
      "(target >= #{@pipelined_target}): " <> verdict(row.msgs_per_s >= @pipelined_target)
  end

  defp target(%{mode: "pipelined"} = row, _config) do
    "pipelined, Ringbus.Client.push_async/4: #{round(row.msgs_per_s)} msgs/s " <>
      "(target >= #{@pipelined_target}): " <> verdict(row.msgs_per_s >= @pipelined_target)
  end

  defp target(%{mode: "encoded_1kb", vs_redis: ratio}, _config) when is_float(ratio) do
    "encoded_1kb / redis_xadd_1kb: #{fmt(ratio, 2)}x (target >= #{fmt(@vs_redis_target, 1)}x): " <>
      verdict(ratio >= @vs_redis_target)
  end

  defp target(_row, _config), do: nil

  defp verdict(true), do: "met"
  defp verdict(false), do: "missed"

  defp csv_row(row) do
    [
      row.mode,
      row.how,
      row.payload_bytes,
      row.messages,
      row.connections,
      row.pipeline,
      row.per_frame,
      row.acks,
      row.ack_frames,
      row.seconds,
      round(row.msgs_per_s),
      row.mb_per_s,
      per_msg(row.server_cpu, row),
      sys_pct(row.server_cpu),
      per_msg(row.generator_cpu, row),
      row.overwritten,
      row.vs_redis,
      row.cpu_mode
    ]
  end

  defp per_msg(nil, _row), do: nil
  defp per_msg(%{user_us: user, sys_us: sys}, row), do: (user + sys) / row.messages

  defp sys_pct(%{user_us: user, sys_us: sys}) when user + sys > 0, do: 100.0 * sys / (user + sys)
  defp sys_pct(_cpu), do: nil

  defp fmt(nil, _), do: nil
  defp fmt(value, 0), do: value |> round() |> Integer.to_string()
  defp fmt(value, decimals), do: :erlang.float_to_binary(value / 1, decimals: decimals)
end
