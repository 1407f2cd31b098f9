defmodule Ringbus.Bench.SeekTest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO

  @moduletag :tmp_dir

  test "reads each size three ways, checks they agree, and writes a CSV row per way and size",
       %{tmp_dir: dir} do
    out = Path.join(dir, "seek.csv")
    args = ["--sizes", "1000,20000", "--reads", "50", "--out", out]
    printed = capture_io(fn -> assert :ok = Ringbus.Bench.Seek.run(args) end)
    assert printed =~ "wrote #{out}"

    [header | rows] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == "way,n,reads,us_per_read,per_seq,per_n0"

    parsed =
      for row <- rows do
        [way, n, reads, us, per_seq, per_n0] = String.split(row, ",")
        for x <- [us, per_seq, per_n0], do: assert({f, ""} = Float.parse(x)) && f > 0
        {way, String.to_integer(n), String.to_integer(reads)}
      end

    assert parsed == [
             {"seq", 1000, 50},
             {"time", 1000, 50},
             {"scan", 1000, 50},
             {"seq", 20000, 50},
             {"time", 20000, 50},
             {"scan", 20000, 3}
           ]

    # The ratios are of the rows they name: a row of the smallest size is
    # 1.00 of itself, and each size's seq row 1.00 of itself.
    lines = Enum.map(rows, &String.split(&1, ","))
    assert Enum.all?(for [_, "1000", _, _, _, n0] <- lines, do: n0 == "1.000")
    assert Enum.all?(for ["seq", _, _, _, s, _] <- lines, do: s == "1.000")
  end

  test "rejects unknown options and bad values" do
    assert_raise OptionParser.ParseError, fn -> Ringbus.Bench.Seek.run(["--size", "10"]) end
    assert_raise Mix.Error, fn -> Ringbus.Bench.Seek.run(["--reads", "0"]) end
  end
end
