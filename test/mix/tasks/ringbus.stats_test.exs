defmodule Mix.Tasks.Ringbus.StatsTest do
  use ExUnit.Case, async: false

  setup do
    http = start_supervised!({Ringbus.HTTP, port: 0})
    on_exit(fn -> Ringbus.delete("stats-task") end)
    %{url: "http://127.0.0.1:#{Ringbus.HTTP.port(http)}"}
  end

  test "prints the channel table of the node at --url", %{url: url} do
    :ok = Ringbus.create("stats-task", capacity: 50)
    {:ok, _} = Ringbus.push_many("stats-task", ~w(a b))

    Mix.shell(Mix.Shell.Process)
    on_exit(fn -> Mix.shell(Mix.Shell.IO) end)
    Mix.Tasks.Ringbus.Stats.run(["--url", url])

    assert_received {:mix_shell, :info, [table]}
    assert table =~ ~r/^CHANNEL\s+LEN\s+CAPACITY\s+HELD\s+PUSHED/m
    assert table =~ ~r/^stats-task\s+2\s+50\s+2 B\s+2\s+0\s/m
  end

  test "--every and --count print the tables again, each under the time", %{url: url} do
    :ok = Ringbus.create("stats-task", capacity: 50)
    {:ok, sub} = Ringbus.subscribe("stats-task", max_credit: 10, name: "stats-reader")

    Mix.shell(Mix.Shell.Process)
    on_exit(fn -> Mix.shell(Mix.Shell.IO) end)
    Mix.Tasks.Ringbus.Stats.run(["--url", url, "--every", "1", "--count", "2"])

    for n <- 1..2 do
      assert_received {:mix_shell, :info, [table]}
      assert table =~ ~r/^--- \d{4}-\d\d-\d\dT[\d:]+Z, every 1 s #{n} of 2 ---$/m
      assert table =~ ~r/^stats-task\s+0\s+50\s/m
      # Subscriptions have a table of their own.
      assert table =~ ~r/^CHANNEL\s+SUBSCRIBER\s+VIA\s+LAG\s+CREDIT\s+LOST/m
      assert table =~ ~r/^stats-task\s+stats-reader\s+embedded\s+0\s+10\s+0$/m
    end

    refute_received {:mix_shell, :info, _}
    Ringbus.unsubscribe(sub)
  end

  test "says what went wrong when nothing answers" do
    {:ok, listen} = :gen_tcp.listen(0, [])
    {:ok, port} = :inet.port(listen)
    :ok = :gen_tcp.close(listen)

    assert_raise Mix.Error,
                 "ringbus: cannot read http://127.0.0.1:#{port}/status.txt: " <>
                   "connection refused (:econnrefused)",
                 fn -> Mix.Tasks.Ringbus.Stats.run(["--url", "http://127.0.0.1:#{port}"]) end
  end
end
