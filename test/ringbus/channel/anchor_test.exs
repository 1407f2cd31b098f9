defmodule Ringbus.Channel.AnchorTest do
  # A channel's anchor does nothing but exist, and is an OTP citizen all the
  # same: it answers `:sys` and goes back to hibernating.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Internals

  import Ringbus.Test.Eventually

  test ":sys.get_state, :sys.suspend and :sys.resume work on a channel's anchor" do
    %{anchor: anchor} = Internals.temp_channel!(capacity: 4)

    assert :sys.get_state(anchor, 1_000) == nil
    assert :ok = :sys.suspend(anchor, 1_000)
    assert :ok = :sys.resume(anchor, 1_000)

    assert {:callback_failed, _, _} =
             catch_error(:sys.replace_state(anchor, fn nil -> :other end))

    assert :sys.get_state(anchor, 1_000) == nil

    hibernating = {:current_function, {:erlang, :hibernate, 3}}
    assert eventually(fn -> Process.info(anchor, :current_function) == hibernating end)
  end

  test "a stray message is dropped; deleting the channel stops the anchor" do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, capacity: 4)
    %{anchor: anchor} = Internals.channel!(name)
    ref = Process.monitor(anchor)

    send(anchor, :stray)
    assert :sys.get_state(anchor, 1_000) == nil
    assert Process.info(anchor, :message_queue_len) == {:message_queue_len, 0}

    :ok = Ringbus.delete(name)
    assert_receive {:DOWN, ^ref, :process, ^anchor, :channel_deleted}, 1_000
  end
end
