defmodule Ringbus.Bench.Ingest.Redis do
  @moduledoc false
  # The Redis baseline of `Ringbus.Bench.Ingest`: a `redis-server` of its own
  # on a free port of 127.0.0.1, without persistence, loaded by
  # `redis-benchmark` with `XADD s MAXLEN <maxlen> * f <value>`, then stopped.
  #
  # What the row reports is read, not assumed: the rate and the requests
  # completed from redis-benchmark's own summary; the server's CPU from `INFO
  # cpu` before and after; that every XADD was executed and none failed from
  # `INFO commandstats`, and the stream's length from `XLEN`; redis-benchmark's
  # CPU from the shell that waited for it (`cutime` and `cstime` in
  # /proc/PID/stat), when there is a /proc.

  alias Ringbus.Bench.{CPU, RedisServer}

  @executables ["redis-server", "redis-benchmark"]

  @doc "The executables the baseline needs that are not on the PATH."
  @spec missing() :: [String.t()]
  def missing, do: Enum.reject(@executables, &System.find_executable/1)

  @doc "The redis-benchmark command line, with the value shown by its size."
  @spec command(map(), :inet.port_number() | String.t()) :: String.t()
  def command(opts, port) do
    pin = if core = Map.get(opts, :generator_core), do: "taskset -c #{core} ", else: ""

    pin <>
      "redis-benchmark -h 127.0.0.1 -p #{port} -c #{opts.connections} -P #{opts.pipeline} " <>
      "-n #{opts.n} XADD s MAXLEN #{opts.maxlen} * f <#{opts.value_size} bytes>"
  end

  @doc """
  Runs the baseline. `opts`: `n`, `connections`, `pipeline`, `value_size`,
  `maxlen`, `hz` (clock ticks a second, see `Ringbus.Bench.CPU`), `quiet`
  (no progress line), and optionally `server_core` and `generator_core`, the
  cores to pin `redis-server` and `redis-benchmark` to. Raises
  `Mix.Error` when Redis did not store what it acknowledged.
  """
  @spec xadd(map()) :: map()
  def xadd(opts) do
    bench = System.find_executable("redis-benchmark")
    redis = RedisServer.start!(core: Map.get(opts, :server_core))
    port = redis.port

    try do
      unless opts.quiet, do: IO.puts(:stderr, "==> redis: " <> command(opts, port))
      before = info(port)
      {out, cpu} = benchmark(bench, port, opts)
      later = info(port)
      check_stored!(opts, before, later, xlen(port))
      {completed, seconds, rate} = summary!(out)

      if completed != opts.n do
        Mix.raise("redis-benchmark completed #{completed} requests, expected #{opts.n}")
      end

      %{
        completed: completed,
        seconds: seconds,
        rate: rate,
        server_cpu: %{
          user_us: round((later.cpu_user - before.cpu_user) * 1.0e6),
          sys_us: round((later.cpu_sys - before.cpu_sys) * 1.0e6)
        },
        generator_cpu: cpu,
        command: command(opts, port)
      }
    after
      RedisServer.stop(redis)
    end
  end

  # redis-benchmark under a shell that prints its own /proc stat once the
  # benchmark has exited: its children's CPU is redis-benchmark's.
  defp benchmark(bench, port, opts) do
    sh = System.find_executable("sh") || Mix.raise("sh is not on the PATH")

    script =
      ~S|"$@"; status=$?; printf '\nPROCSTAT '; cat /proc/$$/stat 2>/dev/null; exit $status|

    args =
      ["-h", "127.0.0.1", "-p", "#{port}", "-c", "#{opts.connections}"] ++
        ["-P", "#{opts.pipeline}", "-n", "#{opts.n}"] ++
        ["XADD", "s", "MAXLEN", "#{opts.maxlen}", "*", "f", :binary.copy("v", opts.value_size)]

    {exe, args} = Ringbus.Bench.Pin.command(Map.get(opts, :generator_core), bench, args)

    case System.cmd(sh, ["-c", script, "sh", exe | args]) do
      {out, 0} ->
        cpu =
          case Regex.run(~r/^PROCSTAT (.*)$/m, out) do
            [_, stat] -> stat |> CPU.parse() |> CPU.children(opts.hz)
            nil -> nil
          end

        {out, cpu}

      {out, status} ->
        Mix.raise(
          "redis-benchmark failed with status #{status}: #{String.slice(out, -2000, 2000)}"
        )
    end
  end

  # "N requests completed in S seconds" and "throughput summary: R requests per second".
  defp summary!(out) do
    with [_, completed, seconds] <-
           Regex.run(~r/(\d+) requests completed in ([\d.]+) seconds/, out),
         [_, rate] <- Regex.run(~r/throughput summary: ([\d.]+) requests per second/, out) do
      {String.to_integer(completed), parse_float(seconds), parse_float(rate)}
    else
      _ -> Mix.raise("cannot read redis-benchmark's summary: #{String.slice(out, -2000, 2000)}")
    end
  end

  defp check_stored!(opts, before, later, xlen) do
    calls = later.xadd_calls - before.xadd_calls
    failed = later.xadd_failed - before.xadd_failed

    cond do
      calls != opts.n ->
        Mix.raise("redis ran XADD #{calls} times, expected #{opts.n}")

      failed != 0 ->
        Mix.raise("#{failed} of redis's XADDs failed or were rejected")

      xlen != min(opts.n, opts.maxlen) ->
        Mix.raise("the redis stream holds #{xlen} entries, expected #{min(opts.n, opts.maxlen)}")

      true ->
        :ok
    end
  end

  ## A few RESP commands over a socket of our own

  defp info(port) do
    text = command!(port, "INFO all")
    lines = Regex.scan(~r/^([a-z0-9_|]+):(.*)\r$/m, text, capture: :all_but_first)
    fields = Map.new(lines, &List.to_tuple/1)
    xadd = Map.get(fields, "cmdstat_xadd", "")

    %{
      cpu_user: parse_float(Map.fetch!(fields, "used_cpu_user")),
      cpu_sys: parse_float(Map.fetch!(fields, "used_cpu_sys")),
      xadd_calls: stat(xadd, "calls"),
      xadd_failed: stat(xadd, "failed_calls") + stat(xadd, "rejected_calls")
    }
  end

  defp stat(text, key) do
    case Regex.run(~r/(?:^|,)#{key}=(\d+)/, text) do
      [_, n] -> String.to_integer(n)
      nil -> 0
    end
  end

  defp xlen(port) do
    case command!(port, "XLEN s") do
      ":" <> n -> n |> String.trim() |> String.to_integer()
      other -> Mix.raise("unexpected answer to XLEN: #{inspect(other)}")
    end
  end

  # Sends an inline command and reads one reply: an integer or a bulk string.
  defp command!(port, command) do
    {:ok, socket} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false], 5_000)

    try do
      :ok = :gen_tcp.send(socket, command <> "\r\n")
      reply(socket, <<>>)
    after
      :gen_tcp.close(socket)
    end
  end

  defp reply(socket, buffer) do
    case buffer do
      <<":", _::binary>> = int ->
        if String.ends_with?(int, "\r\n"), do: int, else: reply(socket, more(socket, buffer))

      <<"$", rest::binary>> ->
        with [size, body] <- String.split(rest, "\r\n", parts: 2),
             {size, ""} <- Integer.parse(size),
             true <- byte_size(body) >= size + 2 do
          binary_part(body, 0, size)
        else
          _ -> reply(socket, more(socket, buffer))
        end

      <<"-", _::binary>> = error ->
        Mix.raise("redis answered: #{String.trim(error)}")

      _ ->
        reply(socket, more(socket, buffer))
    end
  end

  defp more(socket, buffer) do
    case :gen_tcp.recv(socket, 0, 5_000) do
      {:ok, data} -> buffer <> data
      {:error, reason} -> Mix.raise("redis did not answer: #{inspect(reason)}")
    end
  end

  defp parse_float(text) do
    {value, _} = Float.parse(text)
    value
  end
end
