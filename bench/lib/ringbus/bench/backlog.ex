defmodule Ringbus.Bench.Backlog do
  @moduledoc """
  How long a process takes to work through a backlog of N messages, and how
  that time grows when N doubles. Run it with `mix ringbus.bench backlog`.

  Linear work shows a ratio near 2 per doubling; a selective receive per
  message over the backlog shows a ratio near 4 (O(N²)).

  ## Cases

    * `seed` - the field report: a process sends itself N messages, then
      handles each with a `:gen_udp.send/4` to a socket on 127.0.0.1 that
      nobody reads (packets may drop; that is fine). Variants:
      * `default` - the default `inet` backend, whose send waits for the
        port's reply with a selective receive: the baseline, O(N²)
      * `socket` - `{:inet_backend, :socket}`, whose send is a NIF call
      * `drained` - the default backend, draining the mailbox into a
        `Ringbus.Bench.Mailbox` (`max_len` from `--max-len`) before each send
    * `subscription` - a `Ringbus.Channel.Subscription` process is suspended
      with `:sys.suspend/1`, gets N messages, is resumed, and the time runs
      until a `:sys.get_state/2` queued behind them returns. Variants:
      * `ack` - N acks of one credit each on a full channel with no credit
        left, so each one reads and delivers one message
      * `wake` - N `:ringbus_wake` on an empty channel, so each one
        unregisters, reads, re-registers and re-arms the wake flag
      * `ack_on_heap`, `wake_on_heap` - the same, but started with
        `message_queue_data: :on_heap` instead of the subscription's own
        setting (`ack` and `wake` start it as `Ringbus.subscribe/2` does)
    * `store` - `Ringbus.Store` is suspended and gets N queued
      `Ringbus.create/2` calls for a channel that exists (a burst of
      "declare" calls from clients starting at once); each is answered
      `{:error, :exists}`, and every answer is counted

    * `connection` - a `Ringbus.Server` connection with N subscription
      deliveries queued in its mailbox (one message each, credit for all of
      them), suspended while they queue; the time runs until a raw TCP
      subscriber has read all N off the socket. Variant: `deliveries`.
    * `subscribe` - a burst of N subscribes on one channel from 1,250
      processes (N/1,250 each; as many as `subscribe_crowd` has at 10k), so
      that what grows with N is the number of subscribes and of live
      subscriptions, not the number of callers in flight; the time runs until
      every subscribe has returned (each process reports once, after its
      last). Variants:
      * `ringbus` - `Ringbus.subscribe/2`, which starts the subscription from
        the caller; it monitors the caller and the channel's anchor
      * `bare_start` - the floor the VM sets, for reference: the same burst
        of `GenServer.start/2` calls of a process that only monitors its
        caller, with no Ringbus code at all
    * `subscribe_crowd` - the same burst from N/8 processes making 8 each, as
      when every subscriber starts at once (160k subscriptions and their
      callers fit the default process limit). The number of callers in
      flight grows with N, and every start slows with it, Ringbus's or not.
      Variants:
      * `ringbus` and `bare_start` - as in `subscribe`
      * `spawn` - a plain `spawn/1` of a process that only monitors its
        caller, whose reply nobody waits for: the least a start can cost
      * `dynamic_supervisor` - the naive way, for contrast: the same starts
        as `start_child` calls to one `DynamicSupervisor`, suspended until
        N/8 of them have queued; it waits for each child's init with a
        selective receive that scans the calls queued behind it

  ## Adding a case

  A case is a row of `cases/1`: `{case, variant, run}` where `run.(n, budget)`
  sets up a backlog of `n` messages, times the work through it in native
  units, and returns `{:ok, native}`, or `{:over_budget, handled, native}` when
  it gave up after `budget` milliseconds. Setup is not timed. See
  `connection/2` for a case that drives a whole server connection.

  ## Command line options

    * `--sizes N,N,...` - the backlog sizes, ascending. Defaults to
      `10000,20000,40000,80000,160000`.
    * `--max-ms MS` - the time one row may take; a row over it stops, is
      reported as such, and the larger sizes of its series are skipped.
      Defaults to `60000`.
    * `--naive-max N` - the largest N of the `seed,default` row without
      `--full`; larger ones are skipped, as they would take minutes.
      Defaults to `80000`.
    * `--full` - runs `seed,default` at every size.
    * `--max-len N` - the `:max_len` of the `drained` variant's buffer.
      Defaults to `200000`.
    * `--repeat R` - runs each row up to R times and reports the median (the
      note column lists every run). A series runs in rounds: the first goes
      up the sizes; each later one runs again every size whose first run took
      under 2 s, going down the sizes and up again by turns, so that no size
      always runs on a VM just grown by the size before it. Defaults to `5`.
      So a cell is not always the median of R runs: one whose first run took
      2 s or more, or went over budget, ran once, a skipped one not at all,
      and a later run over budget is left out. The `runs` column of the table
      and of the CSV says how many runs each cell is the median of.
    * `--only NAME,...` - runs only these cases (`seed`) or variants
      (`seed/drained`). Defaults to all.
    * `--out FILE` - also writes the rows as CSV:
      `case,variant,n,runs,ms,ratio_per_doubling`, where `runs` is the number
      of runs `ms` is the median of (1 for a row over budget, 0 for a skipped
      one). A row that did not finish has `skipped` or `over_budget` in `ms`.
  """

  alias Ringbus.Bench.{Args, IdleServer, Stats}
  alias Ringbus.Channel.Subscription
  alias Ringbus.Bench.Mailbox
  alias Ringbus.Wire.Decoder

  import Bitwise, only: [<<<: 2]

  @default_sizes [10_000, 20_000, 40_000, 80_000, 160_000]
  @switches [
    sizes: :string,
    max_ms: :integer,
    naive_max: :integer,
    full: :boolean,
    max_len: :integer,
    repeat: :integer,
    only: :string,
    out: :string
  ]
  @repeat_below_ms 2_000

  @doc """
  Runs the bench with command line `args` (see the module doc) and prints the
  figures. Raises `OptionParser.ParseError` on an unknown option and
  `Mix.Error` on a bad value.
  """
  @spec run([String.t()]) :: :ok
  def run(args) do
    opts = Args.parse!(args, @switches)

    config = %{
      sizes: Args.sizes!(opts[:sizes], @default_sizes),
      max_ms: Args.positive!(opts, :max_ms, 60_000),
      naive_max: Args.positive!(opts, :naive_max, 80_000),
      full: Keyword.get(opts, :full, false),
      max_len: Args.positive!(opts, :max_len, 200_000),
      repeat: Args.positive!(opts, :repeat, 5),
      only: parse_only(opts[:only]),
      out: opts[:out]
    }

    IO.puts(
      "backlog: sizes #{Enum.join(config.sizes, ",")}, max #{config.max_ms} ms a row, " <>
        "drained max_len #{config.max_len}, up to #{config.repeat} runs a cell " <>
        "(ms is the median of the cell's runs, counted in the runs column), " <>
        "#{System.schedulers_online()} schedulers, " <>
        "OTP #{System.otp_release()}"
    )

    IO.puts(header())

    rows =
      config
      |> cases()
      |> Enum.filter(fn {kase, variant, _} -> selected?(config.only, kase, variant) end)
      |> Enum.flat_map(&run_series(&1, config))

    if config.out, do: write_csv(config.out, rows)
    :ok
  end

  @doc "The cases, in the order they run. See \"Adding a case\"."
  @spec cases(map()) :: [{String.t(), String.t(), (pos_integer(), pos_integer() -> term())}]
  def cases(config) do
    [
      {"seed", "default", &seed(:default, &1, &2, config)},
      {"seed", "socket", &seed(:socket, &1, &2, config)},
      {"seed", "drained", &seed(:drained, &1, &2, config)},
      {"subscription", "ack", &subscription(:ack, :as_subscribed, &1, &2)},
      {"subscription", "ack_on_heap", &subscription(:ack, :on_heap, &1, &2)},
      {"subscription", "wake", &subscription(:wake, :as_subscribed, &1, &2)},
      {"subscription", "wake_on_heap", &subscription(:wake, :on_heap, &1, &2)},
      {"store", "create_exists", &store_creates/2},
      {"connection", "deliveries", &connection/2},
      {"subscribe", "ringbus", &subscribes_ringbus(&1, &2, :few)},
      {"subscribe", "bare_start", &subscribes_bare(&1, &2, :few)},
      {"subscribe_crowd", "ringbus", &subscribes_ringbus(&1, &2, :crowd)},
      {"subscribe_crowd", "bare_start", &subscribes_bare(&1, &2, :crowd)},
      {"subscribe_crowd", "spawn", &subscribes_spawn/2},
      {"subscribe_crowd", "dynamic_supervisor", &subscribes_supervised/2}
    ]
  end

  ## Series and rows

  # A series runs in rounds. The first round goes up the sizes once, skipping
  # what is too slow; each later round runs again every size that finished in
  # under @repeat_below_ms, going down the sizes and up again by turns, so that
  # no size always runs on a VM just grown by the size before it. A row is the
  # median of its runs.
  defp run_series({kase, variant, fun} = series, config) do
    progress(series, 1, config)

    {first, _stop} =
      Enum.map_reduce(config.sizes, nil, fn n, stop ->
        result =
          cond do
            stop != nil ->
              {:skipped, stop}

            kase == "seed" and variant == "default" and not config.full and n > config.naive_max ->
              {:skipped, "would take minutes (quadratic); run with --full"}

            true ->
              run_once(fun, n, config)
          end

        case result do
          {:over_budget, _, _} -> {{n, result}, "a smaller size was over budget"}
          _ -> {{n, result}, stop}
        end
      end)

    repeatable = for {n, {:ok, [t]}} <- first, ms(t) < @repeat_below_ms, do: n

    runs =
      Enum.reduce(2..config.repeat//1, Map.new(first), fn round, runs ->
        order = if rem(round, 2) == 0, do: Enum.reverse(repeatable), else: repeatable
        progress(series, round, config)
        Enum.reduce(order, runs, &again(series, &1, config, &2))
      end)

    {rows, _prev} =
      Enum.map_reduce(config.sizes, nil, fn n, prev ->
        row = %{case: kase, variant: variant, n: n, result: median(runs[n])}
        row = Map.put(row, :ratio, ratio(row, prev))
        IO.puts(format_row(row))
        {row, if(match?({:ok, _, _}, row.result), do: row)}
      end)

    IO.puts(format_fit(rows))
    rows
  end

  defp progress({kase, variant, _fun}, round, config),
    do: IO.puts(:stderr, "#{kase}/#{variant}: round #{round} of #{config.repeat}")

  # A later round's run of one size; a run over budget now is left out.
  defp again({_kase, _variant, fun}, n, config, runs) do
    case run_once(fun, n, config) do
      {:ok, [t]} -> Map.update!(runs, n, fn {:ok, ts} -> {:ok, ts ++ [t]} end)
      _ -> runs
    end
  end

  defp run_once(fun, n, config) do
    :erlang.garbage_collect()

    case fun.(n, config.max_ms) do
      {:ok, t} -> {:ok, [t]}
      other -> other
    end
  end

  defp median({:ok, times}),
    do: {:ok, times |> Enum.sort() |> Enum.at(div(length(times), 2)), times}

  defp median(other), do: other

  # The whole series in one figure, robust to one noisy size, and the range
  # of its single doublings.
  defp format_fit(rows) do
    points = for %{result: {:ok, t, _}, n: n} <- rows, do: {n, ms(t)}
    ratios = for %{ratio: r} when is_float(r) <- rows, do: r

    case {Stats.growth_per_doubling(points), ratios} do
      {nil, _} ->
        ""

      {_fit, []} ->
        ""

      {fit, ratios} ->
        "#{String.duplicate(" ", 16)}fit over #{length(points)} sizes: " <>
          "#{format_ratio(fit)} per doubling (single doublings " <>
          "#{format_ratio(Enum.min(ratios))}–#{format_ratio(Enum.max(ratios))})"
    end
  end

  # Growth per doubling: time(n)/time(prev), scaled when sizes do not double.
  defp ratio(%{result: {:ok, t, _}, n: n}, %{result: {:ok, t0, _}, n: n0})
       when t0 > 0 and n > n0 do
    :math.pow(t / t0, 1 / :math.log2(n / n0))
  end

  defp ratio(_row, _prev), do: nil

  defp ms(native), do: System.convert_time_unit(native, :native, :microsecond) / 1000

  defp header do
    :io_lib.format("~-15s ~-18s ~8s ~4s ~11s ~9s  ~s", [
      "case",
      "variant",
      "n",
      "runs",
      "ms",
      "ratio/2x",
      "note"
    ])
    |> IO.iodata_to_binary()
  end

  defp format_row(row) do
    {ms, note} =
      case row.result do
        {:ok, t, [_]} -> {:erlang.float_to_binary(ms(t), decimals: 1), ""}
        {:ok, t, runs} -> {:erlang.float_to_binary(ms(t), decimals: 1), "runs " <> runs_ms(runs)}
        {:over_budget, done, t} -> {"-", "over budget: #{done} of #{row.n} in #{round(ms(t))} ms"}
        {:skipped, why} -> {"-", "skipped: " <> why}
      end

    :io_lib.format("~-15s ~-18s ~8B ~4B ~11s ~9s  ~s", [
      row.case,
      row.variant,
      row.n,
      runs(row.result),
      ms,
      format_ratio(row.ratio),
      note
    ])
    |> IO.iodata_to_binary()
  end

  # How many runs a cell's figure is the median of.
  defp runs({:ok, _t, runs}), do: length(runs)
  defp runs({:over_budget, _done, _t}), do: 1
  defp runs({:skipped, _why}), do: 0

  defp runs_ms(runs), do: Enum.map_join(runs, " ", &:erlang.float_to_binary(ms(&1), decimals: 1))

  defp format_ratio(nil), do: "-"
  defp format_ratio(r), do: :erlang.float_to_binary(r, decimals: 2)

  defp write_csv(path, rows) do
    lines =
      for row <- rows do
        ms =
          case row.result do
            {:ok, t, _runs} -> :erlang.float_to_binary(ms(t), decimals: 3)
            {:over_budget, _, _} -> "over_budget"
            {:skipped, _} -> "skipped"
          end

        ratio = if row.ratio, do: :erlang.float_to_binary(row.ratio, decimals: 3), else: "-"
        runs = Integer.to_string(runs(row.result))

        [
          row.case,
          ?,,
          row.variant,
          ?,,
          Integer.to_string(row.n),
          ?,,
          runs,
          ?,,
          ms,
          ?,,
          ratio,
          ?\n
        ]
      end

    File.write!(path, ["case,variant,n,runs,ms,ratio_per_doubling\n" | lines])
    IO.puts("wrote #{path}")
  end

  ## seed: a UDP send per message

  defp seed(variant, n, budget, config) do
    {:ok, sink} =
      :gen_udp.open(0, [:binary, ip: {127, 0, 0, 1}, active: false, recbuf: 8_388_608])

    {:ok, port} = :inet.port(sink)
    parent = self()

    {pid, ref} =
      spawn_monitor(fn ->
        send(parent, {:seed_done, self(), seed_worker(variant, n, port, budget, config)})
      end)

    receive do
      {:seed_done, ^pid, result} ->
        Process.demonitor(ref, [:flush])
        :gen_udp.close(sink)
        result

      {:DOWN, ^ref, :process, ^pid, reason} ->
        :gen_udp.close(sink)
        raise "seed worker died: #{inspect(reason)}"
    end
  end

  defp seed_worker(variant, n, port, budget, config) do
    open_opts = if variant == :socket, do: [{:inet_backend, :socket}, :binary], else: [:binary]
    {:ok, socket} = :gen_udp.open(0, open_opts)
    for i <- 1..n, do: send(self(), {:log, i})

    started = System.monotonic_time()
    deadline = started + System.convert_time_unit(budget, :millisecond, :native)
    target = {{127, 0, 0, 1}, port}

    result =
      case variant do
        :drained ->
          drained_loop(Mailbox.new(max_len: config.max_len), socket, target, n, 0, deadline)

        _ ->
          plain_loop(socket, target, n, 0, deadline)
      end

    elapsed = System.monotonic_time() - started
    :gen_udp.close(socket)

    case result do
      :done -> {:ok, elapsed}
      {:over_budget, handled} -> {:over_budget, handled, elapsed}
    end
  end

  # The budget is checked every 1024 messages, so a row stops near it.
  defp plain_loop(_socket, _target, n, n, _deadline), do: :done

  defp plain_loop(socket, {ip, port} = target, n, done, deadline) do
    if Bitwise.band(done, 1023) == 0 and System.monotonic_time() > deadline do
      {:over_budget, done}
    else
      receive do
        {:log, _i} -> _ = :gen_udp.send(socket, ip, port, "message")
      end

      plain_loop(socket, target, n, done + 1, deadline)
    end
  end

  defp drained_loop(_mailbox, _socket, _target, n, n, _deadline), do: :done

  defp drained_loop(mailbox, socket, {ip, port} = target, n, done, deadline) do
    if Bitwise.band(done, 1023) == 0 and System.monotonic_time() > deadline do
      {:over_budget, done}
    else
      {:ok, {:log, _i}, mailbox} = Mailbox.next(mailbox, :infinity)
      mailbox = Mailbox.drain(mailbox)
      _ = :gen_udp.send(socket, ip, port, "message")
      drained_loop(mailbox, socket, target, n, done + 1, deadline)
    end
  end

  ## subscription: a suspended subscription gets N messages

  defp subscription(kind, start, n, budget) do
    name = {__MODULE__, make_ref()}
    in_flight = 1_000
    :ok = Ringbus.create(name, capacity: n + in_flight + 1)
    sink = spawn(fn -> discard() end)

    if kind == :ack, do: fill(name, n + in_flight)
    {:ok, channel} = Ringbus.Store.fetch(name)
    from = if kind == :ack, do: :earliest, else: :latest
    opts = Subscription.validate_options!(from: from, max_credit: in_flight, max_batch: 256)

    pid = start_subscription(start, channel, sink, opts)

    # The first `in_flight` messages are delivered; then it waits for credit.
    before = :sys.get_state(pid)
    :ok = :sys.suspend(pid)
    message = if kind == :ack, do: {:ringbus_ack, elem(before.handle, 1), 1}, else: :ringbus_wake
    for _ <- 1..n, do: send(pid, message)

    started = System.monotonic_time()

    result =
      try do
        :ok = :sys.resume(pid, budget)
        state = :sys.get_state(pid, budget)
        elapsed = System.monotonic_time() - started
        if kind == :ack, do: ^n = state.cursor - before.cursor
        {:ok, elapsed}
      catch
        :exit, {:timeout, _} ->
          elapsed = System.monotonic_time() - started
          {:message_queue_len, left} = Process.info(pid, :message_queue_len)
          {:over_budget, max(n - left, 0), elapsed}
      end

    Process.exit(pid, :kill)
    Process.exit(sink, :kill)
    Ringbus.delete(name)
    result
  end

  defp start_subscription(:as_subscribed, channel, sink, opts) do
    {:ok, {pid, _ref}} = Subscription.start(channel, sink, opts)
    pid
  end

  defp start_subscription(:on_heap, channel, sink, opts) do
    {:ok, pid} =
      GenServer.start(Subscription, {channel, sink, make_ref(), opts},
        spawn_opt: [message_queue_data: :on_heap]
      )

    pid
  end

  defp fill(name, count) do
    payload = :binary.copy("x", 16)

    Enum.each(Stream.chunk_every(1..count, 1_000), fn chunk ->
      {:ok, _} = Ringbus.push_many(name, Enum.map(chunk, fn _ -> payload end))
    end)
  end

  defp discard do
    receive do
      _ -> discard()
    end
  end

  ## store: N queued calls

  defp store_creates(n, budget) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: 16)
    opts = Ringbus.Channel.validate_options!(capacity: 16)
    store = Process.whereis(Ringbus.Store)
    sink = spawn(fn -> count_replies(0) end)

    :ok = :sys.suspend(store)
    # A GenServer.call as it reaches the server: `{:"$gen_call", from, request}`,
    # with replies going to the counting sink rather than N waiting processes.
    for _ <- 1..n, do: send(store, {:"$gen_call", {sink, make_ref()}, {:create, name, opts}})

    started = System.monotonic_time()

    result =
      try do
        :ok = :sys.resume(store, budget)
        _ = :sys.get_state(store, budget)
        {:ok, System.monotonic_time() - started}
      catch
        :exit, {:timeout, _} ->
          elapsed = System.monotonic_time() - started
          {:message_queue_len, left} = Process.info(store, :message_queue_len)
          # Let the store finish before anything else calls it; bounded as well.
          _ = :sys.get_state(store, 10 * budget)
          {:over_budget, n - left, elapsed}
      end

    send(sink, {:count, self()})

    receive do
      {:replies, count} when count == n -> :ok
      {:replies, count} -> raise "expected #{n} replies from the store, got #{count}"
    end

    Ringbus.delete(name)
    result
  end

  defp count_replies(count) do
    receive do
      {:count, to} -> send(to, {:replies, count})
      {_tag, {:error, :exists}} -> count_replies(count + 1)
    end
  end

  ## connection: N deliveries queued in a server connection

  # A real server and a raw TCP subscriber with credit for all N messages, one
  # message a delivery. The connection is suspended while N messages are
  # pushed, so N deliveries queue in its mailbox; the time runs from its
  # resumption until the subscriber has read all N off the socket.
  defp connection(n, budget) do
    {:ok, server} = Ringbus.Server.start_link(port: 0, max_credit: n, idle_timeout: :infinity)
    Process.unlink(server)
    name = "backlog-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, capacity: n)
    port = Ringbus.Server.port(server)
    parent = self()

    reader =
      spawn(fn ->
        {:ok, socket} =
          :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false, recbuf: 1 <<< 20])

        hello = [{:hello, 0, 3, 0, nil}, {:subscribe, 1, name, :latest, n, 1}]
        :ok = :gen_tcp.send(socket, Enum.map(hello, &Ringbus.Wire.Frame.encode/1))
        {frames, decoder} = recv_frames(socket, Decoder.new(1 <<< 30), 2, [])
        [{:hello_ok, _, _, _}, {:subscribed, 1, _}] = frames
        send(parent, :subscribed)
        count_deliveries(socket, decoder, n, 0)
        send(parent, :delivered)
      end)

    receive do
      :subscribed -> :ok
    after
      10_000 -> raise "the backlog subscriber did not subscribe"
    end

    [conn] = Ringbus.Server.connections(server)
    :ok = :sys.suspend(conn)
    fill(name, n)
    await_queued(conn, n, 10_000)

    started = System.monotonic_time()
    :ok = :sys.resume(conn)

    result =
      receive do
        :delivered -> {:ok, System.monotonic_time() - started}
      after
        budget -> {:over_budget, 0, System.monotonic_time() - started}
      end

    Process.exit(reader, :kill)
    Supervisor.stop(server)
    Ringbus.delete(name)
    result
  end

  defp recv_frames(_socket, decoder, want, acc) when length(acc) >= want, do: {acc, decoder}

  defp recv_frames(socket, decoder, want, acc) do
    {:ok, data} = :gen_tcp.recv(socket, 0, 10_000)
    {:ok, frames, decoder} = Decoder.feed(decoder, data)
    recv_frames(socket, decoder, want, acc ++ frames)
  end

  defp count_deliveries(_socket, _decoder, n, seen) when seen >= n, do: :ok

  defp count_deliveries(socket, decoder, n, seen) do
    {:ok, data} = :gen_tcp.recv(socket, 0, 60_000)
    {:ok, frames, decoder} = Decoder.feed(decoder, data)
    seen = Enum.reduce(frames, seen, fn {:deliver, _, _, count, _}, seen -> seen + count end)
    count_deliveries(socket, decoder, n, seen)
  end

  ## subscribe: a burst of N subscribes

  # `subscribe` spreads the burst over a fixed number of callers, so that only
  # the number of subscribes and of live subscriptions grows with N; as many
  # as the crowd has at 10k. `subscribe_crowd` has one caller per 8
  # subscribes, so that 160k subscriptions and their callers fit the default
  # process limit (262,144).
  @callers 1_250
  @crowd_share 8

  defp callers(:few, n), do: min(n, @callers)
  defp callers(:crowd, n), do: max(div(n, @crowd_share), 1)

  defp subscribes_ringbus(n, budget, shape) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: 16)

    # Deleting the channel ends its subscriptions.
    burst(n, budget,
      callers: callers(shape, n),
      start: fn -> {:ok, _sub} = Ringbus.subscribe(name) end,
      stop: fn -> Ringbus.delete(name) end
    )
  end

  # The started processes stop when their callers do.
  defp subscribes_bare(n, budget, shape) do
    burst(n, budget,
      callers: callers(shape, n),
      start: fn -> {:ok, _} = GenServer.start(IdleServer, self()) end
    )
  end

  # No reply awaited: the least a process start can cost.
  defp subscribes_spawn(n, budget) do
    burst(n, budget,
      callers: callers(:crowd, n),
      start: fn -> IdleServer.spawn_watching(self()) end
    )
  end

  defp subscribes_supervised(n, budget) do
    callers = callers(:crowd, n)
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: 16)
    {:ok, channel} = Ringbus.Store.fetch(name)
    opts = Subscription.validate_options!([])
    {:ok, sup} = DynamicSupervisor.start_link(strategy: :one_for_one)
    Process.unlink(sup)
    :ok = :sys.suspend(sup)

    start = fn ->
      args = {channel, self(), make_ref(), opts}
      spec = %{id: Subscription, start: {GenServer, :start_link, [Subscription, args]}}
      {:ok, _pid} = DynamicSupervisor.start_child(sup, spec)
    end

    # The callers queue their first start_child each while the supervisor is
    # suspended; the time runs from its resumption. Stopping it brutally ends
    # every subscription it started.
    burst(n, budget,
      callers: callers,
      start: start,
      queue: fn -> await_queued(sup, callers, 10_000) end,
      release: fn -> :ok = :sys.resume(sup) end,
      stop: fn ->
        Process.exit(sup, :kill)
        Ringbus.delete(name)
      end
    )
  end

  # `:callers` processes sharing N calls of `:start` evenly, each making its
  # share once told to go, then reporting how many it made. Untimed: spawning
  # them, and, with `:queue`, telling them to go and waiting for `:queue` to
  # return. Timed: `:release` (telling them to go when there is no `:queue`)
  # until the last report. Then `:stop`, the callers are killed, and the VM
  # settles.
  defp burst(n, budget, opts) do
    baseline = :erlang.system_info(:process_count)
    start = Keyword.fetch!(opts, :start)
    callers = Keyword.fetch!(opts, :callers)
    parent = self()

    clients =
      for share <- Stats.shares(n, callers) do
        spawn(fn ->
          receive do
            :go -> :ok
          end

          for _ <- 1..share, do: start.()
          send(parent, {:subscribed, share})

          receive do
            :stop -> :ok
          end
        end)
      end

    go = fn -> Enum.each(clients, &send(&1, :go)) end

    release =
      case Keyword.fetch(opts, :queue) do
        {:ok, queue} ->
          go.()
          queue.()
          Keyword.fetch!(opts, :release)

        :error ->
          go
      end

    started = System.monotonic_time()
    deadline = started + System.convert_time_unit(budget, :millisecond, :native)
    release.()
    subscribed = await_subscribed(n, 0, deadline)
    elapsed = System.monotonic_time() - started

    Keyword.get(opts, :stop, fn -> :ok end).()
    Enum.each(clients, &Process.exit(&1, :kill))
    flush_subscribed()
    settle(baseline)

    if subscribed == n, do: {:ok, elapsed}, else: {:over_budget, subscribed, elapsed}
  end

  # Waits (up to 60 s, polling every 10 ms) until the processes a run started
  # have all exited, so that the next run does not share the cores with their
  # exits.
  defp settle(baseline, tries \\ 6_000) do
    if tries > 0 and :erlang.system_info(:process_count) > baseline + 16 do
      Process.sleep(10)
      settle(baseline, tries - 1)
    end
  end

  # Polls a bounded number of times, one millisecond apart.
  defp await_queued(_pid, _n, 0), do: raise("the messages did not all queue")

  defp await_queued(pid, n, tries) do
    case Process.info(pid, :message_queue_len) do
      {:message_queue_len, len} when len >= n ->
        :ok

      _ ->
        Process.sleep(1)
        await_queued(pid, n, tries - 1)
    end
  end

  defp await_subscribed(n, done, _deadline) when done >= n, do: done

  defp await_subscribed(n, done, deadline) do
    left = System.convert_time_unit(deadline - System.monotonic_time(), :native, :millisecond)

    receive do
      {:subscribed, count} -> await_subscribed(n, done + count, deadline)
    after
      max(left, 0) -> done
    end
  end

  defp flush_subscribed do
    receive do
      {:subscribed, _} -> flush_subscribed()
    after
      0 -> :ok
    end
  end

  ## Options

  defp parse_only(nil), do: :all
  defp parse_only(string), do: String.split(string, ",", trim: true)

  defp selected?(:all, _kase, _variant), do: true
  defp selected?(only, kase, variant), do: kase in only or "#{kase}/#{variant}" in only
end
