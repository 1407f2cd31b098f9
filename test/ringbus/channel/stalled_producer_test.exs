defmodule Ringbus.Channel.StalledProducerTest do
  # A producer can stall between reserving a seq and storing it. These tests
  # play such a producer with `Ring.reserve/2` now and `Ring.commit/3` later,
  # and check that readers, laps and the late producer agree on every count.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.Ring

  import Ringbus.Test.Eventually

  # A wait for a stalled producer long enough that a test would time out if a
  # pull waited where it should not.
  @forever 600_000

  defp channel(opts), do: Ringbus.Test.Internals.temp_channel!(opts)

  # A channel whose seq 0 a producer has reserved and not stored yet.
  defp stalled_channel(opts) do
    ch = channel(opts)
    {:ok, 0} = Ring.reserve(ch, 1)
    ch
  end

  # Messages stored alone and marks.
  defp integer_keys(ch) do
    rows = [{:"$1", :_}, {:"$1", :_, :_, :_}]
    :ets.select(ch.table, for(row <- rows, do: {row, [is_integer: :"$1"], [:"$1"]}))
  end

  defp balanced?(info), do: info.pushed == info.pulled + info.overwritten + info.len

  # The late message, pushed again under `seq`, is pulled; its first seq stays
  # skipped, once; nothing is left behind.
  defp assert_pulled_once_after_a_skip(ch, seq) do
    assert Ring.pull(ch, @forever) == {:ok, seq, "late"}
    assert %{pushed: 1, pulled: 1, skipped: 1, len: 0} = info = Ring.info(ch)
    assert balanced?(info)
    assert integer_keys(ch) == []
  end

  test "a producer that finds its seq skipped by a pull pushes again" do
    ch = stalled_channel(capacity: 10)
    assert Ring.pull(ch, 0) == :empty
    assert Ring.info(ch).skipped == 1

    assert Ring.commit(ch, 0, "late") == {:ok, 1}
    assert_pulled_once_after_a_skip(ch, 1)
  end

  test "a skip the ring laps before its producer comes back counts as pushed and overwritten" do
    ch = stalled_channel(capacity: 2)
    assert Ring.pull(ch, 0) == :empty
    assert Ring.info(ch).skipped == 1

    # Seqs 1..3 lap seq 0 and take its mark away.
    for p <- ~w(a b c), do: {:ok, _} = Ring.push(ch, p)
    assert Ring.info(ch).skipped == 0

    # The producer's insert now succeeds on a lapped seq: what it reports
    # pushed is counted pushed, then overwritten.
    assert Ring.commit(ch, 0, "late") == {:ok, 0}
    assert %{pushed: 4, skipped: 0, overwritten: 2, len: 2} = info = Ring.info(ch)
    assert balanced?(info)
    assert integer_keys(ch) == [2, 3]
  end

  test "a subscription's skip is taken over by the pull that claims the seq, counted once" do
    ch = stalled_channel(capacity: 10)
    assert Ring.skip(ch, 0)
    assert Ring.info(ch).skipped == 1

    # The subscription waited already: the pull gives the seq up at once.
    assert Ring.pull(ch, @forever) == :empty
    assert Ring.info(ch).skipped == 1

    assert Ring.commit(ch, 0, "late") == {:ok, 1}
    assert_pulled_once_after_a_skip(ch, 1)
  end

  test "a producer back before any pull leaves a mark, so the pull neither waits nor counts it again" do
    ch = stalled_channel(capacity: 10)
    assert Ring.skip(ch, 0)
    assert Ring.commit(ch, 0, "late") == {:ok, 1}

    assert_pulled_once_after_a_skip(ch, 1)
  end

  test "a subscription does not skip a seq a pull has claimed; the pull gets the late message" do
    ch = stalled_channel(capacity: 10)
    puller = Task.async(fn -> Ring.pull(ch, @forever) end)
    assert eventually(fn -> Ring.first_seq(ch) == 1 end)

    refute Ring.skip(ch, 0)
    assert Ring.commit(ch, 0, "late") == {:ok, 0}
    assert Task.await(puller) == {:ok, 0, "late"}
    assert %{pushed: 1, pulled: 1, skipped: 0} = Ring.info(ch)
    assert integer_keys(ch) == []
  end

  test "under reject, a batch with a skipped seq is pushed again whole, in order" do
    ch = channel(capacity: 10, overflow: :reject)
    {:ok, 0} = Ring.reserve(ch, 3)
    assert Ring.skip(ch, 1)

    assert Ring.commit_batch(ch, 0, ~w(a b c), 3, 3) == {:ok, 3}
    assert Ring.info(ch).skipped == 3
    for {seq, p} <- [{3, "a"}, {4, "b"}, {5, "c"}], do: assert(Ring.pull(ch, 0) == {:ok, seq, p})
    assert Ring.pull(ch, 0) == :empty
    assert %{pushed: 3, pulled: 3, skipped: 3, len: 0} = info = Ring.info(ch)
    assert balanced?(info)
    assert integer_keys(ch) == []
  end

  test "a producer that never comes back keeps the books balanced" do
    for overflow <- [:drop_oldest, :reject] do
      ch = channel(capacity: 2, overflow: overflow)
      {:ok, 0} = Ring.reserve(ch, 1)
      assert Ring.pull(ch, 0) == :empty
      for p <- ~w(a b), do: {:ok, _} = Ring.push(ch, p)
      assert balanced?(Ring.info(ch))
    end
  end

  # Random interleavings of normal pushes, stalled producers, pulls that give
  # up at once, subscription skips and reads. Once every stalled producer has
  # come back and the ring is drained, every message a push reported stored
  # must be counted pushed, and pulled at most once under the seq it was
  # reported with; nothing may stay behind in the table.
  for overflow <- [:drop_oldest, :reject] do
    test "random interleavings with stalled producers keep every count (#{overflow})" do
      overflow = unquote(overflow)

      property =
        :proper.forall(scenario(), fn {capacity, commands} ->
          ch = channel(capacity: capacity, overflow: overflow)

          # This PropEr reports an exception through a call OTP 25 lacks.
          try do
            run(ch, commands)
          catch
            kind, reason ->
              IO.puts("\n" <> Exception.format(kind, reason, __STACKTRACE__))
              false
          end
        end)

      assert :proper.quickcheck(property, [{:numtests, 500}, {:to_file, :user}]) == true
    end
  end

  defp scenario do
    command =
      :proper_types.oneof([
        {:push, :proper_types.integer(1, 3)},
        {:reserve, :proper_types.integer(1, 3)},
        {:reserve, 1},
        {:commit, :proper_types.integer(0, 5)},
        :pull,
        :pull,
        {:skip, :proper_types.integer(0, 40)},
        {:read, :proper_types.integer(0, 40)}
      ])

    :proper_types.tuple([:proper_types.integer(1, 6), :proper_types.list(command)])
  end

  # State: the next payload number, the stalled producers, what was reported
  # stored ({payload => seq}) and what was pulled.
  defp run(ch, commands) do
    state = %{next: 0, stalled: [], stored: %{}, pulled: []}
    state = Enum.reduce(commands, state, &step(ch, &1, &2))
    state = Enum.reduce(state.stalled, %{state | stalled: []}, &commit(ch, &1, &2))
    state = drain(ch, state)
    check(ch, state)
  end

  defp step(ch, {:push, n}, state) do
    {payloads, state} = payloads(state, n)
    stored(state, payloads, Ring.push_measured(ch, payloads, n, n * 4))
  end

  defp step(ch, {:reserve, n}, state) do
    {payloads, state} = payloads(state, n)

    case Ring.reserve(ch, n) do
      {:ok, first} -> %{state | stalled: state.stalled ++ [{first, payloads}]}
      {:error, :full} -> state
    end
  end

  defp step(_ch, {:commit, _}, %{stalled: []} = state), do: state

  defp step(ch, {:commit, i}, %{stalled: stalled} = state) do
    i = rem(i, length(stalled))
    commit(ch, Enum.at(stalled, i), %{state | stalled: List.delete_at(stalled, i)})
  end

  defp step(ch, :pull, state) do
    case Ring.pull(ch, 0) do
      {:ok, seq, payload} -> %{state | pulled: [{payload, seq} | state.pulled]}
      :empty -> state
    end
  end

  defp step(ch, {:skip, i}, state) do
    head = Ring.next_seq(ch)
    if head > 0, do: Ring.skip(ch, rem(i, head))
    state
  end

  # What a read returns must be what was reported stored under those seqs.
  defp step(ch, {:read, from}, state) do
    {items, _n, _lost, _next} = Ring.read(ch, from, 8)
    by_seq = Map.new(state.stored, fn {p, seq} -> {seq, p} end)
    for {seq, p} <- items, Map.fetch(by_seq, seq) != {:ok, p}, do: throw({:read_mismatch, seq, p})
    state
  end

  defp commit(ch, {first, [payload]}, state),
    do: stored(state, [payload], Ring.commit(ch, first, payload))

  defp commit(ch, {first, payloads}, state) do
    count = length(payloads)
    stored(state, payloads, Ring.commit_batch(ch, first, payloads, count, count * 4))
  end

  defp payloads(state, n) do
    {Enum.map(state.next..(state.next + n - 1), &<<&1::32>>), %{state | next: state.next + n}}
  end

  defp stored(state, _payloads, {:error, :full}), do: state

  defp stored(state, payloads, {:ok, first}) do
    stored = payloads |> Enum.with_index(first) |> Map.new() |> Map.merge(state.stored)
    %{state | stored: stored}
  end

  defp drain(ch, state) do
    case step(ch, :pull, state) do
      ^state -> state
      state -> drain(ch, state)
    end
  end

  defp check(ch, state) do
    info = Ring.info(ch)
    pulled_payloads = Enum.map(state.pulled, &elem(&1, 0))

    checks = [
      pushed: info.pushed == map_size(state.stored),
      balanced: balanced?(info),
      empty: info.len == 0,
      pulled_count: info.pulled == length(state.pulled),
      pulled_once: length(pulled_payloads) == length(Enum.uniq(pulled_payloads)),
      pulled_as_stored: Enum.all?(state.pulled, fn {p, seq} -> state.stored[p] == seq end),
      nothing_left: integer_keys(ch) == [],
      bytes_held: info.bytes == table_bytes(ch),
      bytes_pushed: info.bytes_pushed == 4 * map_size(state.stored),
      none_dropped_under_reject: ch.overflow == :drop_oldest or info.overwritten == 0
    ]

    case for {name, false} <- checks, do: name do
      [] ->
        true

      failed ->
        IO.puts("\nfailed: #{inspect(failed)}\ninfo: #{inspect(info)}\nstate: #{inspect(state)}")
        false
    end
  end

  # The payload bytes the table holds: messages stored alone, and chunks.
  defp table_bytes(ch) do
    Enum.reduce(:ets.tab2list(ch.table), 0, fn
      {seq, payload, _at, _id}, sum when is_integer(seq) and is_binary(payload) ->
        sum + byte_size(payload)

      chunk, sum when is_float(elem(chunk, 0)) and tuple_size(chunk) > 3 ->
        sum + elem(chunk, 2)

      _mark_or_reservation, sum ->
        sum
    end)
  end
end
