defmodule Ringbus.Channel.ExpiryTest do
  # `max_age:` retention: messages older than it leave the channel,
  # counted `expired`, so that pushed == pulled + overwritten + expired +
  # len; a push, a read, len and info each look at the oldest message's
  # time first; readers, subscribers and groups count what expired before
  # they got it as lost.
  use ExUnit.Case, async: true

  @age 300

  defp channel(opts) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, [max_age: @age] ++ opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  defp info(name) do
    {:ok, info} = Ringbus.info(name)
    info
  end

  defp balanced?(i), do: i.pushed == i.pulled + i.overwritten + i.expired + i.len

  # Waits until every message pushed so far is older than max_age, without
  # looking at the channel (each look would expire what it finds): on the
  # monotonic clock, which expiry reads, as the system clock may be set
  # meanwhile.
  defp age_past(_name), do: Process.sleep(@age + 25)

  for opts <- [
        [capacity: 100],
        [capacity: 100, overflow: :reject],
        [capacity: 100, max_bytes: 10_000]
      ] do
    test "what is older than max_age leaves, counted expired (#{inspect(opts)})" do
      name = channel(unquote(opts))
      {:ok, 0} = Ringbus.push_many(name, ~w(a b c d))
      {:ok, 4} = Ringbus.push(name, "e")
      {:ok, 0, "a"} = Ringbus.pull(name)
      age_past(name)

      assert %{len: 0, expired: 4, pulled: 1, overwritten: 0, bytes: 0, first_seq: 5} =
               i = info(name)

      assert balanced?(i)
      assert i.oldest_time == nil
      # A read from before them counts them lost.
      assert Ringbus.read(name, 0, 10) == {:ok, [], 5}

      {:ok, 5} = Ringbus.push(name, "f")
      assert %{len: 1, expired: 4, pushed: 6} = i = info(name)
      assert balanced?(i)
    end
  end

  test "a push into a full reject channel first lets what expired go" do
    name = channel(capacity: 3, overflow: :reject)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
    assert Ringbus.push(name, "late") == {:error, :full}
    age_past(name)
    # The push itself looks at the oldest message, with no other call between.
    assert Ringbus.push(name, "d") == {:ok, 3}
    assert %{len: 1, expired: 3, rejected: 1} = i = info(name)
    assert balanced?(i)
  end

  test "only what is older goes: one look when the oldest is young" do
    name = channel(capacity: 1_000)
    {:ok, _} = Ringbus.push_many(name, ~w(old1 old2))
    age_past(name)
    {:ok, 2} = Ringbus.push(name, "young")
    assert {:ok, [{2, "young"}], 2} = Ringbus.read(name, 0, 10)
    assert %{len: 1, expired: 2} = info(name)
  end

  test "a seq given up on at the tail goes with the next message, and stays counted skipped" do
    name = channel(capacity: 100)
    ch = Ringbus.Test.Internals.channel!(name)
    {:ok, 0} = Ringbus.Channel.Ring.reserve(ch, 1)
    assert Ringbus.Channel.Ring.skip(ch, 0)
    {:ok, 1} = Ringbus.push_many(name, ~w(a b c))
    age_past(name)

    assert %{len: 0, expired: 3, skipped: 1, pushed: 3, first_seq: 4} = i = info(name)
    assert balanced?(i)
  end

  test "a subscriber and a group count what expired before they got it as lost" do
    name = channel(capacity: 100)
    :ok = Ringbus.Groups.create(name, "g", from: :earliest)
    {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
    age_past(name)
    {:ok, sub} = Ringbus.subscribe(name, from: 0)
    {:ok, 3} = Ringbus.push(name, "d")

    # What expired before it read them: a batch of none, lost 3.
    assert_receive {:ringbus, ^sub, [], 3}, 5_000
    assert_receive {:ringbus, ^sub, [{3, "d"}], 0}, 5_000
    assert {:ok, [{3, "d", 1}]} = Ringbus.Groups.fetch(name, "g", "c", 10)
    assert {:ok, [%{lost: 3}]} = Ringbus.Groups.info(name)
  end

  test "expiry under concurrent producers and pullers keeps the counts exact" do
    name = channel(capacity: 50_000)
    deadline = System.monotonic_time(:millisecond) + 2 * @age

    tasks =
      for p <- 1..4 do
        Task.async(fn ->
          Enum.reduce_while(1..20_000, 0, fn i, n ->
            cond do
              System.monotonic_time(:millisecond) > deadline ->
                {:halt, n}

              rem(i + p, 5) == 0 ->
                {:ok, _} = Ringbus.push_many(name, ["x", "y"])
                {:cont, n + 2}

              rem(i + p, 7) == 0 ->
                Ringbus.pull(name)
                {:cont, n}

              true ->
                {:ok, _} = Ringbus.push(name, "m")
                {:cont, n + 1}
            end
          end)
        end)
      end

    pushed = tasks |> Task.await_many(30_000) |> Enum.sum()
    age_past(name)
    assert %{len: 0, pushed: ^pushed} = i = info(name)
    assert i.expired > 0
    assert balanced?(i)
    assert i.bytes == 0
  end

  test "max_age is checked" do
    assert_raise ArgumentError, ~r/:max_age to be a positive integer/, fn ->
      Ringbus.create({__MODULE__, :bad}, capacity: 1, max_age: 0)
    end
  end
end
