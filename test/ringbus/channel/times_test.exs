defmodule Ringbus.Channel.TimesTest do
  # Every message carries the time it was stored: times never decrease in
  # seq order under concurrent producers; a read, a subscription and a
  # group start at the first message at or after a time, found by binary
  # search; info gives the oldest and newest times.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.{Ring, Times}
  alias Ringbus.Test.Internals

  defp channel(opts) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  # Each kind of row: single messages, batches as chunks (drop-oldest),
  # batches row by row (reject; drop-oldest under max_bytes).
  @kinds [
    [capacity: 200_000],
    [capacity: 200_000, overflow: :reject],
    [capacity: 200_000, max_bytes: 100_000_000]
  ]

  for opts <- @kinds do
    test "times never decrease in seq order under concurrent producers (#{inspect(opts)})" do
      name = channel(unquote(opts))
      producers = 2 * System.schedulers_online() + 2

      1..producers
      |> Enum.map(fn p ->
        Task.async(fn ->
          # Singles and batches of 2 to 6, interleaved, a bounded count each.
          for i <- 1..1_500 do
            if rem(i + p, 3) == 0,
              do: {:ok, _} = Ringbus.push_many(name, List.duplicate("b#{p}", rem(i, 5) + 2)),
              else: {:ok, _} = Ringbus.push(name, "s#{p}")
          end
        end)
      end)
      |> Task.await_many(60_000)

      {:ok, %{len: len, next_seq: len}} = Ringbus.info(name)
      # In µs, as stored: one run per push or batch, newest first.
      {_items, ^len, 0, ^len, runs} = Ring.read_timed(Internals.channel!(name), 0, len)
      ats = runs |> Enum.reverse() |> Enum.map(&elem(&1, 0))
      assert ats == Enum.sort(ats)

      {:ok, timed, 0} = Ringbus.read(name, 0, len, times: true)
      ms = Enum.map(timed, &elem(&1, 2))
      assert ms == Enum.sort(ms)
      assert Enum.map(timed, &elem(&1, 0)) == Enum.to_list(0..(len - 1))
    end

    test "a read from a time starts at the first message at or after it (#{inspect(opts)})" do
      name = channel(unquote(opts))
      before = System.system_time(:millisecond)
      pushes_over_ms(name, 4)
      after_ = System.system_time(:millisecond)
      {:ok, %{len: len}} = Ringbus.info(name)
      {:ok, timed, 0} = Ringbus.read(name, 0, len, times: true)
      assert Enum.all?(timed, fn {_, _, t} -> t in before..after_ end)

      times = timed |> Enum.map(&elem(&1, 2)) |> Enum.uniq()
      assert length(times) >= 4

      for t <- Enum.flat_map(times, &[&1 - 1, &1, &1 + 1]) do
        expected = Enum.find_value(timed, len, fn {seq, _, at} -> if at >= t, do: seq end)
        assert Times.seek(Internals.channel!(name), t) == expected

        case Ringbus.read(name, {:time, t}, 2) do
          {:ok, [{^expected, _} | _], 0} -> :ok
          {:ok, [], 0} -> assert expected == len
        end
      end
    end
  end

  test "a seq with no time (a producer stalled, then skipped) is stepped over" do
    name = channel(capacity: 200_000)
    ch = Internals.channel!(name)
    pushes_over_ms(name, 2)
    {:ok, stalled} = Ring.reserve(ch, 1)
    assert Ring.skip(ch, stalled)
    pushes_over_ms(name, 2)
    {:ok, timed, 0} = Ringbus.read(name, 0, 200_000, times: true)
    refute Enum.any?(timed, &(elem(&1, 0) == stalled))

    for {seq, _, t} <- timed do
      first = Enum.find_value(timed, fn {s, _, at} -> if at >= t, do: s end)
      assert Times.seek(ch, t) == first, "seek(#{t}) for seq #{seq}"
    end
  end

  test "info gives the oldest and newest times, nil when empty" do
    name = channel(capacity: 3)
    assert {:ok, %{oldest_time: nil, newest_time: nil}} = Ringbus.info(name)
    pushes_over_ms(name, 3)
    {:ok, %{first_seq: first, next_seq: next} = info} = Ringbus.info(name)
    {:ok, [{^first, _, oldest} | _] = timed, _} = Ringbus.read(name, first, 3, times: true)
    {newest_seq, _, newest} = List.last(timed)
    assert newest_seq == next - 1
    assert %{oldest_time: ^oldest, newest_time: ^newest} = info

    for _ <- 1..3, do: {:ok, _, _} = Ringbus.pull(name)
    assert {:ok, %{oldest_time: nil, newest_time: nil}} = Ringbus.info(name)
  end

  test "a subscription starts at a time and gets each message's time" do
    name = channel(capacity: 10_000)
    pushes_over_ms(name, 3)
    {:ok, %{len: len}} = Ringbus.info(name)
    {:ok, timed, 0} = Ringbus.read(name, 0, len, times: true)
    {_, _, t} = Enum.at(timed, div(len, 2))
    expected = Enum.drop_while(timed, fn {_, _, at} -> at < t end)

    {:ok, sub} = Ringbus.subscribe(name, from: {:time, t}, times: true, max_credit: 100_000)
    assert receive_all(sub, length(expected)) == expected
  end

  test "a group starts at a time" do
    name = channel(capacity: 10_000)
    pushes_over_ms(name, 3)
    {:ok, %{len: len}} = Ringbus.info(name)
    {:ok, timed, 0} = Ringbus.read(name, 0, len, times: true)
    {_, _, t} = List.last(timed)
    {first, payload, _} = Enum.find(timed, fn {_, _, at} -> at >= t end)

    :ok = Ringbus.Groups.create(name, "g", from: {:time, t})
    assert {:ok, [{^first, ^payload, 1} | _]} = Ringbus.Groups.fetch(name, "g", "c", 1)
  end

  for {kind, opts} <- [memory: [], replicated: [replicas: 1]] do
    test "a group fetch with times: true gives each message its time (#{kind})" do
      name = "times-test-fetch-#{System.unique_integer([:positive])}"
      :ok = Ringbus.create(name, [capacity: 100] ++ unquote(opts))
      on_exit(fn -> Ringbus.delete(name) end)
      :ok = Ringbus.Groups.create(name, "g", from: :earliest)
      {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
      {:ok, timed, 0} = Ringbus.read(name, 0, 3, times: true)
      expected = for {seq, payload, ms} <- timed, do: {seq, payload, 1, ms}

      assert Ringbus.Groups.fetch(name, "g", "c", 10, times: true) == {:ok, expected}
      # Delivered again: the same times, one more delivery.
      assert {:ok, 3} = Ringbus.Groups.nack(name, "g", [0, 1, 2])

      assert Ringbus.Groups.fetch(name, "g", "c", 10, times: true) ==
               {:ok, for({seq, payload, 1, ms} <- expected, do: {seq, payload, 2, ms})}

      # One that waits gets its time too.
      task =
        Task.async(fn -> Ringbus.Groups.fetch(name, "g", "w", 1, timeout: 5_000, times: true) end)

      {:ok, 3} = Ringbus.push(name, "d")
      assert {:ok, [{3, "d", 1, ms}]} = Task.await(task)
      assert {:ok, [{3, "d", ^ms}], 0} = Ringbus.read(name, 3, 1, times: true)
    end
  end

  test "bad times are refused" do
    name = channel(capacity: 10)

    assert_raise ArgumentError, ~r/\{:time, ms\}/, fn -> Ringbus.read(name, {:time, -1}, 1) end
    assert_raise ArgumentError, ~r/:from/, fn -> Ringbus.subscribe(name, from: {:time, :x}) end
    assert_raise ArgumentError, ~r/:times/, fn -> Ringbus.read(name, 0, 1, times: 1) end

    assert_raise ArgumentError, ~r/:times/, fn ->
      Ringbus.Groups.fetch(name, "g", "c", 1, times: :yes)
    end

    assert_raise ArgumentError, ~r/:from/, fn ->
      Ringbus.Groups.create(name, "g", from: {:time, -5})
    end
  end

  # Pushes singles and batches until the newest message has had `ms`
  # distinct times (bounded: a few ms of wall time, at most 5 s).
  defp pushes_over_ms(name, ms) do
    deadline = System.monotonic_time(:millisecond) + 5_000

    Enum.reduce_while(Stream.iterate(0, &(&1 + 1)), MapSet.new(), fn i, seen ->
      if rem(i, 4) == 0,
        do: {:ok, _} = Ringbus.push_many(name, ["x#{i}", "y#{i}"]),
        else: {:ok, _} = Ringbus.push(name, "m#{i}")

      {:ok, %{newest_time: t}} = Ringbus.info(name)
      seen = MapSet.put(seen, t)

      if MapSet.size(seen) >= ms or System.monotonic_time(:millisecond) > deadline,
        do: {:halt, seen},
        else: {:cont, seen}
    end)
  end

  defp receive_all(_sub, 0), do: []

  defp receive_all(sub, n) do
    receive do
      {:ringbus, ^sub, messages, 0} -> messages ++ receive_all(sub, n - length(messages))
    after
      5_000 -> flunk("#{n} messages not delivered")
    end
  end
end
