defmodule Ringbus.Bench.Buffer do
  @moduledoc """
  The bounded-buffer bench: push/pull latency of a full 200,000-item buffer
  of 1 KB binaries, Ringbus against the two ways the field report built it
  (Saša Jurić, "Reducing the maximum latency of a bound buffer", 2016).

      mix ringbus.bench buffer
      mix ringbus.bench buffer -m queue,ringbus --runs 3 --out buffer.csv --svg buffer.svg
      mix ringbus.bench buffer --capacity 1000 --ops 4000    # a quick look

  ## What it does

  Each implementation gets a fresh buffer of `--capacity` items and a
  warm-up: push `capacity` items, pull them all, push `capacity` again, so
  that the buffer is full. Then come `--ops` requests in cycles of 15 pushes
  and 5 pulls, so most pushes overwrite the oldest item. Every pushed item is
  a distinct 1,024-byte binary (a refc binary, off every process heap); they
  are built in pools of 1,500 before each block of 2,000 requests, never
  inside a timed call.

  The implementations (`-m`):

    * `queue` - a `:queue` and a size in a GenServer
      (`Ringbus.Bench.QueueBuffer`); every item is a live reference on the
      server's heap.
    * `ets_server` - an ETS ring of slots with wrapping indices in a
      GenServer (`Ringbus.Bench.EtsServerBuffer`); only the indices live on
      the server's heap.
    * `ringbus` - a Ringbus channel through `Ringbus.push/2` and
      `Ringbus.pull/1`, called from the bench process the way users call
      them. No process holds the state: each call runs in the caller against
      ETS and `:atomics`.

  Each run of each implementation happens in a new calling process, on a new
  buffer (a new GenServer, or a channel created for the run and deleted
  after it), with a garbage collection of the bench process in between. With
  `--runs N` the implementations take turns, run after run, and every figure
  reported is the median of the N runs (the longest ten position by position).

  ## Timing

  By default the calling process reads `:erlang.monotonic_time/0` around
  every call and keeps the durations in an `:atomics` array, not on its heap.
  With `--trace` the figures come from Erlang tracing instead, as in the
  report: for `queue` and `ets_server`, the time from the server receiving
  each call to its sending the reply; for `ringbus`, which has no server,
  the calling process's calls to `Ringbus.push/2` and `Ringbus.pull/1`, from
  call to return. Tracing adds the cost of its trace messages to what it
  measures.

  In both modes the process holding the state (the GenServer) and the calling
  process have their garbage collections traced by a separate collector
  process (`Ringbus.Bench.Tracer`): count and longest. For `ringbus` the
  GC and memory figures of the "buffer process" are those of the table owner,
  `Ringbus.Store`, which is not on the call path; the calling process's are
  printed beside them. Memory figures are read once the requests are done,
  before the buffer is torn down.

  ## Output

  Per implementation: the average, the 99%, 99.9%, 99.99%, 99.999% and 100%
  (max) latencies in µs and the longest ten; the GC count and longest GC of
  the buffer process and of the calling process; the buffer process's memory
  and the VM's total memory; then each implementation's average, 99.999% and
  max compared with `queue`'s.

  `--out` writes one CSV row per implementation with the columns
  `impl,avg_us,p99_us,p99_9_us,p99_99_us,p99_999_us,max_us,gc_count,gc_max_us,proc_mem_kb,total_mem_mb`.
  `--svg` draws every implementation's latency against the percentile (see
  `Ringbus.Bench.Chart`).

  ## Command line options

    * `-m`, `--impl` - the implementations to run, comma-separated, from
      `queue`, `ets_server` and `ringbus`. Defaults to all three.
    * `-r`, `--runs` - how many times to run each implementation; figures are
      the medians. Defaults to `1`.
    * `-c`, `--capacity` - the buffer's capacity; the warm-up scales with it.
      Defaults to `200000`.
    * `-n`, `--ops` - the requests measured after the warm-up. Defaults to
      `2000000`.
    * `-t`, `--trace` - measure with Erlang tracing instead of timing calls in
      the caller.
    * `-o`, `--out` - write the figures as CSV to this file.
    * `--svg` - draw the latency percentiles as SVG to this file.
    * `--timeout` - the most seconds one run may take before the bench gives
      up. Defaults to `600`.

  Progress goes to stderr, a line per 10% of each run's requests.
  """

  alias Ringbus.Bench.{Args, Chart, CSV, EtsServerBuffer, QueueBuffer, Stats, Tracer}

  @impls ["queue", "ets_server", "ringbus"]

  @titles %{
    "queue" => ":queue in a GenServer",
    "ets_server" => "ETS ring in a GenServer",
    "ringbus" => "Ringbus channel, Ringbus.push/2 and Ringbus.pull/1 from the caller"
  }

  @switches [
    impl: :string,
    runs: :integer,
    capacity: :integer,
    ops: :integer,
    trace: :boolean,
    out: :string,
    svg: :string,
    timeout: :integer
  ]

  @aliases [m: :impl, r: :runs, c: :capacity, n: :ops, t: :trace, o: :out]

  @payload_size 1024
  @filler :binary.copy(<<0xA5>>, @payload_size - 8)
  @cycle 20
  @pushes 15
  # A multiple of @cycle, so every full block has @pushes / @cycle pushes.
  @block 2_000

  @percentiles [
    {"99%", :p99_us, 0.99},
    {"99.9%", :p99_9_us, 0.999},
    {"99.99%", :p99_99_us, 0.9999},
    {"99.999%", :p99_999_us, 0.99999}
  ]

  @csv_columns [
    :avg_us,
    :p99_us,
    :p99_9_us,
    :p99_99_us,
    :p99_999_us,
    :max_us,
    :gc_count,
    :gc_max_us,
    :proc_mem_kb,
    :total_mem_mb
  ]

  @typedoc "The figures of one implementation (medians when there were several runs)."
  @type result :: %{
          required(:impl) => String.t(),
          required(:runs) => pos_integer(),
          required(:avg_us) => float(),
          required(:max_us) => float(),
          required(:longest_us) => [float()],
          required(:curve) => [Stats.point()],
          optional(atom()) => number()
        }

  @doc """
  Runs the bench with command line `args` (see the module doc), prints the
  figures and returns them. Raises `OptionParser.ParseError` on an unknown
  option and `Mix.Error` on a bad value.
  """
  @spec run([String.t()]) :: [result()]
  def run(args) do
    config = parse!(args)

    IO.puts(
      "Buffer bench: capacity #{config.capacity}, #{config.ops} requests " <>
        "(#{@pushes} pushes : #{@cycle - @pushes} pulls) of #{@payload_size}-byte binaries, " <>
        "#{config.runs} run(s), #{timing(config)}; " <>
        "OTP #{System.otp_release()}, #{System.schedulers_online()} schedulers"
    )

    runs =
      for run <- 1..config.runs, impl <- config.impls do
        {impl, measure(impl, run, config)}
      end

    results =
      for impl <- config.impls do
        runs |> Enum.filter(&(elem(&1, 0) == impl)) |> Enum.map(&elem(&1, 1)) |> combine(impl)
      end

    Enum.each(results, &print_result(&1, config))
    print_comparison(results)

    if config.out do
      rows = Enum.map(results, fn r -> [r.impl | Enum.map(@csv_columns, &Map.fetch!(r, &1))] end)
      CSV.write!(config.out, ["impl" | Enum.map(@csv_columns, &Atom.to_string/1)], rows)
      IO.puts("Wrote #{config.out}")
    end

    if config.svg do
      series = Enum.map(results, &{&1.impl, &1.curve})
      title = "Buffer push/pull latency, capacity #{config.capacity}, #{timing(config)}"
      File.write!(config.svg, Chart.percentiles(series, title: title))
      IO.puts("Wrote #{config.svg}")
    end

    results
  end

  ## Options

  defp parse!(args) do
    {opts, rest} = OptionParser.parse!(args, strict: @switches, aliases: @aliases)
    if rest != [], do: Mix.raise("unexpected arguments: #{Enum.join(rest, " ")}")

    impls =
      opts
      |> Keyword.get(:impl, Enum.join(@impls, ","))
      |> String.split(",", trim: true)
      |> Enum.uniq()

    case impls -- @impls do
      [] when impls != [] ->
        :ok

      _ ->
        Mix.raise(
          "expected --impl to be a comma-separated list of #{Enum.join(@impls, ", ")}, " <>
            "got: #{inspect(opts[:impl])}"
        )
    end

    %{
      impls: impls,
      runs: Args.positive!(opts, :runs, 1),
      capacity: Args.positive!(opts, :capacity, 200_000),
      ops: Args.positive!(opts, :ops, 2_000_000),
      timeout_ms: Args.positive!(opts, :timeout, 600) * 1000,
      trace?: Keyword.get(opts, :trace, false),
      out: opts[:out],
      svg: opts[:svg]
    }
  end

  defp timing(%{trace?: true}), do: "traced"
  defp timing(_config), do: "caller-side timing"

  ## One run

  defp measure(impl, run, config) do
    :erlang.garbage_collect()
    raw = Task.async(fn -> drive(impl, run, config) end) |> Task.await(config.timeout_ms + 60_000)
    summary = Task.async(fn -> summarize(raw) end) |> Task.await(300_000)

    IO.puts(
      "#{impl} run #{run}/#{config.runs}: average #{us(summary.avg_us)}, " <>
        "99.999% #{us(summary.p99_999_us)}, max #{us(summary.max_us)}, " <>
        "buffer process GCs #{summary.gc_count} (longest #{us(summary.gc_max_us)}), " <>
        "#{:erlang.float_to_binary(summary.elapsed_s, decimals: 1)} s"
    )

    summary
  end

  # Runs in a process of its own: the caller of every push and pull.
  defp drive(impl, run, config) do
    deadline = now() + System.convert_time_unit(config.timeout_ms, :millisecond, :native)
    target = setup(impl, config.capacity)
    next_id = warm_up(target, config.capacity, deadline)
    holder = holder(target)
    max_samples = [max_samples: config.ops]

    {holder_mode, caller_mode} =
      case {config.trace?, target} do
        {false, _} -> {:gc, :gc}
        {true, {:ringbus, _}} -> {:gc, {:calls, [{Ringbus, :push, 2}, {Ringbus, :pull, 1}]}}
        {true, _} -> {:messages, :gc}
      end

    holder_tracer = Tracer.start(holder, holder_mode, max_samples)
    caller_tracer = Tracer.start(self(), caller_mode, max_samples)
    samples = Stats.new_samples(config.ops)
    label = "#{impl} run #{run}/#{config.runs}"

    started = now()
    timed_blocks(target, samples, 0, config.ops, next_id, {label, deadline, 0})
    elapsed = now() - started

    holder_trace = Tracer.stop(holder_tracer)
    caller_trace = Tracer.stop(caller_tracer)

    traced =
      cond do
        not config.trace? -> nil
        holder_mode == :messages -> holder_trace
        true -> caller_trace
      end

    raw = %{
      impl: impl,
      samples: if(traced, do: traced.samples, else: samples),
      count: if(traced, do: min(traced.requests, config.ops), else: config.ops),
      requests: if(traced, do: traced.requests, else: config.ops),
      unit: if(traced, do: :nanosecond, else: :native),
      elapsed_s: System.convert_time_unit(elapsed, :native, :microsecond) / 1_000_000,
      gc_count: holder_trace.gc_count,
      gc_max_ns: holder_trace.gc_max_ns,
      gc_total_ns: holder_trace.gc_total_ns,
      caller_gc_count: caller_trace.gc_count,
      caller_gc_max_ns: caller_trace.gc_max_ns,
      proc_mem: memory(holder),
      caller_mem: memory(self()),
      table_bytes: table_bytes(target),
      total_mem: :erlang.memory(:total)
    }

    teardown(target)
    raw
  end

  defp setup("queue", capacity) do
    {:ok, pid} = QueueBuffer.start_link(capacity)
    {:queue, pid}
  end

  defp setup("ets_server", capacity) do
    {:ok, pid} = EtsServerBuffer.start_link(capacity)
    {:ets_server, pid}
  end

  defp setup("ringbus", capacity) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: capacity)
    {:ringbus, name}
  end

  defp holder({:ringbus, _name}), do: Process.whereis(Ringbus.Store)
  defp holder({_impl, pid}), do: pid

  defp teardown({:queue, pid}), do: QueueBuffer.stop(pid)
  defp teardown({:ets_server, pid}), do: EtsServerBuffer.stop(pid)
  defp teardown({:ringbus, name}), do: :ok = Ringbus.delete(name)

  defp memory(pid), do: pid |> Process.info(:memory) |> elem(1)

  defp table_bytes({:queue, _pid}), do: nil
  defp table_bytes({:ets_server, pid}), do: EtsServerBuffer.info(pid).table_bytes

  defp table_bytes({:ringbus, name}) do
    {:ok, channel} = Ringbus.Store.fetch(name)
    :ets.info(channel.table, :memory) * :erlang.system_info(:wordsize)
  end

  ## Warm-up: fill, empty, fill again; untimed

  defp warm_up(target, capacity, deadline) do
    next_id = untimed_pushes(target, capacity, 0, deadline)
    untimed_pulls(target, capacity)
    untimed_pushes(target, capacity, next_id, deadline)
  end

  defp untimed_pushes(_target, 0, next_id, _deadline), do: next_id

  defp untimed_pushes(target, left, next_id, deadline) do
    check_deadline!(deadline)
    count = min(left, @block)
    pool = pool(next_id, count)
    for j <- 0..(count - 1), do: push(target, elem(pool, j))
    untimed_pushes(target, left - count, next_id + count, deadline)
  end

  defp untimed_pulls(target, count) do
    for _ <- 1..count//1, do: {:ok, _} = pull(target)
    :ok
  end

  defp push({:queue, pid}, bin), do: :ok = QueueBuffer.push(pid, bin)
  defp push({:ets_server, pid}, bin), do: :ok = EtsServerBuffer.push(pid, bin)
  defp push({:ringbus, name}, bin), do: {:ok, _seq} = Ringbus.push(name, bin)

  defp pull({:queue, pid}), do: QueueBuffer.pull(pid)
  defp pull({:ets_server, pid}), do: EtsServerBuffer.pull(pid)

  defp pull({:ringbus, name}) do
    case Ringbus.pull(name) do
      {:ok, _seq, bin} -> {:ok, bin}
      :empty -> :empty
    end
  end

  ## Timed requests, a block at a time

  defp timed_blocks(_target, _samples, done, ops, _next_id, _progress) when done >= ops, do: :ok

  defp timed_blocks(target, samples, done, ops, next_id, {label, deadline, shown}) do
    check_deadline!(deadline)
    stop = min(done + @block, ops)
    count = pushes_before(stop) - pushes_before(done)
    pool = pool(next_id, count)
    timed(target, samples, done, stop, pool, 0)

    tenth = div(stop * 10, ops)
    if tenth > shown, do: IO.puts(:stderr, "#{label}: #{tenth * 10}% (#{stop}/#{ops})")

    timed_blocks(target, samples, stop, ops, next_id + count, {label, deadline, tenth})
  end

  defp pushes_before(i), do: div(i, @cycle) * @pushes + min(rem(i, @cycle), @pushes)

  defp timed(_target, _samples, stop, stop, _pool, _j), do: :ok

  defp timed(target, samples, i, stop, pool, j) when rem(i, @cycle) < @pushes do
    :ok = :atomics.put(samples, i + 1, timed_push(target, elem(pool, j)))
    timed(target, samples, i + 1, stop, pool, j + 1)
  end

  defp timed(target, samples, i, stop, pool, j) do
    :ok = :atomics.put(samples, i + 1, timed_pull(target))
    timed(target, samples, i + 1, stop, pool, j)
  end

  defp timed_push(target, bin) do
    started = :erlang.monotonic_time()
    push(target, bin)
    :erlang.monotonic_time() - started
  end

  defp timed_pull(target) do
    started = :erlang.monotonic_time()
    result = pull(target)
    took = :erlang.monotonic_time() - started
    pulled!(result, took)
  end

  defp pulled!({:ok, _bin}, took), do: took
  defp pulled!(:empty, took), do: took

  # Distinct binaries: each starts with its own id.
  defp pool(first_id, count) do
    for(id <- first_id..(first_id + count - 1)//1, do: <<id::64, @filler::binary>>)
    |> List.to_tuple()
  end

  defp check_deadline!(deadline) do
    if now() > deadline, do: Mix.raise("a buffer bench run took longer than --timeout; stopped")
  end

  defp now, do: :erlang.monotonic_time()

  ## Figures

  defp summarize(raw) do
    sorted = Stats.sorted(raw.samples, raw.count)
    per_us = System.convert_time_unit(1_000_000, :microsecond, raw.unit) / 1_000_000
    to_us = &(&1 / per_us)

    percentiles =
      Map.new(@percentiles, fn {_label, key, p} -> {key, to_us.(Stats.percentile(sorted, p))} end)

    Map.merge(percentiles, %{
      impl: raw.impl,
      requests: raw.requests,
      elapsed_s: raw.elapsed_s,
      avg_us: to_us.(Stats.mean(sorted)),
      max_us: to_us.(Stats.percentile(sorted, 1.0)),
      longest_us: sorted |> Stats.longest(10) |> Enum.map(to_us),
      curve: sorted |> Stats.curve(0.05) |> Enum.map(fn {x, v} -> {x, to_us.(v)} end),
      gc_count: raw.gc_count,
      gc_max_us: raw.gc_max_ns / 1000,
      gc_total_ms: raw.gc_total_ns / 1_000_000,
      caller_gc_count: raw.caller_gc_count,
      caller_gc_max_us: raw.caller_gc_max_ns / 1000,
      proc_mem_kb: div(raw.proc_mem, 1024),
      caller_mem_kb: div(raw.caller_mem, 1024),
      table_kb: raw.table_bytes && div(raw.table_bytes, 1024),
      total_mem_mb: raw.total_mem / 1_048_576
    })
  end

  defp combine([single], _impl), do: Map.put(single, :runs, 1)

  defp combine([first | _] = runs, impl) do
    scalars =
      first
      |> Map.drop([:impl, :longest_us, :curve, :table_kb])
      |> Map.new(fn {key, _} -> {key, Stats.median(Enum.map(runs, &Map.fetch!(&1, key)))} end)

    table_kb = if first.table_kb, do: Stats.median(Enum.map(runs, & &1.table_kb))

    curve_xs = Enum.map(first.curve, &elem(&1, 0))
    curve_ys = Stats.median_each(Enum.map(runs, fn r -> Enum.map(r.curve, &elem(&1, 1)) end))

    Map.merge(scalars, %{
      impl: impl,
      runs: length(runs),
      table_kb: table_kb,
      longest_us: Stats.median_each(Enum.map(runs, & &1.longest_us)),
      curve: Enum.zip(curve_xs, curve_ys)
    })
  end

  ## Printing

  defp print_result(r, config) do
    runs = if r.runs > 1, do: "median of #{r.runs} runs", else: "1 run"
    IO.puts("\n== #{r.impl}: #{@titles[r.impl]} (#{runs}, #{timing(config)})")
    if config.trace?, do: IO.puts(traced_what(r.impl))

    IO.puts("push/pull (#{r.requests} times, average: #{us(r.avg_us)})")
    for {label, key, _p} <- @percentiles, do: IO.puts("  #{label}: #{us(Map.fetch!(r, key))}")
    IO.puts("  100%: #{us(r.max_us)}")
    IO.puts("  Longest 10 (µs): " <> Enum.map_join(r.longest_us, " ", &number/1))

    if r.impl == "ringbus" do
      IO.puts(
        "No process holds the buffer: pushes and pulls run in the calling process " <>
          "against ETS and :atomics."
      )

      IO.puts(
        "GCs of the table owner Ringbus.Store (not on the call path): #{r.gc_count}, " <>
          "longest #{us(r.gc_max_us)}; its memory: #{number(r.proc_mem_kb)} KB"
      )
    else
      IO.puts(
        "GCs of the buffer process: #{r.gc_count}, longest #{us(r.gc_max_us)}, " <>
          "total #{number(r.gc_total_ms)} ms"
      )

      IO.puts("Buffer process memory: #{number(r.proc_mem_kb)} KB")
    end

    IO.puts(
      "GCs of the calling process: #{r.caller_gc_count}, longest #{us(r.caller_gc_max_us)}; " <>
        "its memory: #{number(r.caller_mem_kb)} KB"
    )

    if r.table_kb, do: IO.puts("ETS table (payloads are off-heap): #{number(r.table_kb)} KB")
    IO.puts("Total VM memory: #{number(r.total_mem_mb)} MB")
  end

  defp traced_what("ringbus"),
    do:
      "Traced: the calling process's calls to Ringbus.push/2 and Ringbus.pull/1, call to return."

  defp traced_what(_impl),
    do: "Traced: the server, from receiving each call to sending its reply."

  defp print_comparison(results) do
    with %{} = base <- Enum.find(results, &(&1.impl == "queue")),
         [_ | _] = others <- Enum.reject(results, &(&1.impl == "queue")) do
      IO.puts("\nCompared with queue in the same run (queue's figure / this one's):")

      for r <- others do
        IO.puts(
          "  #{r.impl}: average #{ratio(base.avg_us, r.avg_us)}, " <>
            "99.999% #{ratio(base.p99_999_us, r.p99_999_us)}, " <>
            "max #{ratio(base.max_us, r.max_us)}"
        )
      end
    end

    :ok
  end

  defp ratio(_base, value) when value == 0, do: "n/a"
  defp ratio(base, value), do: :erlang.float_to_binary(base / value, decimals: 1) <> "x"

  defp us(value), do: number(value) <> " µs"

  defp number(value) when is_integer(value), do: Integer.to_string(value)
  defp number(value) when value < 10, do: :erlang.float_to_binary(value / 1, decimals: 2)
  defp number(value) when value < 1000, do: :erlang.float_to_binary(value / 1, decimals: 1)
  defp number(value), do: value |> round() |> Integer.to_string()
end
