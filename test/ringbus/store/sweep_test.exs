defmodule Ringbus.Store.SweepTest do
  # The sweep lets what is older than max_age go from memory channels that
  # nobody uses, a bounded amount of work each sweep. Not async: some tests
  # suspend the node's sweep to run sweeps of their own.
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  alias Ringbus.Channel.Ring
  alias Ringbus.Store.Sweep
  alias Ringbus.Test.Internals

  @age 100

  defp channel(opts \\ []) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, Keyword.merge([capacity: 100, max_age: @age], opts))
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  # Figures read from the ring's counters: unlike info/1, no expiry first.
  defp figures(name), do: Ring.info(Internals.channel!(name))

  # Pushes `payloads` to each of `names`, then waits (bounded) until they
  # are all older than max_age, with no operation on the channels meanwhile.
  defp push_aged(names, payloads) do
    for name <- names, do: {:ok, _} = Ringbus.push_many(name, payloads)
    {:ok, %{newest_time: newest}} = Ringbus.info(List.last(names))
    Process.sleep(max(newest + @age + 1 - System.system_time(:millisecond), 0))
  end

  defp suspended(fun) do
    :sys.suspend(Sweep)

    try do
      fun.()
    after
      :sys.resume(Sweep)
    end
  end

  test "an idle channel's old messages expire with no operation on it, and info and metrics count them" do
    name = channel()
    push_aged([name], ~w(a b c))

    # The node's sweep runs every second by default.
    assert eventually(fn -> figures(name).expired == 3 end, 1_000)
    assert %{len: 0, bytes: 0, pushed: 3} = figures(name)
    assert {:ok, %{expired: 3, len: 0, oldest_time: nil}} = Ringbus.info(name)

    [channel] = for c <- Ringbus.Metrics.snapshot().channels, c.name == name, do: c
    assert channel.info.expired == 3
  end

  test "a sweep expires at most :messages of each channel; the rest at the next ones" do
    suspended(fn ->
      name = channel()
      push_aged([name], ~w(a b c d e))

      assert figures(name).expired == 0
      sweep_round(2)
      assert %{expired: 2, len: 3} = figures(name)
      sweep_round(2)
      assert %{expired: 4, len: 1} = figures(name)
      sweep_round(2)
      assert %{expired: 5, len: 0, bytes: 0} = figures(name)
    end)
  end

  test "a sweep looks at :channels channels at most; a round goes on from where the last stopped" do
    suspended(fn ->
      names = for _ <- 1..3, do: channel()
      push_aged(names, ~w(a b))

      round = Sweep.sweep(nil, 1, 1_000)
      assert Enum.count(names, &(figures(&1).expired > 0)) <= 1

      finish(round)
      assert Enum.all?(names, &(figures(&1).expired == 2))
    end)
  end

  test "a channel with no max_age is left alone" do
    suspended(fn ->
      plain = channel(max_age: nil)
      {:ok, _} = Ringbus.push_many(plain, ~w(a b))
      sweep_round(1_000)
      assert %{expired: 0, len: 2} = figures(plain)
    end)
  end

  test "the node's sweep runs with the defaults Ringbus documents" do
    assert %{opts: %{interval: 1_000, channels: 100, messages: 1_000}} = :sys.get_state(Sweep)
  end

  test "bad options are refused" do
    assert_raise ArgumentError, ~r/expected :interval to be a positive integer, got: 0/, fn ->
      Sweep.init(interval: 0)
    end

    assert_raise ArgumentError, ~r/unknown keys \[:often\]/, fn -> Sweep.init(often: 1) end
  end

  # One whole round, one channel each sweep, `messages` each.
  defp sweep_round(messages), do: finish(Sweep.sweep(nil, 1, messages), messages)

  defp finish(round, messages \\ 1_000)
  defp finish(nil, _messages), do: :ok
  defp finish(round, messages), do: finish(Sweep.sweep(round, 1, messages), messages)
end
