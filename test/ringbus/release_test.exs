defmodule Ringbus.ReleaseTest do
  # What a release starts from its boot configuration, in this VM.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  alias Ringbus.Release

  setup do
    on_exit(fn -> Enum.each(["release-a", "release-b"], &Ringbus.delete/1) end)
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
        "RINGBUS_CHANNELS" => "release-a:10,release-b:5:reject"
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
    assert {:ok, %{capacity: 5, overflow: :reject}} = Ringbus.info("release-b")
    port = Ringbus.Server.port(Ringbus.Server)
    http = Ringbus.HTTP.port(Ringbus.HTTP)

    assert log =~
             "Ringbus 0.1.0 listening on 127.0.0.1:#{port} (tcp, no auth); " <>
               "HTTP on http://127.0.0.1:#{http}; 2 channels declared"

    assert {:ok, client} = Ringbus.Client.connect(port: port)
    assert {:ok, 0} = Ringbus.Client.push(client, "release-a", "x")
    Ringbus.Client.close(client)
  end
end
