defmodule Ringbus.Bench.BacklogTest do
  # Suspends the application's Ringbus.Store for its store rows.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  @moduletag :tmp_dir

  test "writes a CSV row for every case, variant and size", %{tmp_dir: dir} do
    out = Path.join(dir, "backlog.csv")
    args = ["--sizes", "1000,2000", "--repeat", "1", "--naive-max", "1000", "--out", out]

    printed =
      capture_io(fn -> quietly(fn -> assert :ok = Ringbus.Bench.Backlog.run(args) end) end)

    assert printed =~ "skipped: would take minutes (quadratic)"
    assert printed =~ "wrote #{out}"

    [header | rows] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == "case,variant,n,runs,ms,ratio_per_doubling"

    rows = Enum.map(rows, &String.split(&1, ","))
    assert length(rows) == 2 * length(Ringbus.Bench.Backlog.cases(%{max_len: 10}))

    for [kase, variant, n, runs, ms, ratio] <- rows do
      assert n in ["1000", "2000"]

      case {kase, variant, n} do
        {"seed", "default", "2000"} ->
          assert runs == "0"
          assert ms == "skipped"
          assert ratio == "-"

        {_, _, "1000"} ->
          assert runs == "1"
          assert {_, ""} = Float.parse(ms)
          assert ratio == "-"

        {_, _, "2000"} ->
          assert runs == "1"
          assert {_, ""} = Float.parse(ms)
          assert {_, ""} = Float.parse(ratio)
      end
    end

    variants = rows |> Enum.map(fn [k, v | _] -> {k, v} end) |> Enum.uniq()
    assert {"seed", "drained"} in variants
    assert {"subscription", "ack"} in variants
    assert {"store", "create_exists"} in variants
    assert {"connection", "deliveries"} in variants
    assert {"subscribe", "ringbus"} in variants
    assert {"subscribe_crowd", "spawn"} in variants
  end

  test "--only runs the cases and variants named", %{tmp_dir: dir} do
    out = Path.join(dir, "only.csv")
    args = ["--sizes", "1000", "--repeat", "1", "--only", "store,seed/drained", "--out", out]
    capture_io(fn -> quietly(fn -> assert :ok = Ringbus.Bench.Backlog.run(args) end) end)

    assert [_header | rows] = out |> File.read!() |> String.split("\n", trim: true)

    assert Enum.map(rows, &(&1 |> String.split(",") |> Enum.take(2))) ==
             [["seed", "drained"], ["store", "create_exists"]]
  end

  test "rejects sizes that are not ascending" do
    assert_raise Mix.Error, ~r/ascending/, fn ->
      Ringbus.Bench.Backlog.run(["--sizes", "2000,1000"])
    end
  end

  test "--repeat runs every fast size once a round, and reports the median of its runs" do
    args = ["--sizes", "1000,2000", "--repeat", "3", "--only", "store"]
    {printed, progress} = capture_both(fn -> Ringbus.Bench.Backlog.run(args) end)

    assert progress =~ "store/create_exists: round 3 of 3"

    for n <- ["1000", "2000"] do
      [row] =
        printed |> String.split("\n") |> Enum.filter(&(&1 =~ ~r/^store\s+create_exists\s+#{n}\s/))

      [count, median, runs] =
        Regex.run(~r/\s(\d+)\s+(\d+\.\d)\s.*runs ([\d. ]+)$/, row, capture: :all_but_first)

      runs = String.split(runs)
      assert length(runs) == 3
      assert count == "3"
      assert median == Enum.at(Enum.sort_by(runs, &String.to_float/1), 1)
    end
  end

  @tag :tmp_dir
  test "every cell says how many runs it is the median of, in the table and the CSV",
       %{tmp_dir: dir} do
    out = Path.join(dir, "runs.csv")

    args =
      ~w(--sizes 1000,2000 --repeat 2 --naive-max 1000 --only seed/default,store --out) ++ [out]

    {printed, _progress} = capture_both(fn -> Ringbus.Bench.Backlog.run(args) end)

    assert [_header | rows] = out |> File.read!() |> String.split("\n", trim: true)

    assert Enum.map(rows, &(&1 |> String.split(",") |> Enum.take(4))) == [
             ["seed", "default", "1000", "2"],
             ["seed", "default", "2000", "0"],
             ["store", "create_exists", "1000", "2"],
             ["store", "create_exists", "2000", "2"]
           ]

    assert printed =~ ~r/^case\s+variant\s+n\s+runs\s+ms/m
    assert printed =~ ~r/^seed\s+default\s+2000\s+0\s+-\s+-\s+skipped/m
    assert printed =~ ~r/^store\s+create_exists\s+2000\s+2\s+\d+\.\d/m
  end

  defp quietly(fun), do: capture_io(:stderr, fun)

  defp capture_both(fun) do
    parent = self()
    printed = capture_io(fn -> send(parent, {:stderr, capture_io(:stderr, fun)}) end)
    assert_received {:stderr, progress}
    {printed, progress}
  end
end
