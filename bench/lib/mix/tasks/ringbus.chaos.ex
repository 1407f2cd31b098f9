defmodule Mix.Tasks.Ringbus.Chaos do
  @shortdoc "Runs Ringbus's chaos test: faults on real nodes, a history, a checker"

  @moduledoc """
  Runs `Ringbus.Chaos`: four peer nodes, producers and consumers that
  record every operation, a nemesis that stalls (SIGSTOP), kills (SIGKILL,
  then a restart) and partitions nodes on a schedule drawn from the seed,
  then the checker's table: lost, lost to a crash, duplicated, unexpected,
  false failures, unknown outcomes, order; and for the consumer group's
  consumers, lost, acked redelivered, delivery count down, members
  disagreeing and redeliveries. See `docs/FAULTS.md`.

      mix ringbus.chaos --seconds 60 --seed 1..3 --out chaos.csv
      mix ringbus.chaos --replicated --seconds 60 --seed 1

  It runs in the `bench` environment, like `mix ringbus.bench`. The same
  seed gives the same fault schedule and the same choices of the producers;
  what the faults catch in flight depends on the machine.

  ## Command line options

    * `--seconds N` - seconds of faults per run (default 60)
    * `--seed S` - a seed, or a range `A..B` of seeds run one after the
      other (default 1)
    * `--replicated` - replicated channels (`replicas: 3`) under kills and
      partitions of their leader, stalls and restarts of every node,
      producers that retry under producer tags: nothing acked may be lost,
      nothing stored twice (see "Replicated channels" in `docs/FAULTS.md`)
    * `--out FILE` - also write the counts as CSV: `seed,check,count`
  """

  use Mix.Task

  alias Ringbus.Bench.{Args, CSV}

  @counts [
    :ok,
    :fail,
    :info,
    :held,
    :gone,
    :lost,
    :lost_to_crash,
    :duplicated,
    :unexpected,
    :false_failures,
    :info_stored,
    :info_not_stored,
    :order,
    :subscriber_gaps,
    :counter_mismatches,
    :unchecked,
    :group_deliveries,
    :group_acks,
    :group_lost,
    :group_left,
    :acked_redelivered,
    :delivery_count_down,
    :members_disagreeing,
    :redeliveries
  ]

  @impl Mix.Task
  def run(args) do
    opts = Args.parse!(args, seconds: :integer, seed: :string, out: :string, replicated: :boolean)

    channels = if opts[:replicated], do: :replicated, else: :memory
    seconds = Args.positive!(opts, :seconds, 60)
    seeds = seeds!(Keyword.get(opts, :seed, "1"))
    Mix.Task.run("app.start")

    rows =
      Enum.flat_map(seeds, fn seed ->
        %{report: report, table: table} =
          Ringbus.Chaos.run(seconds: seconds, seed: seed, channels: channels)

        Mix.shell().info(
          "\nseed #{seed}, #{seconds} s of faults, #{channels} channels\n\n#{table}"
        )

        for key <- @counts, do: [seed, key, count(report[key])]
      end)

    if out = opts[:out], do: CSV.write!(out, ["seed", "check", "count"], rows)
  end

  defp count(n) when is_integer(n), do: n
  defp count(%{} = by_key), do: by_key |> Map.values() |> Enum.sum()
  defp count(list) when is_list(list), do: Enum.count(list)

  defp seeds!(string) do
    match = Regex.run(~r/^(\d+)(?:\.\.(\d+))?$/, string, capture: :all_but_first) || []

    case Enum.map(match, &String.to_integer/1) do
      [a] ->
        [a]

      [a, b] when a <= b ->
        Enum.to_list(a..b)

      _ ->
        Mix.raise(
          "expected --seed to be an integer or an ascending range A..B, got: #{inspect(string)}"
        )
    end
  end
end
