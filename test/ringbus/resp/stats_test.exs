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
        {[_], c} = RespClient.call(c, ~w(XADD resp-stats * f v))
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

  test "RESP error replies are counted by code in ringbus_server_errors_total" do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    port = Ringbus.Server.port(server, :resp)
    on_exit(fn -> Ringbus.delete("resp-errors") end)

    c = RespClient.connect!(port)
    {[{:error, "ERR unknown command" <> _}], c} = RespClient.call(c, ~w(NOSUCH a))
    {[{:error, "ERR wrong number" <> _}], c} = RespClient.call(c, ~w(XLEN))
    {[_], c} = RespClient.call(c, ~w(XADD resp-errors * f v))

    {[{:error, "NOGROUP" <> _}], c} =
      RespClient.call(c, ~w(XREADGROUP GROUP g c STREAMS resp-errors >))

    RespClient.close(c)

    text = IO.iodata_to_binary(Ringbus.Metrics.prometheus(Ringbus.Metrics.snapshot()))
    labels = ~s(protocol="resp",port="#{port}")
    assert text =~ ~s(ringbus_server_errors_total{#{labels},code="ERR"} 2\n)
    assert text =~ ~s(ringbus_server_errors_total{#{labels},code="NOGROUP"} 1\n)
    assert text =~ ~s(ringbus_server_errors_total{#{labels},code="NOAUTH"} 0\n)
    # The binary protocol's codes stay with the binary listener.
    refute text =~ ~s(ringbus_server_errors_total{#{labels},code="full"})
    assert {"", 0} = Ringbus.Test.Promtool.check(text)
  end
end
