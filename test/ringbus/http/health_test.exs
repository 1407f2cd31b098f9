defmodule Ringbus.HTTP.HealthTest do
  # Readiness as a function of the listeners, the nodes to join and the
  # members connected.
  use ExUnit.Case, async: true

  alias Ringbus.HTTP.Health

  @server %{protocol: :binary, port: 7171, counters: nil}

  test "ready once a server listens and, with nodes to join, one of them is a member" do
    assert Health.ready([@server], [], [node()]) == :ok
    assert Health.ready([@server], [:a@h, :b@h], [node(), :b@h]) == :ok
    # A node told to join itself has nothing to wait for.
    assert Health.ready([@server], [node()], [node()]) == :ok
  end

  test "not ready without a listener, or before it has joined" do
    assert Health.ready([], [], [node()]) == {:error, "no server is listening"}

    assert Health.ready([@server], [:a@h, :b@h], [node()]) ==
             {:error, "not joined to the cluster: none of a@h, b@h is connected"}
  end
end
