defmodule Ringbus.Bench.Buffer do
  @moduledoc """
  The bounded-buffer bench: push/pull latency of a full 200,000-item buffer
  of 1 KB binaries, Ringbus against the two ways the field report built it
  (Saša Jurić, "Reducing the maximum latency of a bound buffer", 2016), with
  one caller and with several callers at once.

      mix ringbus.bench buffer
      mix ringbus.bench buffer -m queue,ringbus --runs 3 --out buffer.csv --svg buffer.svg
      mix ringbus.bench buffer --capacity 1000 --ops 4000    # a quick look

  ## What it compares

  The implementations (`-m`):

    * `queue` - a `:queue` and a size in a GenServer
      (`Ringbus.Bench.QueueBuffer`); every item is a live reference on the
      server's heap.
    * `ets_server` - an ETS ring of slots with wrapping indices in a
      GenServer (`Ringbus.Bench.EtsServerBuffer`); only the indices live on
      the server's heap.
    * `ringbus` - a Ringbus channel through `Ringbus.push/2` and
      `Ringbus.pull/1`, called the way users call them. No process holds the
      state: each call runs in the caller against ETS and `:atomics`.

  Each in two variants, in the same run:

    * `single` - one calling process makes every request, as in the report.
    * `contended` - `--producers` processes (4 by default) push and
      `--pullers` processes (2) pull at the same time, each timing its own
      calls. A GenServer then serves six callers; a Ringbus channel is
      worked on by six processes at once.

  ## What it does

  Each run of an implementation and variant gets a fresh buffer of
  `--capacity` items (a new GenServer, or a channel created for the run and
  deleted after it) and an untimed warm-up: push `capacity` items, pull them
  all, push `capacity` again, so that the buffer is full. Every pushed item is
  a distinct 1,024-byte binary (a refc binary, off every process heap); each
  caller builds them in pools of up to 2,000 before each block of requests,
  never inside a timed call.

  `single`: `--ops` requests in cycles of 15 pushes and 5 pulls, so most
  pushes overwrite the oldest item, all from one new calling process.

  `contended`: the same mix of pushes and pulls, min(`--ops`, 4 x
  `--capacity`) requests in all: three quarters of them pushes, shared
  evenly by the producers, one quarter pulls, shared by the pullers. The
  callers are started, build their first pool, and are let go together; the
  run ends when the last one is done.

  **No timed pull finds the buffer empty.** A push never makes the buffer
  hold fewer items, so a full buffer of `capacity` items still holds one for
  each of `capacity` pulls, whatever the pushes do and in whatever order the
  callers run; `single` pulls far fewer than it pushes, and `contended` pulls
  at most `capacity` times (hence its bound on the requests). Every timed
  pull that returns `:empty` is counted, and a run with any fails with an
  error naming the implementation, the variant and the count: a pull that
  found nothing took no item and would flatter the figures.

  With `--runs N` the implementations take turns, run after run (all
  `single` runs of a round, then all `contended` ones), with a garbage
  collection of the bench process in between, and every figure reported is
  the median of the N runs (the longest ten position by position).

  ## Timing

  By default each calling process reads `:erlang.monotonic_time/0` around
  every call and keeps the durations in an `:atomics` array, not on its heap.
  Under contention a call's time includes any wait for a scheduler: that is
  what a caller sees.

  With `--trace` the `single` figures come from Erlang tracing instead, as in
  the report: for `queue` and `ets_server`, the time from the server
  receiving each call to its sending the reply; for `ringbus`, which has no
  server, the calling process's calls to `Ringbus.push/2` and
  `Ringbus.pull/1`, from call to return. Tracing adds the cost of its trace
  messages to what it measures. The `contended` variant is only timed in the
  callers, so `--trace` skips it (and says so).

  The process holding the state (the GenServer) and, in `single` runs, the
  calling process have their garbage collections traced by a separate
  collector process (`Ringbus.Bench.Tracer`): count and longest. For
  `ringbus` the GC and memory figures of the "buffer process" are those of the
  table owner, `Ringbus.Store`, which is not on the call path. Memory figures
  are read once the requests are done, before the buffer is torn down.

  ## Output

  Per implementation and variant: the average, the 99%, 99.9%, 99.99%,
  99.999% and 100% (max) latencies in µs and the longest ten; the GC count and
  longest GC of the buffer process (and of the calling process in `single`
  runs); the buffer process's memory and the VM's total memory. Then a
  summary table with the average, 99.999% and max of every implementation in
  both variants, each compared with `queue`'s in the same variant, and each
  `contended` figure over the same implementation's `single` one; and the
  targets for `ringbus`: its contended 99.999% at most 2x its single-caller
  99.999%, and its contended max at least 20x below `queue`'s.

  `--out` writes one CSV row per implementation and variant with the columns
  `impl,variant,callers,producers,pullers,requests,runs,avg_us,p99_us,p99_9_us,p99_99_us,p99_999_us,max_us,gc_count,gc_max_us,proc_mem_kb,total_mem_mb`,
  where `variant` is `single` or `contended`, `callers` the processes making
  requests (in `single` rows the one caller both pushes and pulls), and
  `runs` how many runs the medians are taken over. `--svg` draws every row's
  latency against the percentile (see `Ringbus.Bench.Chart`).

  ## Command line options

    * `-m`, `--impl` - the implementations to run, comma-separated, from
      `queue`, `ets_server` and `ringbus`. Defaults to all three.
    * `-r`, `--runs` - how many times to run each implementation and
      variant; figures are the medians. Defaults to `1`.
    * `-c`, `--capacity` - the buffer's capacity; the warm-up scales with it.
      Defaults to `200000`.
    * `-n`, `--ops` - the requests measured after the warm-up, in `single`
      runs, and at most in `contended` ones (see above). Defaults to
      `2000000`.
    * `--producers` - the pushing processes of a `contended` run. Defaults
      to `4`.
    * `--pullers` - the pulling processes of a `contended` run. Defaults to
      `2`.
    * `--no-contended` - run the `single` variant only.
    * `-t`, `--trace` - measure `single` runs with Erlang tracing instead of
      timing calls in the caller; skips `contended`.
    * `-o`, `--out` - write the figures as CSV to this file.
    * `--svg` - draw the latency percentiles as SVG to this file.
    * `--timeout` - the most seconds one run may take before the bench gives
      up. Defaults to `600`.

  Progress goes to stderr: a line per 10% of each `single` run's requests,
  one at the start of each `contended` run.
  """

  alias Ringbus.Bench.{Args, Chart, CSV, EtsServerBuffer, QueueBuffer, Stats, Table, Tracer}

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
    producers: :integer,
    pullers: :integer,
    contended: :boolean,
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

  # Targets for ringbus, checked on the printed summary.
  @contended_p99_999_target 2.0
  @contended_max_target 20.0

  @percentiles [
    {"99%", :p99_us, 0.99},
    {"99.9%", :p99_9_us, 0.999},
    {"99.99%", :p99_99_us, 0.9999},
    {"99.999%", :p99_999_us, 0.99999}
  ]

  @csv_columns [
    :variant,
    :callers,
    :producers,
    :pullers,
    :requests,
    :runs,
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

  @typedoc """
  The figures of one implementation in one variant (medians when there were
  several runs).
  """
  @type result :: %{
          required(:impl) => String.t(),
          required(:variant) => String.t(),
          required(:runs) => pos_integer(),
          required(:requests) => pos_integer(),
          required(:avg_us) => float(),
          required(:max_us) => float(),
          required(:longest_us) => [float()],
          required(:curve) => [Stats.point()],
          optional(atom()) => term()
        }

  @doc """
  Runs the bench with command line `args` (see the module doc), prints the
  figures and returns them. Raises `OptionParser.ParseError` on an unknown
  option, and `Mix.Error` on a bad value or when a timed pull found the
  buffer empty.
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

    IO.puts(contended_line(config))

    runs =
      for run <- 1..config.runs, variant <- config.variants, impl <- config.impls do
        {{impl, variant}, measure(impl, variant, run, config)}
      end

    results =
      for variant <- config.variants, impl <- config.impls do
        runs
        |> Enum.filter(&(elem(&1, 0) == {impl, variant}))
        |> Enum.map(&elem(&1, 1))
        |> combine()
      end

    Enum.each(results, &print_result(&1, config))
    print_summary(results)
    print_targets(results)

    if config.out do
      rows = Enum.map(results, fn r -> [r.impl | Enum.map(@csv_columns, &Map.fetch!(r, &1))] end)
      CSV.write!(config.out, ["impl" | Enum.map(@csv_columns, &Atom.to_string/1)], rows)
      IO.puts("Wrote #{config.out}")
    end

    if config.svg do
      series = Enum.map(results, &{label(&1), &1.curve})
      title = "Buffer push/pull latency, capacity #{config.capacity}, #{timing(config)}"
      File.write!(config.svg, Chart.percentiles(series, title: title))
      IO.puts("Wrote #{config.svg}")
    end

    results
  end

  ## Options

  defp parse!(args) do
    opts = Args.parse!(args, @switches, @aliases)

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

    capacity = Args.positive!(opts, :capacity, 200_000)
    ops = Args.positive!(opts, :ops, 2_000_000)
    trace? = Keyword.get(opts, :trace, false)
    contended? = Keyword.get(opts, :contended, true) and not trace?

    %{
      impls: impls,
      variants: if(contended?, do: ["single", "contended"], else: ["single"]),
      runs: Args.positive!(opts, :runs, 1),
      capacity: capacity,
      ops: ops,
      producers: Args.positive!(opts, :producers, 4),
      pullers: Args.positive!(opts, :pullers, 2),
      # At most `capacity` pulls, so that the pullers never find it empty.
      contended_ops: min(ops, 4 * capacity),
      timeout_ms: Args.positive!(opts, :timeout, 600) * 1000,
      trace?: trace?,
      skipped_contended?: trace? and Keyword.get(opts, :contended, true),
      out: opts[:out],
      svg: opts[:svg]
    }
  end

  defp timing(%{trace?: true}), do: "traced"
  defp timing(_config), do: "caller-side timing"

  defp contended_line(%{skipped_contended?: true}),
    do: "Contended variant skipped: --trace times single callers only."

  defp contended_line(config) do
    if "contended" in config.variants do
      pushes = pushes_before(config.contended_ops)

      "Contended variant: #{config.producers} producers and #{config.pullers} pullers at once, " <>
        "#{config.contended_ops} requests (#{pushes} pushes, " <>
        "#{config.contended_ops - pushes} pulls), caller-side timing"
    else
      "Contended variant: not run (--no-contended)."
    end
  end

  ## One run

  defp measure(impl, variant, run, config) do
    :erlang.garbage_collect()
    label = "#{impl} #{variant} run #{run}/#{config.runs}"

    outcome =
      Task.async(fn ->
        try do
          {:ok, drive(variant, impl, label, config)}
        catch
          :throw, :over_time -> :over_time
        end
      end)
      |> Task.await(config.timeout_ms + 60_000)

    raw =
      case outcome do
        {:ok, raw} -> raw
        :over_time -> Mix.raise("#{label} took longer than --timeout; stopped")
      end

    if raw.empty_pulls > 0 do
      Mix.raise(
        "#{label}: #{raw.empty_pulls} timed pull(s) of #{impl} (#{variant}) returned :empty; " <>
          "the workload never empties the buffer, so a pull that finds nothing is a fault, " <>
          "and its time is no pull's time"
      )
    end

    summary = Task.async(fn -> summarize(raw) end) |> Task.await(300_000)

    IO.puts(
      "#{label}: average #{us(summary.avg_us)}, " <>
        "99.999% #{us(summary.p99_999_us)}, max #{us(summary.max_us)}, " <>
        "buffer process GCs #{summary.gc_count} (longest #{us(summary.gc_max_us)}), " <>
        "#{:erlang.float_to_binary(summary.elapsed_s, decimals: 1)} s"
    )

    summary
  end

  # Runs in a process of its own. The buffer is torn down however the run ends.
  defp drive(variant, impl, label, config) do
    deadline = now() + System.convert_time_unit(config.timeout_ms, :millisecond, :native)
    target = setup(impl, config.capacity)

    try do
      next_id = warm_up(target, config.capacity, deadline)
      holder = holder(target)

      raw =
        case variant do
          "single" -> single(target, holder, next_id, label, deadline, config)
          "contended" -> contended(target, holder, next_id, label, deadline, config)
        end

      Map.merge(raw, %{
        impl: impl,
        variant: variant,
        proc_mem: memory(holder),
        table_bytes: table_bytes(target),
        total_mem: :erlang.memory(:total)
      })
    after
      teardown(target)
    end
  end

  # One caller, the bench's own process.
  defp single(target, holder, next_id, label, deadline, config) do
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
    empties = :counters.new(1, [:atomics])

    started = now()
    timed_blocks(target, {samples, empties}, 0, config.ops, next_id, {label, deadline, 0})
    elapsed = now() - started

    holder_trace = Tracer.stop(holder_tracer)
    caller_trace = Tracer.stop(caller_tracer)

    traced =
      cond do
        not config.trace? -> nil
        holder_mode == :messages -> holder_trace
        true -> caller_trace
      end

    %{
      callers: 1,
      producers: 1,
      pullers: 1,
      samples: if(traced, do: traced.samples, else: samples),
      count: if(traced, do: min(traced.requests, config.ops), else: config.ops),
      requests: if(traced, do: traced.requests, else: config.ops),
      unit: if(traced, do: :nanosecond, else: :native),
      elapsed_s: seconds(elapsed),
      empty_pulls: :counters.get(empties, 1),
      gc_count: holder_trace.gc_count,
      gc_max_ns: holder_trace.gc_max_ns,
      gc_total_ns: holder_trace.gc_total_ns,
      caller_gc_count: caller_trace.gc_count,
      caller_gc_max_ns: caller_trace.gc_max_ns,
      caller_mem: memory(self())
    }
  end

  # Producers and pullers at once. Each times its own calls into its own
  # range of one samples array.
  defp contended(target, holder, next_id, label, deadline, config) do
    total = config.contended_ops
    pushes = pushes_before(total)
    samples = Stats.new_samples(total)
    empties = :counters.new(1, [:atomics])

    jobs =
      jobs(:push, pushes, config.producers, 0, next_id) ++
        jobs(:pull, total - pushes, config.pullers, pushes, nil)

    IO.puts(:stderr, "#{label}: #{length(jobs)} callers")
    holder_tracer = Tracer.start(holder, :gc)
    parent = self()
    go = make_ref()

    callers =
      for job <- jobs do
        spawn_link(fn -> caller(target, job, {samples, empties}, deadline, {parent, go}) end)
      end

    for pid <- callers do
      receive do
        {^go, :ready, ^pid} -> :ok
      end
    end

    started = now()
    Enum.each(callers, &send(&1, go))
    outcome = await_callers(callers, go, deadline, :done)
    elapsed = now() - started
    holder_trace = Tracer.stop(holder_tracer)
    if outcome == :over_time, do: throw(:over_time)

    %{
      callers: length(jobs),
      producers: config.producers,
      pullers: config.pullers,
      samples: samples,
      count: total,
      requests: total,
      unit: :native,
      elapsed_s: seconds(elapsed),
      empty_pulls: :counters.get(empties, 1),
      gc_count: holder_trace.gc_count,
      gc_max_ns: holder_trace.gc_max_ns,
      gc_total_ns: holder_trace.gc_total_ns,
      caller_gc_count: nil,
      caller_gc_max_ns: nil,
      caller_mem: nil
    }
  end

  # `count` requests of one kind shared by `callers` processes: each gets its
  # share, its first index in the samples and, for pushes, its first item id.
  defp jobs(kind, count, callers, first_index, first_id) do
    {jobs, _offset} =
      Enum.map_reduce(Stats.shares(count, callers), 0, fn share, offset ->
        job = %{kind: kind, count: share, index: first_index + offset}
        job = if kind == :push, do: Map.put(job, :first_id, first_id + offset), else: job
        {job, offset + share}
      end)

    jobs
  end

  defp caller(target, job, recording, deadline, {parent, go}) do
    pool = if job.kind == :push, do: pool(job.first_id, min(job.count, @block))
    send(parent, {go, :ready, self()})

    receive do
      ^go -> :ok
    end

    send(parent, {go, caller_blocks(target, job, recording, 0, pool, deadline), self()})
  end

  defp caller_blocks(_target, %{count: count}, _recording, count, _pool, _deadline), do: :done

  defp caller_blocks(target, job, recording, done, pool, deadline) do
    if now() > deadline do
      :over_time
    else
      stop = min(done + @block, job.count)
      from = job.index + done
      to = job.index + stop

      pool =
        case job.kind do
          :push ->
            timed_pushes(target, recording, from, to, pool, 0)
            pool(job.first_id + stop, min(job.count - stop, @block))

          :pull ->
            timed_pulls(target, recording, from, to)
            nil
        end

      caller_blocks(target, job, recording, stop, pool, deadline)
    end
  end

  # Waits for every caller's outcome; a run over --timeout is one outcome.
  defp await_callers([], _go, _deadline, outcome), do: outcome

  defp await_callers(callers, go, deadline, outcome) do
    left = System.convert_time_unit(deadline - now(), :native, :millisecond)

    receive do
      {^go, :done, pid} -> await_callers(List.delete(callers, pid), go, deadline, outcome)
      {^go, :over_time, pid} -> await_callers(List.delete(callers, pid), go, deadline, :over_time)
    after
      max(left, 0) + 60_000 -> :over_time
    end
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

  defp timed_blocks(_target, _recording, done, ops, _next_id, _progress) when done >= ops,
    do: :ok

  defp timed_blocks(target, recording, done, ops, next_id, {label, deadline, shown}) do
    check_deadline!(deadline)
    stop = min(done + @block, ops)
    count = pushes_before(stop) - pushes_before(done)
    pool = pool(next_id, count)
    timed(target, recording, done, stop, pool, 0)

    tenth = div(stop * 10, ops)
    if tenth > shown, do: IO.puts(:stderr, "#{label}: #{tenth * 10}% (#{stop}/#{ops})")

    timed_blocks(target, recording, stop, ops, next_id + count, {label, deadline, tenth})
  end

  defp pushes_before(i), do: div(i, @cycle) * @pushes + min(rem(i, @cycle), @pushes)

  # The single caller's cycle of pushes and pulls; `i` is the request's index.
  defp timed(_target, _recording, stop, stop, _pool, _j), do: :ok

  defp timed(target, recording, i, stop, pool, j) when rem(i, @cycle) < @pushes do
    timed_push(target, recording, i, elem(pool, j))
    timed(target, recording, i + 1, stop, pool, j + 1)
  end

  defp timed(target, recording, i, stop, pool, j) do
    timed_pull(target, recording, i)
    timed(target, recording, i + 1, stop, pool, j)
  end

  defp timed_pushes(_target, _recording, stop, stop, _pool, _j), do: :ok

  defp timed_pushes(target, recording, i, stop, pool, j) do
    timed_push(target, recording, i, elem(pool, j))
    timed_pushes(target, recording, i + 1, stop, pool, j + 1)
  end

  defp timed_pulls(_target, _recording, stop, stop), do: :ok

  defp timed_pulls(target, recording, i, stop) do
    timed_pull(target, recording, i)
    timed_pulls(target, recording, i + 1, stop)
  end

  defp timed_push(target, {samples, _empties}, i, bin) do
    started = :erlang.monotonic_time()
    push(target, bin)
    :ok = :atomics.put(samples, i + 1, :erlang.monotonic_time() - started)
  end

  defp timed_pull(target, {samples, empties}, i) do
    started = :erlang.monotonic_time()
    result = pull(target)
    :ok = :atomics.put(samples, i + 1, :erlang.monotonic_time() - started)

    case result do
      {:ok, _bin} -> :ok
      :empty -> :counters.add(empties, 1, 1)
    end
  end

  # Distinct binaries: each starts with its own id.
  defp pool(_first_id, 0), do: {}

  defp pool(first_id, count) do
    for(id <- first_id..(first_id + count - 1)//1, do: <<id::64, @filler::binary>>)
    |> List.to_tuple()
  end

  defp check_deadline!(deadline) do
    if now() > deadline, do: throw(:over_time)
  end

  defp now, do: :erlang.monotonic_time()

  defp seconds(native), do: System.convert_time_unit(native, :native, :microsecond) / 1_000_000

  ## Figures

  defp summarize(raw) do
    sorted = Stats.sorted(raw.samples, raw.count)
    per_us = System.convert_time_unit(1_000_000, :microsecond, raw.unit) / 1_000_000
    to_us = &(&1 / per_us)

    percentiles =
      Map.new(@percentiles, fn {_label, key, p} -> {key, to_us.(Stats.percentile(sorted, p))} end)

    Map.merge(percentiles, %{
      impl: raw.impl,
      variant: raw.variant,
      callers: raw.callers,
      producers: raw.producers,
      pullers: raw.pullers,
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
      caller_gc_max_us: raw.caller_gc_max_ns && raw.caller_gc_max_ns / 1000,
      proc_mem_kb: div(raw.proc_mem, 1024),
      caller_mem_kb: raw.caller_mem && div(raw.caller_mem, 1024),
      table_kb: raw.table_bytes && div(raw.table_bytes, 1024),
      total_mem_mb: raw.total_mem / 1_048_576
    })
  end

  # The runs of one implementation and variant: medians of every number that
  # differs between them.
  defp combine([single]), do: Map.put(single, :runs, 1)

  defp combine([first | _] = runs) do
    scalars =
      first
      |> Map.drop([:longest_us, :curve])
      |> Map.new(fn {key, value} ->
        values = Enum.map(runs, &Map.fetch!(&1, key))

        cond do
          Enum.all?(values, &(&1 == value)) -> {key, value}
          Enum.all?(values, &is_number/1) -> {key, Stats.median(values)}
        end
      end)

    curve_xs = Enum.map(first.curve, &elem(&1, 0))
    curve_ys = Stats.median_each(Enum.map(runs, fn r -> Enum.map(r.curve, &elem(&1, 1)) end))

    Map.merge(scalars, %{
      runs: length(runs),
      longest_us: Stats.median_each(Enum.map(runs, & &1.longest_us)),
      curve: Enum.zip(curve_xs, curve_ys)
    })
  end

  ## Printing

  defp print_result(r, config) do
    runs = if r.runs > 1, do: "median of #{r.runs} runs", else: "1 run"
    timing = if r.variant == "single", do: timing(config), else: "caller-side timing"

    IO.puts("\n== #{r.impl}, #{variant_text(r)}: #{@titles[r.impl]} (#{runs}, #{timing})")
    if config.trace? and r.variant == "single", do: IO.puts(traced_what(r.impl))

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

    if r.caller_gc_count do
      IO.puts(
        "GCs of the calling process: #{r.caller_gc_count}, longest #{us(r.caller_gc_max_us)}; " <>
          "its memory: #{number(r.caller_mem_kb)} KB"
      )
    end

    if r.table_kb, do: IO.puts("ETS table (payloads are off-heap): #{number(r.table_kb)} KB")
    IO.puts("Total VM memory: #{number(r.total_mem_mb)} MB")
  end

  defp variant_text(%{variant: "single"}), do: "single caller"

  defp variant_text(%{variant: "contended"} = r),
    do: "contended: #{r.producers} producers and #{r.pullers} pullers at once"

  defp label(%{variant: "single", impl: impl}), do: impl
  defp label(%{variant: variant, impl: impl}), do: "#{impl} #{variant}"

  defp traced_what("ringbus"),
    do:
      "Traced: the calling process's calls to Ringbus.push/2 and Ringbus.pull/1, call to return."

  defp traced_what(_impl),
    do: "Traced: the server, from receiving each call to sending its reply."

  @summary [
    {"impl", 12, :left},
    {"variant", 11, :left},
    {"callers", 8, :right},
    {"requests", 10, :right},
    {"runs", 5, :right},
    {"avg", 9, :right},
    {"p99.999", 10, :right},
    {"max", 10, :right},
    {"p99.999 x queue", 17, :right},
    {"max x queue", 13, :right},
    {"p99.999 x single", 18, :right},
    {"max x single", 14, :right}
  ]

  # Every row side by side; "x queue" is queue's figure over this one in the
  # same variant, "x single" this one over the same impl's single-caller one.
  defp print_summary(results) do
    IO.puts("\nSummary (µs; contended: producers and pullers at once):")
    IO.puts(Table.header(@summary))

    for r <- results do
      queue = find(results, "queue", r.variant)
      single = if r.variant != "single", do: find(results, r.impl, "single")

      IO.puts(
        Table.line(@summary, [
          r.impl,
          r.variant,
          r.callers,
          r.requests,
          r.runs,
          number(r.avg_us),
          number(r.p99_999_us),
          number(r.max_us),
          ratio(queue, r, :p99_999_us),
          ratio(queue, r, :max_us),
          ratio(r, single, :p99_999_us),
          ratio(r, single, :max_us)
        ])
      )
    end

    :ok
  end

  defp print_targets(results) do
    ringbus = find(results, "ringbus", "contended")
    single = find(results, "ringbus", "single")
    queue = find(results, "queue", "contended")

    if ringbus do
      IO.puts("\nTargets for ringbus under contention (same run):")

      case single do
        %{p99_999_us: base} when base > 0 ->
          x = ringbus.p99_999_us / base

          IO.puts(
            "  99.999% contended / single caller: #{number(x)}x " <>
              "(#{number(ringbus.p99_999_us)} / #{number(base)} µs; " <>
              "target <= #{number(@contended_p99_999_target)}x): " <>
              verdict(x <= @contended_p99_999_target)
          )

        _ ->
          IO.puts("  99.999% contended / single caller: not measured")
      end

      case queue do
        %{max_us: queue_max} when ringbus.max_us > 0 ->
          x = queue_max / ringbus.max_us

          IO.puts(
            "  max, queue contended / ringbus contended: #{number(x)}x " <>
              "(#{number(queue_max)} / #{number(ringbus.max_us)} µs; " <>
              "target >= #{number(@contended_max_target)}x): " <>
              verdict(x >= @contended_max_target)
          )

        _ ->
          IO.puts("  max, queue contended / ringbus contended: queue not measured")
      end
    end

    :ok
  end

  defp find(results, impl, variant),
    do: Enum.find(results, &(&1.impl == impl and &1.variant == variant))

  defp ratio(nil, _r, _key), do: nil
  defp ratio(_base, nil, _key), do: nil

  defp ratio(top, bottom, key) do
    case {Map.fetch!(top, key), Map.fetch!(bottom, key)} do
      {_, b} when b == 0 -> "n/a"
      {t, b} -> :erlang.float_to_binary(t / b, decimals: 1) <> "x"
    end
  end

  defp verdict(true), do: "met"
  defp verdict(false), do: "missed"

  defp us(value), do: number(value) <> " µs"

  defp number(value) when is_integer(value), do: Integer.to_string(value)
  defp number(value) when value < 10, do: :erlang.float_to_binary(value / 1, decimals: 2)
  defp number(value) when value < 1000, do: :erlang.float_to_binary(value / 1, decimals: 1)
  defp number(value), do: value |> round() |> Integer.to_string()
end
