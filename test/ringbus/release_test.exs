defmodule Ringbus.ReleaseTest do
  # What a release starts from its boot configuration, in this VM.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  alias Ringbus.Release

  setup do
    on_exit(fn -> Enum.each(["release-a", "release-b", "release-r"], &Ringbus.delete/1) end)
    :ok
  end

  test "no boot configuration: nothing beyond the store" do
    assert Release.children(nil) == []
  end

  test "the declared channels, then the server and the HTTP endpoint, and a line that says so" do
    {:ok, boot} =
      Release.Config.load(%{
        "RINGBUS_PORT" => "0",
        "RINGBUS_HTTP_PORT" => "0",
        "RINGBUS_CHANNELS" => "release-a:10,release-b:5:reject@max_age=60000"
      })

    log =
      capture_log(fn ->
        spec = %{
          id: :release,
          type: :supervisor,
          start: {Supervisor, :start_link, [Release.children(boot), [strategy: :one_for_one]]}
        }

        start_supervised!(spec)
        Logger.flush()
      end)

    assert {:ok, %{capacity: 10, overflow: :drop_oldest}} = Ringbus.info("release-a")
    assert {:ok, %{capacity: 5, overflow: :reject, max_age: 60_000}} = Ringbus.info("release-b")
    assert {:ok, %{max_age: nil}} = Ringbus.info("release-a")
    port = Ringbus.Server.port(Ringbus.Server)
    http = Ringbus.HTTP.port(Ringbus.HTTP)

    assert log =~
             "Ringbus 0.1.0 listening on 127.0.0.1:#{port} (tcp, no auth); " <>
               "HTTP on http://127.0.0.1:#{http}; 2 channels declared"

    assert {:ok, client} = Ringbus.Client.connect(port: port)
    assert {:ok, 0} = Ringbus.Client.push(client, "release-a", "x")
    Ringbus.Client.close(client)
  end

  test "a declared replicated channel is created with its replicas; restored, it is kept" do
    {:ok, boot} = Release.Config.load(%{"RINGBUS_CHANNELS" => "release-r:10:reject@replicas=1"})

    assert :ok = Release.create_channels(boot.channels)

    assert {:ok, %{replicas: 1, capacity: 10, overflow: :reject, members: [member]}} =
             Ringbus.info("release-r")

    assert member == node()
    assert {:ok, 0} = Ringbus.push("release-r", "x")

    # A restart finds it restored by the replica catalogue: the boot goes on.
    log =
      capture_log([level: :info], fn -> assert :ok = Release.create_channels(boot.channels) end)

    assert log =~ ~s(Ringbus channel "release-r" restored from its log)
    assert {:ok, [{0, "x"}], 0} = Ringbus.read("release-r", 0, 10)
  end

  test "a replicated channel with more replicas than nodes connected: one line" do
    assert {:error, line} = Release.create_channels([{"release-r", [capacity: 10, replicas: 2]}])

    assert line ==
             ~s(ringbus: RINGBUS_CHANNELS "release-r" cannot be created: ) <>
               "2 replicas need 2 connected nodes, this one included (RINGBUS_JOIN) (:node_down)"

    assert {:error, :no_channel} = Ringbus.info("release-r")
  end
end
