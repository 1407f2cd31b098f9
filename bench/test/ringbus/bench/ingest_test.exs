defmodule Ringbus.Bench.IngestTest do
  # Runs the ingest bench at a tiny size, generator BEAM included.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  @tag :tmp_dir
  test "every mode stores and acks every message and lands in the CSV", %{tmp_dir: dir} do
    out = Path.join(dir, "ingest.csv")
    args = ~w(--messages 2000 --rr-messages 200 --batch 100 --quiet --out) ++ [out]

    output = capture_io(fn -> send(self(), {:rows, Ringbus.Bench.Ingest.run(args)}) end)
    assert_received {:rows, rows}

    assert Enum.map(rows, & &1.mode) == ~w(request_reply pipelined batched 1kb)
    assert output =~ "msgs/s"

    [header | lines] = out |> File.read!() |> String.split("\n", trim: true)
    assert header == "mode,payload_bytes,messages,msgs_per_s,mb_per_s"

    assert [
             ["request_reply", "16", "200", rr, _],
             ["pipelined", "16", "2000", pipelined, _],
             ["batched", "16", "2000", batched, _],
             ["1kb", "1024", "2000", kb, _]
           ] = Enum.map(lines, &String.split(&1, ","))

    for rate <- [rr, pipelined, batched, kb], do: assert(String.to_integer(rate) > 0)
  end

  test "unknown options and modes are refused" do
    assert_raise OptionParser.ParseError, fn -> Ringbus.Bench.Ingest.run(~w(--colour blue)) end
    assert_raise Mix.Error, fn -> Ringbus.Bench.Ingest.run(~w(--modes warp)) end
  end
end
