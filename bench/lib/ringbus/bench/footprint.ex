defmodule Ringbus.Bench.Footprint do
  @moduledoc """
  The footprint bench: a replicated channel's memory and disk under a long
  run of pushes, against the bounds README states ("Memory and disk of a
  durable channel").

      mix ringbus.bench footprint
      mix ringbus.bench footprint --messages 12000000 --wal-max-bytes 64000000
      mix ringbus.bench footprint --nodes 1 --messages 500000 --every 100000   # a quick look

  ## What it does

  For each count of `--nodes`, it starts that many fresh `:peer` nodes
  (`Ringbus.Test.Nodes`) with the application env `:raft` given by
  `--wal-max-bytes` and the other defaults, makes a channel of
  `--capacity` with `replicas:` that count, and pushes `--messages`
  payloads of `--size` bytes, `push_many/2` of `--batch` from one process
  on the first node, stopping early after `--seconds`. Every `--every`
  pushes it prints, for each node: Ra's ETS tables (`ets`), the WAL files
  (`wal`), the channel's segments and snapshots (`segments`, `snapshots`),
  and the BEAM's total memory (`beam`), each as `Ringbus.Replica.Footprint`
  measures it, and checks them against the bounds (`bounds/2`). A sample
  that breaks one is printed with `BROKEN`, and the task exits nonzero.

  ## Command line options

    * `--nodes` - comma-separated node counts, one run each. Defaults to `1,3`.
    * `--messages` - pushes per run. Defaults to `4000000`.
    * `--every` - pushes between two samples. Defaults to `250000`.
    * `--capacity` - the channel's capacity. Defaults to `100000`.
    * `--size` - payload bytes. Defaults to `16`.
    * `--batch` - messages per `push_many/2`. Defaults to `1000`.
    * `--wal-max-bytes` - the nodes' `:raft` `:wal_max_bytes`. Defaults to
      the application's default (`Ringbus.Replica.Config.raft/0`).
    * `--seconds` - the most a run pushes for. Defaults to `600`.
    * `-q`, `--quiet` - only the summary and broken samples.
  """

  alias Ringbus.Bench.Args
  alias Ringbus.Replica.{Config, Footprint}
  alias Ringbus.Test.Nodes

  @switches [
    nodes: :string,
    messages: :integer,
    every: :integer,
    capacity: :integer,
    size: :integer,
    batch: :integer,
    wal_max_bytes: :integer,
    seconds: :integer,
    quiet: :boolean
  ]

  @columns ~w(pushed node ets wal segments snapshots beam)a

  # Ra keeps the entries of the open WAL file and of the closed ones the
  # segment writer has not flushed yet; it flushes one before the next
  # fills, so at most two files' worth.
  @wal_files 2
  # What Ra's ETS tables hold per byte of WAL: an entry's copy in ETS
  # (small binaries inline, list cells, tuples) against its external
  # format. The bench's samples show it; README gives the figures.
  @ets_per_wal_byte 3
  # Segments: the log from the oldest checkpoint holding a live message (up
  # to a quarter of the capacity before the ring's oldest, `machine.ex`),
  # and what a flush wrote before the first snapshot or left in a segment
  # file a snapshot has not passed whole: at most one WAL file's entries
  # each.
  @contents_multiple 3
  # Fixed amounts per node: Ra's indexes and directory, a segment's index
  # and a snapshot; and, for the BEAM, what a Ringbus node with no channel
  # uses.
  @fixed_bytes 1_000_000
  @beam_fixed_bytes 64_000_000

  @doc "Runs the bench with command line arguments; returns the samples and the broken ones."
  @spec run([String.t()]) :: %{samples: [map()], broken: [map()]}
  def run(args) do
    opts = Args.parse!(args, @switches, q: :quiet)
    config = config!(opts)

    IO.puts(
      "Ringbus footprint: capacity #{config.capacity}, #{config.size} B payloads, " <>
        "batches of #{config.batch}, wal_max_bytes #{config.wal_max_bytes}, " <>
        "up to #{config.messages} pushes or #{config.seconds} s per run"
    )

    samples = Enum.flat_map(config.nodes, &measure(&1, config))
    broken = Enum.filter(samples, & &1.broken)
    IO.puts(summary(samples))

    if broken != [] do
      IO.puts("#{length(broken)} samples broke a bound")
      exit({:shutdown, 1})
    end

    %{samples: samples, broken: broken}
  end

  @doc """
  The bounds a node's sample is checked against, in bytes: `config` has
  `:wal_max_bytes`, `:capacity` and `:size`; `replicated` the channels'
  payload bytes a node holds when full.
  """
  @spec bounds(map()) :: %{atom() => pos_integer()}
  def bounds(config) do
    wal = config.wal_max_bytes
    # Each pushed message costs its payload and its framing in the log.
    contents = config.capacity * (config.size + 16)

    %{
      ets: @wal_files * @ets_per_wal_byte * wal + @fixed_bytes,
      wal: @wal_files * wal + @fixed_bytes,
      log: @contents_multiple * contents + @wal_files * wal + @fixed_bytes,
      # Ra's ETS tables, the ring (its payloads and rows) and the node.
      beam: @beam_fixed_bytes + @wal_files * @ets_per_wal_byte * wal + 4 * contents
    }
  end

  @doc """
  Runs one measurement on `count` fresh nodes; returns the samples, each
  with `:broken` true when it broke a bound. Used by the tests as well.
  """
  @spec measure(pos_integer(), map()) :: [map()]
  def measure(count, config) do
    env = [raft: [wal_max_bytes: config.wal_max_bytes]]
    nodes = Nodes.start(count, "bench_footprint", net_ticktime: 10, env: env)

    try do
      :ok = Nodes.join(nodes, 30_000)
      [first | _] = nodes
      name = "footprint"
      opts = [replicas: count, capacity: config.capacity]
      :ok = Nodes.call(first, Ringbus, :create, [name, opts], 60_000)
      deadline = System.monotonic_time(:millisecond) + config.seconds * 1000
      bounds = bounds(config)
      unless config.quiet, do: IO.puts(Enum.join(@columns, "\t"))
      loop(nodes, name, {0, 0}, deadline, bounds, config, [])
    after
      Nodes.stop(nodes)
    end
  end

  # `pushed` counts the pushes and `us` the microseconds they took.
  defp loop(nodes, name, {pushed, us}, deadline, bounds, config, acc) do
    if pushed >= config.messages or System.monotonic_time(:millisecond) > deadline do
      Enum.reverse(acc)
    else
      n = min(config.every, config.messages - pushed)
      args = [name, n, config.size, config.batch, deadline]
      {took, done} = :timer.tc(Nodes, :call, [hd(nodes), __MODULE__, :push, args, :infinity])
      pushed = pushed + done
      us = us + took
      extra = %{pushed: pushed, push_us: us, node: nil, nodes: length(nodes)}

      samples =
        for {node, i} <- Enum.with_index(nodes, 1) do
          figures = Nodes.call(node, __MODULE__, :sample, [name])
          sample = Map.merge(figures, %{extra | node: i})
          sample = Map.put(sample, :broken, broken?(sample, bounds))
          if not config.quiet or sample.broken, do: IO.puts(row(sample))
          sample
        end

      loop(nodes, name, {pushed, us}, deadline, bounds, config, Enum.reverse(samples, acc))
    end
  end

  @doc false
  # Runs on the node: `n` pushes of `size` bytes, `batch` at a time, until
  # `deadline` (the caller's monotonic ms, near enough on one machine);
  # returns how many were pushed.
  def push(name, n, size, batch, deadline) do
    payloads = List.duplicate(:binary.copy("x", size), batch)
    push(name, n, payloads, batch, deadline, 0)
  end

  defp push(name, n, payloads, batch, deadline, done) do
    if done >= n or System.monotonic_time(:millisecond) > deadline do
      done
    else
      k = min(batch, n - done)
      list = if k == batch, do: payloads, else: Enum.take(payloads, k)
      {:ok, _} = Ringbus.push_many(name, list)
      push(name, n, payloads, batch, deadline, done + k)
    end
  end

  @doc false
  # Runs on the node: its figures for the channel `name`.
  def sample(name) do
    system = Footprint.system()
    {:ok, %{replica: %{server: {local, _}}}} = Ringbus.Store.fetch(name)
    node = Footprint.node(system)
    member = Footprint.member(local, system)

    %{
      ets: node.ets_bytes,
      wal: node.wal_bytes,
      segments: member.segment_bytes,
      snapshots: member.snapshot_bytes,
      beam: :erlang.memory(:total)
    }
  end

  defp broken?(s, b),
    do: s.ets > b.ets or s.wal > b.wal or s.segments + s.snapshots > b.log or s.beam > b.beam

  defp row(sample) do
    line = Enum.map_join(@columns, "\t", &cell(Map.fetch!(sample, &1)))
    if sample.broken, do: line <> "\tBROKEN", else: line
  end

  defp cell(n) when is_integer(n) and n >= 1_000_000, do: "#{Float.round(n / 1_000_000, 1)}M"
  defp cell(n), do: to_string(n)

  defp summary(samples) do
    for {count, group} <- Enum.group_by(samples, & &1.nodes), into: "" do
      max = fn key -> group |> Enum.map(&Map.fetch!(&1, key)) |> Enum.max() end
      rate = div(max.(:pushed) * 1_000_000, max(max.(:push_us), 1))

      "#{count} node(s), #{max.(:pushed)} pushes at #{rate} msg/s: max ets #{cell(max.(:ets))}, " <>
        "wal #{cell(max.(:wal))}, segments #{cell(max.(:segments))}, " <>
        "snapshots #{cell(max.(:snapshots))}, beam #{cell(max.(:beam))}\n"
    end
  end

  defp config!(opts) do
    nodes =
      for part <- String.split(Keyword.get(opts, :nodes, "1,3"), ",", trim: true) do
        case Integer.parse(part) do
          {n, ""} when n > 0 -> n
          _ -> Mix.raise("expected --nodes to be positive integers, got: #{inspect(part)}")
        end
      end

    %{
      nodes: nodes,
      messages: Args.positive!(opts, :messages, 4_000_000),
      every: Args.positive!(opts, :every, 250_000),
      capacity: Args.positive!(opts, :capacity, 100_000),
      size: Args.positive!(opts, :size, 16),
      batch: Args.positive!(opts, :batch, 1000),
      wal_max_bytes: Args.positive!(opts, :wal_max_bytes, Config.raft()[:wal_max_bytes]),
      seconds: Args.positive!(opts, :seconds, 600),
      quiet: Keyword.get(opts, :quiet, false)
    }
  end
end
