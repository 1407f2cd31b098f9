defmodule Ringbus.Bench.Ingest do
  @moduledoc """
  The TCP ingest bench: how many messages a producer gets stored **and
  acknowledged** through `Ringbus.Client` and `Ringbus.Server`, by the way it
  pushes, and against Redis `XADD` in the same run.

      mix ringbus.bench ingest
      mix ringbus.bench ingest --vs-redis --out ingest.csv
      mix ringbus.bench ingest --messages 200000 --modes pipelined,batched   # a quick look

  ## What it does

  The bench VM starts a `Ringbus.Server` on 127.0.0.1 (port 0). For each mode
  it creates a fresh channel, `overflow: :drop_oldest` (so with more messages
  than the capacity the ring really overwrites), and starts the load
  generator in a **separate OS process**: a second BEAM
  (`elixir -pa <this build's ebin> -e ...`) running
  `Ringbus.Bench.Ingest.Generator`, which connects with `Ringbus.Client` and
  pushes. Client and server therefore share the machine's cores as two
  separate VMs would in production, and neither sees the other's scheduler.

  The generator times itself, from connected to the last ack received, and
  reports on a stdout line that the bench parses. Every push is acked (no
  no-ack mode); a mode counts only when every ack came back without error and
  the server's `Ringbus.info/1` of the channel says `pushed` equals the
  messages sent.

  The modes (`--modes`), each a row:

    * `request_reply` - `Ringbus.Client.push/3`: one push, wait for its ack,
      the next. Bounded by `--rr-messages` since it is slow.
    * `pipelined` - `Ringbus.Client.push_async/4` of single payloads: one
      `PUSH` frame each, up to the client's `max_pending` (100,000) in
      flight; acks come back in `PUSH_ACKS` frames, one per server read.
    * `batched` - `push_async/4` of lists of `--batch` payloads: one
      `PUSH_BATCH` frame and one ack entry per batch.
    * `1kb` - as `batched`, with 1,024-byte payloads.

  A batch holds `--batch` messages or `--batch-bytes` of payload, whichever
  is fewer: 1,000 messages of 16 bytes, 256 of 1 KB. A producer that batches
  by count alone sends 1 MB frames of 1 KB messages, and every such frame is
  above the binary allocator's single-block carrier threshold (512 KB by
  default, `+MBsbct`): the server then joins each one into memory of its own,
  an mmap and fresh pages per frame. Measured here, `1kb` row with 448 KiB
  reads and a 1,000,000 capacity: 0.81–0.83M msgs/s in 1,000-message batches,
  up to 1.44M in 400-message ones.

  The channel of the `1kb` row keeps 200,000 messages, the `MAXLEN` Redis
  keeps below, so both servers hold the same 200 MB; the other rows use
  `--capacity`.

  `request_reply`, `pipelined` and `batched` use `--payload` bytes (16 by
  default). MB/s counts payload bytes only.

  With `--vs-redis`, if `redis-server` and `redis-benchmark` are on the PATH,
  the bench starts `redis-server` on a free port of 127.0.0.1 with no
  persistence (`--save "" --appendonly no`), runs

      redis-benchmark -h 127.0.0.1 -p PORT -n N -P 16 -q XADD s MAXLEN 200000 * f <1,024 bytes>

  with N the messages of the `1kb` row, prints the ratio of Ringbus `1kb` to
  Redis `XADD` in messages per second, adds a `redis_xadd_1kb` row, and stops
  the Redis server. Without them it says so and skips.

  The CPU time of the server's VM over each mode (`:erlang.statistics(:runtime)`,
  all schedulers) and of the generator's VM is printed beside the rate, so a
  reader sees which side was busy.

  ## Output

  A table with one row per mode; `--out` writes it as CSV with the columns
  `mode,payload_bytes,messages,msgs_per_s,mb_per_s`.

  ## Command line options

    * `-n`, `--messages` - messages of the `pipelined`, `batched` and `1kb`
      modes. Defaults to `2000000`.
    * `--rr-messages` - messages of the `request_reply` mode, at most
      `--messages`. Defaults to `200000`.
    * `-p`, `--payload` - payload bytes of every mode but `1kb`. Defaults to `16`.
    * `-m`, `--modes` - the modes to run, comma-separated. Defaults to
      `request_reply,pipelined,batched,1kb`.
    * `-b`, `--batch` - messages per `PUSH_BATCH` frame. Defaults to `1000`.
    * `--batch-bytes` - payload bytes per `PUSH_BATCH` frame at most (see
      above). Defaults to `262144`.
    * `-c`, `--capacity` - the channel's capacity in every mode but `1kb`.
      Defaults to `1000000`.
    * `--vs-redis` - run redis-benchmark `XADD` as the baseline (see above).
    * `-o`, `--out` - write the rows as CSV to this file.
    * `--timeout` - the most seconds one mode may take before the generator
      gives up. Defaults to `300`.

    * `-q`, `--quiet` - no progress lines.

  Progress goes to stderr, a line per 10% of each mode's messages.
  """

  alias Ringbus.Bench.{Args, CSV, RedisServer}

  @modes ["request_reply", "pipelined", "batched", "1kb"]

  @switches [
    messages: :integer,
    rr_messages: :integer,
    payload: :integer,
    modes: :string,
    batch: :integer,
    batch_bytes: :integer,
    capacity: :integer,
    vs_redis: :boolean,
    out: :string,
    timeout: :integer,
    quiet: :boolean
  ]

  @aliases [n: :messages, p: :payload, m: :modes, b: :batch, c: :capacity, o: :out, q: :quiet]

  @header ["mode", "payload_bytes", "messages", "msgs_per_s", "mb_per_s"]

  @redis_value_size 1024
  @redis_maxlen 200_000

  @doc "Runs the bench with command line arguments; returns the rows."
  @spec run([String.t()]) :: [map()]
  def run(args) do
    {opts, _} = OptionParser.parse!(args, strict: @switches, aliases: @aliases)
    config = config!(opts)

    {:ok, server} = Ringbus.Server.start_link(port: 0, auto_create: false)
    port = Ringbus.Server.port(server)

    IO.puts(
      "Ringbus ingest: server on 127.0.0.1:#{port} in this VM (#{System.schedulers_online()} schedulers), " <>
        "load generator in a separate BEAM; OTP #{System.otp_release()}, " <>
        "#{:erlang.system_info(:logical_processors_available)} cores available"
    )

    IO.puts(
      "channel capacity #{config.capacity} (1kb: #{@redis_maxlen}), overflow drop_oldest; " <>
        "batches of #{config.batch} messages or #{config.batch_bytes} bytes; " <>
        "every push acked; max_pending 100000"
    )

    IO.puts("VM memory: #{Ringbus.Server.Memory.describe()}\n")

    rows = Enum.map(config.modes, &run_mode(&1, port, config))
    Supervisor.stop(server)

    redis = if config.vs_redis, do: redis(rows), else: nil
    print(rows, redis)

    all = rows ++ List.wrap(redis)

    if config.out do
      CSV.write!(config.out, @header, Enum.map(all, &csv_row/1))
      IO.puts("wrote #{config.out}")
    end

    all
  end

  defp config!(opts) do
    messages = Args.positive!(opts, :messages, 2_000_000)
    modes = opts |> Keyword.get(:modes, Enum.join(@modes, ",")) |> String.split(",", trim: true)

    for mode <- modes, mode not in @modes do
      Mix.raise("unknown mode #{inspect(mode)}; expected some of: #{Enum.join(@modes, ",")}")
    end

    config = %{
      messages: messages,
      rr_messages: min(Keyword.get(opts, :rr_messages, 200_000), messages),
      payload: Keyword.get(opts, :payload, 16),
      modes: modes,
      batch: Args.positive!(opts, :batch, 1_000),
      batch_bytes: Args.positive!(opts, :batch_bytes, 256 * 1024),
      capacity: Args.positive!(opts, :capacity, 1_000_000),
      vs_redis: Keyword.get(opts, :vs_redis, false),
      out: Keyword.get(opts, :out),
      timeout: Args.positive!(opts, :timeout, 300),
      quiet: Keyword.get(opts, :quiet, false)
    }

    if config.payload < 0, do: Mix.raise("expected --payload to be >= 0")
    config
  end

  ## Ringbus modes

  defp run_mode(mode, port, config) do
    {generator_mode, payload, n, how} =
      case mode do
        "request_reply" -> {"request_reply", config.payload, config.rr_messages, "push/3, wait"}
        "pipelined" -> {"pipelined", config.payload, config.messages, "PUSH frames"}
        "batched" -> {"batched", config.payload, config.messages, "PUSH_BATCH"}
        "1kb" -> {"batched", @redis_value_size, config.messages, "PUSH_BATCH"}
      end

    capacity = if mode == "1kb", do: @redis_maxlen, else: config.capacity
    batch = config.batch |> min(div(config.batch_bytes, max(payload, 1))) |> max(1)
    how = if generator_mode == "batched", do: "#{how} of #{batch}", else: how
    channel = "ingest." <> mode
    :ok = Ringbus.create(channel, capacity: capacity, overflow: :drop_oldest)

    unless config.quiet,
      do: IO.puts(:stderr, "==> #{mode}: #{n} messages of #{payload} bytes (#{how})")

    args = [
      "--port",
      port,
      "--mode",
      generator_mode,
      "--messages",
      n,
      "--payload",
      payload,
      "--batch",
      batch,
      "--channel",
      channel,
      "--timeout",
      config.timeout
    ]

    args = if config.quiet, do: args ++ ["--quiet"], else: args

    {runtime0, _} = :erlang.statistics(:runtime)
    result = generate(Enum.map(args, &to_string/1))
    {runtime1, _} = :erlang.statistics(:runtime)
    {:ok, info} = Ringbus.info(channel)
    :ok = Ringbus.delete(channel)

    cond do
      result.errors > 0 ->
        Mix.raise("#{mode}: #{result.errors} pushes were acked with an error")

      info.pushed != n ->
        Mix.raise("#{mode}: the server stored #{info.pushed} messages, expected #{n}")

      true ->
        seconds = result.elapsed_us / 1.0e6

        %{
          mode: mode,
          how: how,
          payload_bytes: payload,
          messages: n,
          seconds: seconds,
          msgs_per_s: n / seconds,
          mb_per_s: n * payload / seconds / 1.0e6,
          ack_messages: result.ack_messages,
          overwritten: info.overwritten,
          server_cpu_s: (runtime1 - runtime0) / 1000,
          generator_cpu_s: result.cpu_ms / 1000
        }
    end
  end

  # Runs the generator in its own BEAM and parses its result line.
  defp generate(args) do
    elixir = System.find_executable("elixir") || Mix.raise("elixir is not on the PATH")
    ebin = :code.which(Ringbus.Client) |> to_string() |> Path.dirname()
    # The elixir CLI reads options up to the first plain argument: "generate".
    code = "Ringbus.Bench.Ingest.Generator.main(tl(System.argv()))"

    case System.cmd(elixir, ["-pa", ebin, "-e", code, "generate" | args]) do
      {out, 0} ->
        case Regex.run(~r/^RESULT (.*)$/m, out) do
          [_, fields] ->
            fields
            |> String.split()
            |> Map.new(fn field ->
              [key, value] = String.split(field, "=")
              {String.to_atom(key), String.to_integer(value)}
            end)

          nil ->
            Mix.raise("the generator printed no result: #{inspect(out)}")
        end

      {out, status} ->
        Mix.raise("the generator failed with status #{status}: #{String.trim(out)}")
    end
  end

  ## Redis baseline

  defp redis(rows) do
    with true <- RedisServer.available?(),
         bench when is_binary(bench) <- System.find_executable("redis-benchmark") do
      n =
        case Enum.find(rows, &(&1.mode == "1kb")) do
          %{messages: n} -> n
          nil -> 200_000
        end

      redis_xadd(bench, n)
    else
      _ ->
        IO.puts("redis-server or redis-benchmark is not on the PATH: skipping --vs-redis\n")
        nil
    end
  end

  defp redis_xadd(bench, n) do
    redis = RedisServer.start!()

    try do
      value = :binary.copy("v", @redis_value_size)

      args =
        ["-h", "127.0.0.1", "-p", "#{redis.port}", "-n", "#{n}", "-P", "16", "-q"] ++
          ["XADD", "s", "MAXLEN", "#{@redis_maxlen}", "*", "f", value]

      IO.puts(
        :stderr,
        "==> redis: redis-benchmark -h 127.0.0.1 -p #{redis.port} -n #{n} -P 16 -q " <>
          "XADD s MAXLEN #{@redis_maxlen} * f <#{@redis_value_size} bytes>"
      )

      {out, 0} = System.cmd(bench, args)

      rate =
        case Regex.scan(~r/([\d.]+) requests per second/, out) do
          [] -> Mix.raise("cannot read redis-benchmark's output: #{inspect(out)}")
          matches -> matches |> List.last() |> Enum.at(1) |> parse_float()
        end

      %{
        mode: "redis_xadd_1kb",
        how: "redis-benchmark -P 16",
        payload_bytes: @redis_value_size,
        messages: n,
        seconds: n / rate,
        msgs_per_s: rate,
        mb_per_s: rate * @redis_value_size / 1.0e6,
        ack_messages: nil,
        overwritten: nil,
        server_cpu_s: nil,
        generator_cpu_s: nil
      }
    after
      RedisServer.stop(redis)
    end
  end

  defp parse_float(text) do
    {value, _} = Float.parse(text)
    value
  end

  ## Output

  defp print(rows, redis) do
    IO.puts("")

    IO.puts(
      pad("mode", 16) <>
        pad("how", 22) <>
        lpad("payload", 8) <>
        lpad("messages", 10) <>
        lpad("seconds", 9) <>
        lpad("msgs/s", 12) <>
        lpad("MB/s", 9) <>
        lpad("ack msgs", 10) <>
        lpad("overwr.", 9) <>
        lpad("srv cpu s", 10) <> lpad("gen cpu s", 10)
    )

    for row <- rows ++ List.wrap(redis) do
      IO.puts(
        pad(row.mode, 16) <>
          pad(row.how, 22) <>
          lpad(row.payload_bytes, 8) <>
          lpad(row.messages, 10) <>
          lpad(fmt(row.seconds, 2), 9) <>
          lpad(round(row.msgs_per_s), 12) <>
          lpad(fmt(row.mb_per_s, 1), 9) <>
          lpad(row.ack_messages, 10) <>
          lpad(row.overwritten, 9) <>
          lpad(fmt(row.server_cpu_s, 2), 10) <> lpad(fmt(row.generator_cpu_s, 2), 10)
      )
    end

    IO.puts("")

    case {Enum.find(rows, &(&1.mode == "1kb")), redis} do
      {%{msgs_per_s: ours}, %{msgs_per_s: theirs}} ->
        IO.puts(
          "Ringbus 1kb / Redis XADD -P 16: #{fmt(ours / theirs, 2)}x " <>
            "(#{round(ours)} vs #{round(theirs)} msgs/s, same run)"
        )

      _ ->
        :ok
    end
  end

  defp csv_row(row),
    do: [row.mode, row.payload_bytes, row.messages, round(row.msgs_per_s), row.mb_per_s]

  defp fmt(nil, _), do: "-"
  defp fmt(value, decimals), do: :erlang.float_to_binary(value / 1, decimals: decimals)

  defp pad(value, width), do: String.pad_trailing(to_string(value), width)
  defp lpad(nil, width), do: String.pad_leading("-", width)
  defp lpad(value, width), do: String.pad_leading(to_string(value), width)
end
