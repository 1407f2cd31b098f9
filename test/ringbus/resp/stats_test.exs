defmodule Ringbus.Resp.StatsTest do
  # RESP connections are counted and logged as binary ones are: the listener
  # is in the directory under :resp, commands count in, replies out.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog
  import Ringbus.Test.Eventually

  alias Ringbus.Server.{Directory, Stats}
  alias Ringbus.Test.RespClient

  test "a RESP listener's figures and log lines" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    port = Ringbus.Server.port(server, :resp)
    on_exit(fn -> Ringbus.delete("resp-stats") end)

    assert %{counters: counters} = Enum.find(Directory.servers(), &(&1.port == port))
    assert %{protocol: :resp} = Enum.find(Directory.servers(), &(&1.port == port))

    log =
      capture_log(fn ->
        c = RespClient.connect!(port)
        {["1-0"], c} = RespClient.call(c, ~w(XADD resp-stats * f v))
        {[1], c} = RespClient.call(c, ~w(XLEN resp-stats))
        RespClient.close(c)
        # The connection counts its close once it has seen the peer's.
        assert eventually(fn -> Stats.counts(counters).closed.peer_closed == 1 end)
      end)

    counts = Stats.counts(counters)
    assert %{accepted: 1, open: 0, frames_in: 2, frames_out: 2} = counts
    assert counts.closed.peer_closed == 1
    assert log =~ ~r/Ringbus resp connection from 127\.0\.0\.1:\d+ opened \(tcp\)/
    assert log =~ ~r/closed \(peer_closed\) after \d+ ms: 2 frames in, 2 out/
  end
end
