defmodule Ringbus.Bench.FramesTest do
  use ExUnit.Case, async: false

  alias Ringbus.Bench.Frames
  alias Ringbus.Test.BenchIO

  @tag :tmp_dir
  test "pushes a 1 MB frame to both receivers over TCP and TLS and writes CSV", %{tmp_dir: dir} do
    csv = Path.join(dir, "frames.csv")
    channels = Ringbus.channels()

    {output, progress} = run_quietly(~w(--sizes 1 --runs 1 --out #{csv}))

    assert ["transport,impl,frame_mb,ms,mb_per_s" | rows] =
             csv |> File.read!() |> String.split("\n", trim: true)

    assert Enum.map(rows, &(&1 |> String.split(",") |> Enum.take(3))) == [
             ["tcp", "ringbus", "1"],
             ["tcp", "naive", "1"],
             ["tls", "ringbus", "1"],
             ["tls", "naive", "1"]
           ]

    for row <- rows do
      [_, _, _, ms, rate] = String.split(row, ",")
      {ms, ""} = Float.parse(ms)
      {rate, ""} = Float.parse(rate)
      assert ms > 0 and rate > 0
      assert_in_delta rate, 1000 / ms, 0.05 * rate
    end

    assert output =~ "tls: tlsv1"
    assert output =~ "tcp ringbus at 1 MB:"
    assert output =~ "ringbus compared with naive"
    assert progress =~ "tls 1 MB naive run 1/1:"
    assert length(Process.get(:results)) == 4
    assert Ringbus.channels() == channels
  end

  test "rejects unknown options and bad values" do
    assert_raise OptionParser.ParseError, fn -> Frames.run(~w(--bogus 1)) end
    assert_raise Mix.Error, ~r/--sizes/, fn -> Frames.run(~w(--sizes 1,x)) end
    assert_raise Mix.Error, ~r/--transports/, fn -> Frames.run(~w(--transports udp)) end
    assert_raise Mix.Error, ~r/--runs to be a positive integer/, fn -> Frames.run(~w(-r 0)) end
  end

  defp run_quietly(args), do: BenchIO.run_quietly(fn -> Frames.run(args) end)
end
