defmodule Ringbus.ApplicationStopTest do
  # Stops and restarts the application, so it runs alone (async: false).
  use ExUnit.Case, async: false

  @moduletag :capture_log

  test "subscribers learn that Ringbus stopped" do
    on_exit(fn -> {:ok, _} = Application.ensure_all_started(:ringbus) end)
    name = {__MODULE__, :stop}
    :ok = Ringbus.create(name, capacity: 4)
    {:ok, sub} = Ringbus.subscribe(name)
    ref = Process.monitor(Ringbus.Test.Internals.subscription_pid(sub))

    :ok = Application.stop(:ringbus)

    assert_receive {:ringbus_closed, ^sub, :shutdown}, 1_000
    assert_receive {:DOWN, ^ref, :process, _, :normal}, 1_000
  end
end
