defmodule Ringbus.Bench.LenTest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO

  @moduletag :tmp_dir

  test "writes a CSV row per impl, size and hibernation state", %{tmp_dir: dir} do
    out = Path.join(dir, "len.csv")
    args = ["--sizes", "10,1000", "--reps", "20", "--out", out]
    printed = capture_io(fn -> assert :ok = Ringbus.Bench.Len.run(args) end)
    assert printed =~ "wrote #{out}"

    [header | rows] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == "impl,n,hibernated,ns_per_call"

    keys =
      for row <- rows do
        [impl, n, hibernated, ns] = String.split(row, ",")
        assert {_, ""} = Float.parse(ns)
        {impl, n, hibernated}
      end

    assert Enum.sort(keys) ==
             Enum.sort(
               for impl <- ~w(list queue ringbus),
                   n <- ~w(10 1000),
                   h <- ~w(false true),
                   do: {impl, n, h}
             )
  end

  test "rejects unknown options" do
    assert_raise OptionParser.ParseError, fn -> Ringbus.Bench.Len.run(["--size", "10"]) end
  end
end
