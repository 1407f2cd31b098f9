defmodule Ringbus.Server.ShutdownTest do
  # A server stopping under a producer that pipelines pushes: the producer
  # hears of every push it sent, an ack or an error, never silence.
  use ExUnit.Case, async: false

  alias Ringbus.Test.Producer

  @rounds 20

  setup do
    on_exit(fn -> Ringbus.delete("shutdown") end)
    :ok
  end

  # Several rounds: how far the producer is when the stop comes varies, and
  # so does what is in flight at that moment.
  test "every push sent before and during the stop gets an ack or an error" do
    for round <- 1..@rounds, do: stop_under_producer(round)
  end

  defp stop_under_producer(round) do
    server = start_supervised!({Ringbus.Server, port: 0, shutdown_timeout: 5_000}, id: round)
    :ok = Ringbus.create("shutdown", capacity: 100_000)

    Producer.start(Ringbus.Server.port(server), "shutdown", warm: 200)
    assert_receive {:producing, _producer}, 10_000
    :ok = stop_supervised(round)
    assert_receive {:produced, result}, 60_000

    # Every push answered once, in the order sent, and the server's last
    # word arrived.
    assert Enum.map(result.answers, &elem(&1, 0)) == result.sent
    assert result.down == :shutting_down

    {oks, errors} = Enum.split_with(result.answers, &match?({_, {:ok, _}}, &1))
    assert Enum.all?(errors, &match?({_, {:error, :closed}}, &1))

    # What was acked was stored, with consecutive seqs, and nothing else was.
    assert Enum.map(oks, fn {_, {:ok, seq}} -> seq end) == Enum.to_list(0..(length(oks) - 1))
    {:ok, info} = Ringbus.info("shutdown")
    assert info.pushed == length(oks)
    :ok = Ringbus.delete("shutdown")
  end
end
