defmodule Ringbus.Bench.Len do
  @moduledoc """
  The cost of one length query as the structure grows, before and after the
  process that holds it hibernates. Run it with `mix ringbus.bench len`.

  `length/1` and `:queue.len/1` walk the list, so they cost one step per
  element, and after hibernation (which compacts the heap and interleaves the
  list's cells with its elements) each step may cost more. `Ringbus.len/1`
  reads counters, whatever the channel holds.

  ## What runs

    * `list` - a process holds a list of N small binaries and times
      `length/1` on it itself
    * `queue` - a process holds a `:queue` of N small binaries, built with
      `:queue.in/2`, and times `:queue.len/1`
    * `ringbus` - a channel is filled with N 16-byte messages (`push_many/2`
      in chunks of 1000) and a process times `Ringbus.len/1` on it

  Each process times its query, then hibernates (`:erlang.hibernate/3`; the
  bench checks that it did), is woken by the next request and times it again.
  A measurement is the median of 7 rounds of `reps` calls, in nanoseconds per
  call. The smallest size is measured again beside every row, its rounds
  alternating with the row's, and the `/n0` columns divide the row by it, so
  the ratio holds when the machine's speed drifts during the run.

  ## Command line options

    * `--sizes N,N,...` - the sizes, ascending. Defaults to `10,1000,100000,1000000`.
    * `--reps R` - calls per round at every size. By default a list or queue
      round makes `max(5, div(20_000_000, n))` calls and a `Ringbus.len/1`
      round 200_000.
    * `--out FILE` - also writes CSV: `impl,n,hibernated,ns_per_call`.
  """

  alias Ringbus.Bench.Args

  @default_sizes [10, 1_000, 100_000, 1_000_000]
  @rounds 7
  @ringbus_reps 200_000
  @switches [sizes: :string, reps: :integer, out: :string]

  @doc """
  Runs the bench with command line `args` (see the module doc) and prints the
  figures. Raises `OptionParser.ParseError` on an unknown option and
  `Mix.Error` on a bad value.
  """
  @spec run([String.t()]) :: :ok
  def run(args) do
    opts = Args.parse!(args, @switches)
    sizes = Args.sizes!(opts[:sizes], @default_sizes)

    reps =
      case Keyword.get(opts, :reps) do
        nil -> nil
        r when r > 0 -> r
        other -> Mix.raise("expected --reps to be a positive integer, got: #{inspect(other)}")
      end

    IO.puts("len: sizes #{Enum.join(sizes, ",")}, median of #{@rounds} rounds, ns per call")

    IO.puts(
      format_line([
        "impl",
        "n",
        "reps",
        "ns before",
        "ns after",
        "after/before",
        "before/n0",
        "after/n0"
      ])
    )

    base_n = hd(sizes)

    rows =
      for impl <- [:list, :queue, :ringbus], n <- sizes do
        :erlang.garbage_collect()
        base = {base_n, reps || default_reps(impl, base_n)}
        target = {n, reps || default_reps(impl, n)}
        row = Map.merge(%{impl: impl, n: n, reps: elem(target, 1)}, measure(impl, base, target))
        print_row(row)
        row
      end

    if out = opts[:out], do: write_csv(out, rows)
    :ok
  end

  defp default_reps(:ringbus, _n), do: @ringbus_reps
  defp default_reps(_impl, n), do: max(5, div(20_000_000, n))

  ## Measuring

  # The smallest size is measured again next to every size, round for round,
  # so that the ratio to it holds when the machine's speed drifts.
  defp measure(:ringbus, {base_n, base_reps}, {n, reps}) do
    base_name = fill_channel(base_n)
    name = fill_channel(n)
    result = with_holder(fn -> {{{:ringbus, base_name}, base_reps}, {{:ringbus, name}, reps}} end)
    :ok = Ringbus.delete(base_name)
    :ok = Ringbus.delete(name)
    result
  end

  defp measure(impl, {base_n, base_reps}, {n, reps}),
    do: with_holder(fn -> {{build(impl, base_n), base_reps}, {build(impl, n), reps}} end)

  defp fill_channel(n) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: n)
    payload = :binary.copy("x", 16)

    Enum.each(Stream.chunk_every(1..n, 1_000), fn chunk ->
      {:ok, _} = Ringbus.push_many(name, Enum.map(chunk, fn _ -> payload end))
    end)

    ^n = Ringbus.len(name)
    name
  end

  defp build(:list, n), do: {:list, Enum.map(1..n, &<<&1::32>>)}

  defp build(:queue, n),
    do: {:queue, Enum.reduce(1..n, :queue.new(), &:queue.in(<<&1::32>>, &2))}

  # Spawns the holding process, which builds its data itself, and asks it to
  # time the query before and after it hibernates.
  defp with_holder(build) do
    parent = self()
    {pid, ref} = spawn_monitor(fn -> holder_loop(build.(), parent) end)
    {base_before, before} = ask(pid, ref)
    send(pid, :hibernate)
    await_hibernation(pid, 5_000)
    {base_after, later} = ask(pid, ref)
    send(pid, :stop)

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> :ok
    end

    %{before: before, after: later, base_before: base_before, base_after: base_after}
  end

  defp ask(pid, ref) do
    send(pid, :measure)

    receive do
      {:measured, ^pid, ns} -> ns
      {:DOWN, ^ref, :process, ^pid, reason} -> raise "holder died: #{inspect(reason)}"
    end
  end

  # Polls a bounded number of times, one millisecond apart.
  defp await_hibernation(pid, 0), do: raise("holder #{inspect(pid)} did not hibernate")

  defp await_hibernation(pid, tries) do
    case Process.info(pid, :current_function) do
      {:current_function, {:erlang, :hibernate, 3}} ->
        :ok

      _ ->
        Process.sleep(1)
        await_hibernation(pid, tries - 1)
    end
  end

  @doc false
  def holder_loop(data, parent) do
    receive do
      :measure ->
        send(parent, {:measured, self(), median_ns(data)})
        holder_loop(data, parent)

      :hibernate ->
        :erlang.hibernate(__MODULE__, :holder_loop, [data, parent])

      :stop ->
        :ok
    end
  end

  # Rounds alternate between the base and the target; medians of each.
  defp median_ns({{base, base_reps}, {target, reps}}) do
    rounds = for _ <- 1..@rounds, do: {time_ns(base, base_reps), time_ns(target, reps)}
    {median(Enum.map(rounds, &elem(&1, 0))), median(Enum.map(rounds, &elem(&1, 1)))}
  end

  defp time_ns(data, reps) do
    started = System.monotonic_time()
    _ = query(data, reps, 0)
    System.convert_time_unit(System.monotonic_time() - started, :native, :nanosecond) / reps
  end

  defp median(values), do: values |> Enum.sort() |> Enum.at(div(length(values), 2))

  # The results are summed so the calls cannot be left out.
  defp query(_data, 0, acc), do: acc
  defp query({:list, list} = d, reps, acc), do: query(d, reps - 1, acc + length(list))
  defp query({:queue, q} = d, reps, acc), do: query(d, reps - 1, acc + :queue.len(q))
  defp query({:ringbus, name} = d, reps, acc), do: query(d, reps - 1, acc + Ringbus.len(name))

  ## Output

  defp print_row(row) do
    IO.puts(
      format_line([
        Atom.to_string(row.impl),
        Integer.to_string(row.n),
        Integer.to_string(row.reps),
        float(row.before, 1),
        float(row.after, 1),
        float(row.after / row.before, 2),
        float(row.before / row.base_before, 2),
        float(row.after / row.base_after, 2)
      ])
    )
  end

  defp format_line([impl | cols]) do
    [String.pad_trailing(impl, 8) | Enum.map(cols, &String.pad_leading(&1, 13))]
    |> Enum.join(" ")
  end

  defp float(x, decimals), do: :erlang.float_to_binary(x / 1, decimals: decimals)

  defp write_csv(path, rows) do
    lines =
      for row <- rows, {hibernated, ns} <- [{false, row.before}, {true, row.after}] do
        "#{row.impl},#{row.n},#{hibernated},#{float(ns, 1)}\n"
      end

    File.write!(path, ["impl,n,hibernated,ns_per_call\n" | lines])
    IO.puts("wrote #{path}")
  end
end
