defmodule Ringbus.Bench.Groups.Report do
  @moduledoc false
  # The groups bench's table, ratios and CSV (`Ringbus.Bench.Groups`).

  alias Ringbus.Bench.{CSV, Table}

  # The CSV's columns, and the table's: {CSV column, title, width, side}.
  @header ~w(system replicas durable mode clients_on payload producers consumers acked msgs_per_s
             p50_us p99_us max_us redelivered errors crash_first_ms crash_all_ms crash_missing
             failover_ms ratio_to ratio)
  # The targets' ratios: a row's rate over its baseline's, same size and consumers.
  @baselines %{"ringbus_r3" => "jetstream_r3", "ringbus_memory" => "redis_aof_always"}
  @table [
    {"system", "system", 17, :left},
    {"mode", "mode", 7, :right},
    {"payload", "payload", 8, :right},
    {"consumers", "cons", 5, :right},
    {"msgs_per_s", "acked/s", 10, :right},
    {"p50_us", "p50 µs", 9, :right},
    {"p99_us", "p99 µs", 9, :right},
    {"max_us", "max µs", 9, :right},
    {"redelivered", "redeliv", 8, :right},
    {"errors", "errors", 7, :right},
    {"crash_first_ms", "crash ms 1st", 13, :right},
    {"crash_all_ms", "crash ms all", 13, :right},
    {"failover_ms", "failover ms", 12, :right}
  ]

  @doc "The CSV's columns."
  @spec header() :: [String.t()]
  def header, do: @header

  @doc "Prints the table, the ratios the targets name, and what was not run."
  @spec print([map()]) :: :ok
  def print(rows) do
    columns = for {_key, title, width, side} <- @table, do: {title, width, side}

    Table.print(columns, rows, fn r ->
      fields = fields(r)
      for {key, _title, _width, _side} <- @table, do: fmt(Map.fetch!(fields, key))
    end)

    IO.puts("\nRatios (the bench prints them; it does not judge):")

    for {size, consumers} <- rows |> Enum.map(&{&1.payload, &1.consumers}) |> Enum.uniq() do
      memory = find(rows, "ringbus_memory", size, consumers)

      IO.puts(
        "  #{size} B, #{consumers} consumer(s): ringbus_r3 / jetstream_r3 " <>
          "#{text(ratio(rows, find(rows, "ringbus_r3", size, consumers)))} (target >= 2x); " <>
          "ringbus_memory / redis_aof_always #{text(ratio(rows, memory))}" <>
          "#{if memory, do: " (#{memory.mode}; the target, >= 1x, is per core, with --pin)"}"
      )
    end

    for r <- rows,
        r.crash.missing > 0,
        do:
          IO.puts(
            "  #{r.system} #{r.payload} B: #{r.crash.missing} of a crashed consumer's messages never came back"
          )

    for %{failover: %{} = f} = r <- rows,
        do:
          IO.puts(
            "  #{r.system} #{r.payload} B failover: #{fmt(f.ms) || "no delivery"} ms " <>
              "(#{f.push_errors} pushes and #{f.fetch_errors} fetches failed meanwhile; " <>
              "killed #{f.killed}, the leader; then #{f.leader_after} led, " <>
              "as #{f.probe} saw it)"
          )

    IO.puts(
      "\nFigures on a machine shared with other work are noisy; compare the rows of one run.\n"
    )
  end

  @doc "Writes the rows as CSV to `path`."
  @spec write!(Path.t(), [map()]) :: :ok
  def write!(path, rows) do
    CSV.write!(path, @header, Enum.map(rows, &csv_row(&1, rows)))
    IO.puts("wrote #{path}")
  end

  defp csv_row(r, rows) do
    fields =
      Map.merge(fields(r), %{"ratio_to" => @baselines[r.system], "ratio" => ratio(rows, r)})

    for key <- @header, do: Map.fetch!(fields, key)
  end

  defp find(rows, system, size, consumers),
    do:
      Enum.find(rows, &(&1.system == system and &1.payload == size and &1.consumers == consumers))

  # A row's rate over its baseline's, or nil.
  defp ratio(_rows, nil), do: nil

  defp ratio(rows, r) do
    case find(rows, @baselines[r.system], r.payload, r.consumers) do
      %{msgs_per_s: b} when b > 0 -> r.msgs_per_s / b
      _ -> nil
    end
  end

  defp text(nil), do: "n/a"
  defp text(ratio), do: fmt(ratio) <> "x"

  defp fields(r) do
    r
    |> Map.take([:system, :replicas, :durable, :mode, :clients_on, :payload, :producers])
    |> Map.merge(
      Map.take(r, [:consumers, :acked, :p50_us, :p99_us, :max_us, :redelivered, :errors])
    )
    |> Map.merge(%{
      msgs_per_s: round(r.msgs_per_s),
      crash_first_ms: r.crash.first_ms,
      crash_all_ms: r.crash.all_ms,
      crash_missing: r.crash.missing,
      failover_ms: failover_ms(r)
    })
    |> Map.new(fn {key, value} -> {Atom.to_string(key), value} end)
  end

  defp failover_ms(%{failover: %{ms: ms}}), do: ms
  defp failover_ms(_row), do: nil

  defp fmt(nil), do: nil
  defp fmt(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 2)
  defp fmt(x), do: to_string(x)
end
