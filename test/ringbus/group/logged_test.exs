defmodule Ringbus.Group.LoggedTest do
  # A replicated channel's `:ack_fetch` as its sender runs it
  # (`Ringbus.Group.Logged`), against a log that answers as a machine
  # would: the acks go with the first try only, and a machine version that
  # refuses the combined request gets the ack and the fetch one after the
  # other.
  use ExUnit.Case, async: true

  alias Ringbus.Group.Logged
  alias Ringbus.Test.Internals

  setup do
    name = "logged-test-#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, capacity: 10)
    on_exit(fn -> Ringbus.delete(name) end)
    %{name: name, channel: Internals.channel!(name)}
  end

  # Tells the test each request, and answers it with `answer`'s.
  defp log(answer) do
    test = self()

    fn request ->
      send(test, {:sent, request})
      answer.(request)
    end
  end

  test "refused whole (an older machine version in effect): an ack, then a fetch", %{
    channel: channel
  } do
    log =
      log(fn
        {:ack_fetch, _, _} -> {:error, :badarg}
        {:ack, "g", [4]} -> {:ok, 1}
        {:fetch, "g", "c", _, 10, 0} -> {:ok, {[{5, "x", 1}], nil, []}}
        _orphan -> {:ok, 0}
      end)

    fetch = {:fetch, "g", "c", self(), 10, 0}

    assert Logged.run(channel, {:ack_fetch, [4], fetch}, log) ==
             {:ok, {1, {[{5, "x", 1}], nil, []}}}

    assert_received {:sent, {:ack_fetch, [4], ^fetch}}
    assert_received {:sent, {:ack, "g", [4]}}
    assert_received {:sent, ^fetch}
  end

  test "a wait after the first try sends plain fetches, and answers the first try's acks", %{
    name: name,
    channel: channel
  } do
    log =
      log(fn
        {:ack_fetch, [4], {:fetch, "g", "c", _, 10, 0}} -> {:ok, {1, {[], nil, []}}}
        {:fetch, "g", "c", _, 10, 0} -> {:ok, {[{5, "x", 1}], nil, []}}
        _orphan -> {:ok, 0}
      end)

    owner = self()

    waiting =
      Task.async(fn ->
        Logged.run(channel, {:ack_fetch, [4], {:fetch, "g", "c", owner, 10, 10_000}}, log)
      end)

    assert_receive {:sent, {:ack_fetch, [4], _}}, 5_000
    refute_received {:sent, {:fetch, _, _, _, _, _}}
    # A push on this member wakes the wait.
    {:ok, 0} = Ringbus.push(name, "x")
    assert Task.await(waiting, 5_000) == {:ok, {1, {[{5, "x", 1}], nil, []}}}
    assert_received {:sent, {:fetch, "g", "c", ^owner, 10, 0}}
  end
end
