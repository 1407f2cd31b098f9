defmodule Ringbus.Bench.Seek do
  @moduledoc """
  The cost of a read that starts at a time, against one that starts at a
  seq and against the naive way, as the ring grows. Run it with
  `mix ringbus.bench seek`.

  `Ringbus.read(name, {:time, t}, max)` finds the first message at or after
  `t` by binary search over the seqs the ring holds (`Ringbus.Channel.Times`),
  probing each message's time without copying its payload, so its cost
  grows with the log of the ring's length. A reader without it pages
  through the ring from its oldest message, with times, until it meets
  one at or after `t`: a cost that grows with the length.

  ## What runs

  For each size N, a memory channel of capacity N is filled with N 16-byte
  messages, pushed one at a time with a millisecond's pause after every
  N/500 of them, so that the ring holds at least 500 distinct times. Then, for random targets (a time
  between the oldest and the newest message's, or a seq the ring holds),
  each way reads 10 messages:

    * `seq` - `Ringbus.read(name, seq, 10)`
    * `time` - `Ringbus.read(name, {:time, t}, 10)`
    * `scan` - `Ringbus.read(name, from, 1000, times: true)` from the oldest
      seq on, page after page, until a message at or after `t`; then the 10
      messages from it

  Before timing, every target time is read both ways (`time` and `scan`),
  and the bench raises unless both start at the same seq, whose time is at
  or after the target and whose predecessor's is before it.

  A measurement is the median of 7 rounds (after one untimed), in µs per read; `/seq` divides
  a row by the `seq` row of its size, and `/n0` by the same way at the
  smallest size.

  ## Command line options

    * `--sizes N,N,...` - the ring sizes, ascending. Defaults to
      `1000,100000,1000000`.
    * `--reads R` - reads per round for `seq` and `time`. Defaults to
      2,000; `scan` makes `max(3, div(R * 1000, N))`, for its cost.
    * `--out FILE` - also writes CSV: `way,n,reads,us_per_read,per_seq,per_n0`.
  """

  alias Ringbus.Bench.{Args, CSV, Table}

  @default_sizes [1_000, 100_000, 1_000_000]
  @default_reads 2_000
  @rounds 7
  @pauses 500
  @page 1_000
  @max 10
  @switches [sizes: :string, reads: :integer, out: :string]

  @columns [
    {"way", 5, :left},
    {"n", 9, :right},
    {"reads", 7, :right},
    {"µs/read", 10, :right},
    {"/seq", 9, :right},
    {"/n0", 8, :right}
  ]

  @doc """
  Runs the bench with command line `args` (see the module doc) and prints
  the figures. Raises `OptionParser.ParseError` on an unknown option and
  `Mix.Error` on a bad value.
  """
  @spec run([String.t()]) :: :ok
  def run(args) do
    opts = Args.parse!(args, @switches)
    sizes = Args.sizes!(opts[:sizes], @default_sizes)
    reads = Args.positive!(opts, :reads, @default_reads)

    IO.puts(
      "seek: sizes #{Enum.join(sizes, ",")}, #{@max} messages a read, median of #{@rounds} rounds"
    )

    IO.puts(Table.header(@columns))

    measured = Enum.flat_map(sizes, &measure_size(&1, reads))
    rows = ratios(measured, hd(sizes))
    Enum.each(rows, &IO.puts(Table.line(@columns, line(&1))))

    if out = opts[:out] do
      CSV.write!(out, ~w(way n reads us_per_read per_seq per_n0), Enum.map(rows, &csv/1))
      IO.puts("wrote #{out}")
    end

    :ok
  end

  # One ring per size, read all three ways.
  defp measure_size(n, reads) do
    name = fill(n)

    try do
      {first, next, oldest, newest} = bounds(name)
      :rand.seed(:exsss, {n, 7, 11})
      times = List.to_tuple(for _ <- 1..64, do: oldest + :rand.uniform(newest - oldest + 1) - 1)
      seqs = List.to_tuple(for _ <- 1..64, do: first + :rand.uniform(next - first) - 1)
      Enum.each(Tuple.to_list(times), &agree!(name, first, &1))
      scans = max(3, div(reads * 1_000, n))

      [
        {n, :seq, {reads, median_us(name, :seq, first, seqs, reads)}},
        {n, :time, {reads, median_us(name, :time, first, times, reads)}},
        {n, :scan, {scans, median_us(name, :scan, first, times, scans)}}
      ]
    after
      :ok = Ringbus.delete(name)
    end
  end

  # Single pushes, so that every size holds the same shape of rows (a
  # batch would be one chunk, read differently), with a pause every
  # `n / @pauses` of them.
  defp fill(n) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: n)
    payload = :binary.copy("x", 16)
    every = max(1, div(n, @pauses))

    for i <- 1..n do
      {:ok, _} = Ringbus.push(name, payload)
      if rem(i, every) == 0, do: Process.sleep(1)
    end

    ^n = Ringbus.len(name)
    name
  end

  defp bounds(name) do
    {:ok, info} = Ringbus.info(name)
    {info.first_seq, info.next_seq, info.oldest_time, info.newest_time}
  end

  # The binary search and the naive scan name the same first message, and
  # it is the first at or after `t`.
  defp agree!(name, first, t) do
    {:ok, [{seq, _, at} | _], _} = Ringbus.read(name, {:time, t}, 1, times: true)
    ^seq = scan_seq(name, first, t)
    true = at >= t

    if seq > first do
      {:ok, [{_, _, before}], _} = Ringbus.read(name, seq - 1, 1, times: true)
      true = before < t
    end

    :ok
  end

  defp scan_seq(name, from, t) do
    {:ok, page, _lost} = Ringbus.read(name, from, @page, times: true)

    case Enum.find(page, fn {_seq, _payload, at} -> at >= t end) do
      {seq, _, _} -> seq
      nil when page == [] -> from
      nil -> scan_seq(name, elem(List.last(page), 0) + 1, t)
    end
  end

  # An untimed round first, so that the first row is not the one that
  # loads code and warms the caches.
  defp median_us(name, way, first, targets, count) do
    _ = reads(name, way, first, targets, count, 0)

    rounds =
      for _ <- 1..@rounds do
        started = System.monotonic_time()
        _ = reads(name, way, first, targets, count, 0)

        System.convert_time_unit(System.monotonic_time() - started, :native, :nanosecond) / count /
          1_000
      end

    rounds |> Enum.sort() |> Enum.at(div(@rounds, 2))
  end

  # The messages read are counted so that no read can be left out.
  defp reads(_name, _way, _first, _targets, 0, acc), do: acc

  defp reads(name, way, first, targets, left, acc) do
    target = elem(targets, rem(left, tuple_size(targets)))
    reads(name, way, first, targets, left - 1, acc + read(name, way, first, target))
  end

  defp read(name, :seq, _first, seq), do: count(Ringbus.read(name, seq, @max))
  defp read(name, :time, _first, t), do: count(Ringbus.read(name, {:time, t}, @max))
  defp read(name, :scan, first, t), do: count(Ringbus.read(name, scan_seq(name, first, t), @max))

  defp count({:ok, messages, _lost}), do: length(messages)

  ## Output

  defp ratios(measured, n0) do
    us = Map.new(measured, fn {n, way, {_count, us}} -> {{n, way}, us} end)

    for {n, way, {count, per_read}} <- measured do
      %{
        way: way,
        n: n,
        reads: count,
        us: per_read,
        per_seq: per_read / us[{n, :seq}],
        per_n0: per_read / us[{n0, way}]
      }
    end
  end

  defp line(row),
    do: [row.way, row.n, row.reads, fmt(row.us, 2), fmt(row.per_seq, 2), fmt(row.per_n0, 2)]

  defp csv(row),
    do: [row.way, row.n, row.reads, fmt(row.us, 3), fmt(row.per_seq, 3), fmt(row.per_n0, 3)]

  defp fmt(x, decimals), do: :erlang.float_to_binary(x / 1, decimals: decimals)
end
