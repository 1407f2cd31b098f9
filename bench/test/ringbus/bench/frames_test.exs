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
      assert {ms, ""} = Float.parse(ms)
      assert {rate, ""} = Float.parse(rate)
      assert ms > 0 and rate > 0
    end

    assert output =~ "tls: tlsv1"
    assert output =~ "tcp ringbus at 1 MB:"
    assert output =~ "ringbus compared with naive"
    assert progress =~ "tls 1 MB naive run 1/1:"
    assert length(Process.get(:results)) == 4
    assert Ringbus.channels() == channels
  end

  # What the bench promises about what it times: a transfer's time contains
  # the receiver's whole work on the frame (read, joined, decoded, stored), as
  # the receiver clocks it itself, and the naive receiver gets the frame in
  # socket reads of at most --buffer-size bytes, so it really reassembles it.
  test "a transfer's time contains the receiver's work, and naive reassembles many reads" do
    buffer = 65_536
    args = ~w(--sizes 1,2 --runs 2 --transports tcp --buffer-size #{buffer})
    {_output, progress} = run_quietly(args)

    naive = for %{impl: "naive"} = r <- Process.get(:results), do: r
    assert Enum.map(naive, & &1.frame_mb) == [1, 2]

    for r <- naive do
      assert r.receiver_ms > 0
      assert r.ms >= r.receiver_ms
      assert r.reads >= r.frame_mb * 1_048_576 / buffer
    end

    transfers =
      Regex.scan(~r/naive run \d\/2: ([\d.]+) ms, .*, receiver busy ([\d.]+) ms/, progress)

    assert length(transfers) == 4

    for [_, ms, busy] <- transfers do
      assert String.to_float(ms) >= String.to_float(busy)
    end
  end

  test "rejects unknown options and bad values" do
    assert_raise OptionParser.ParseError, fn -> Frames.run(~w(--bogus 1)) end
    assert_raise Mix.Error, ~r/--sizes/, fn -> Frames.run(~w(--sizes 1,x)) end
    assert_raise Mix.Error, ~r/--transports/, fn -> Frames.run(~w(--transports udp)) end
    assert_raise Mix.Error, ~r/--runs to be a positive integer/, fn -> Frames.run(~w(-r 0)) end
  end

  defp run_quietly(args), do: BenchIO.run_quietly(fn -> Frames.run(args) end)
end
