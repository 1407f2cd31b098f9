defmodule Ringbus.GroupsPropertyTest do
  # A consumer group (`Ringbus.Groups`) against a model, under random
  # pushes, fetches, acks, nacks, claims and crashes of consumer processes
  # (PropEr): each consumer is a process of its own, so a crash is its
  # exit, after which its pending messages are due. After every step:
  #
  #   * nothing acked is delivered again, and a redelivery is of a message
  #     due (nacked, or its consumer crashed);
  #   * delivery counts go up by one with each delivery, never down;
  #   * new messages come in seq order, within max_pending, after what
  #     the ring lost;
  #   * info/1's counts agree with the model, and a message leaves the
  #     group only acked, dead or lost: acked + dead + lost + pending + lag
  #     == pushed since the group's start.
  #
  # And at the end, once every consumer has crashed, a drain delivers
  # again every message that was not acked (or counts it dead or lost).
  # ack_wait is long enough never to pass during a run: the time-driven
  # paths are tested in groups_test.exs.
  use ExUnit.Case, async: true

  import Ringbus.Test.Eventually

  alias Ringbus.Groups
  alias Ringbus.Test.Property

  @numtests 60
  @consumers ~w(a b c)

  test "a group agrees with its model, and loses nothing it does not count" do
    property =
      :proper.forall(scenario(), fn {capacity, max_pending, max_deliver, commands} ->
        name = "groups-prop-#{System.unique_integer([:positive])}"

        Property.on_channel(name, [capacity: capacity], fn name ->
          opts = [from: :earliest, max_pending: max_pending, max_deliver: max_deliver]
          :ok = Groups.create(name, "g", opts)
          model = new(name, capacity, max_pending, max_deliver)
          model = Enum.reduce(commands, model, &step(&2, &1))
          drain(model)
          true
        end)
      end)

    assert Property.check(property, @numtests) == true
  end

  ## Generators

  defp scenario do
    {:proper_types.integer(3, 10), :proper_types.integer(1, 6),
     :proper_types.oneof([1, 2, 3, :infinity]), :proper_types.list(command())}
  end

  defp command do
    consumer = :proper_types.oneof(@consumers)
    seqs = :proper_types.list(:proper_types.integer(0, 24))

    :proper_types.frequency([
      {4, {:push, :proper_types.integer(1, 4)}},
      {6, {:fetch, consumer, :proper_types.integer(1, 4)}},
      {3, {:ack, seqs}},
      {3, {:nack, seqs}},
      {1, {:claim, consumer, seqs}},
      {2, {:crash, consumer}}
    ])
  end

  ## The model

  # `pending`: seq => {consumer, deliveries, due?}; `last`: the last new
  # seq delivered; `lost`: what the group counted lost; `workers`:
  # consumer => its process.
  defp new(name, capacity, max_pending, max_deliver) do
    %{
      name: name,
      capacity: capacity,
      max_pending: max_pending,
      max_deliver: max_deliver,
      next: 0,
      last: -1,
      pending: %{},
      acked: MapSet.new(),
      dead: 0,
      lost: 0,
      held: 0,
      redelivered: 0,
      workers: %{}
    }
  end

  defp first(m), do: max(m.next - m.capacity, 0)
  defp in_ring?(m, seq), do: seq >= first(m)
  defp dead?(m, n), do: m.max_deliver != :infinity and n >= m.max_deliver

  defp step(m, {:push, k}) do
    for i <- m.next..(m.next + k - 1), do: {:ok, ^i} = Ringbus.push(m.name, "m#{i}")
    check(%{m | next: m.next + k})
  end

  defp step(m, {:fetch, consumer, max}) do
    {m, {:ok, got}} = as(m, consumer, &Groups.fetch(&1, "g", consumer, max))
    m |> fetched(consumer, max, got) |> check()
  end

  defp step(m, {:ack, seqs}) do
    seqs = Enum.uniq(seqs)
    mine = Enum.filter(seqs, &Map.has_key?(m.pending, &1))
    assert Groups.ack(m.name, "g", seqs) == {:ok, length(mine)}
    acked = Enum.reduce(mine, m.acked, &MapSet.put(&2, &1))
    check(%{m | pending: Map.drop(m.pending, mine), acked: acked})
  end

  defp step(m, {:nack, seqs}) do
    seqs = Enum.uniq(seqs)
    mine = Enum.filter(seqs, &Map.has_key?(m.pending, &1))
    assert Groups.nack(m.name, "g", seqs) == {:ok, length(mine)}

    pending =
      Enum.reduce(mine, m.pending, fn s, p -> Map.update!(p, s, &put_elem(&1, 2, true)) end)

    check(%{m | pending: pending})
  end

  defp step(m, {:claim, consumer, seqs}) do
    seqs = Enum.uniq(seqs)
    {m, {:ok, got}} = as(m, consumer, &Groups.claim(&1, "g", consumer, seqs))

    {m, expected} =
      Enum.reduce(seqs, {m, []}, fn seq, {m, expected} ->
        case m.pending do
          %{^seq => {_, n, _}} ->
            if in_ring?(m, seq) do
              m = %{m | redelivered: m.redelivered + 1}
              m = put_in(m.pending[seq], {consumer, n + 1, false})
              {m, [{seq, "m#{seq}", n + 1} | expected]}
            else
              {%{m | pending: Map.delete(m.pending, seq), lost: m.lost + 1}, expected}
            end

          _ ->
            {m, expected}
        end
      end)

    assert got == Enum.reverse(expected)
    check(m)
  end

  defp step(m, {:crash, consumer}) do
    case Map.pop(m.workers, consumer) do
      {nil, _} ->
        m

      {pid, workers} ->
        ref = Process.monitor(pid)
        Process.exit(pid, :kill)
        assert_receive {:DOWN, ^ref, :process, ^pid, :killed}
        settled(m.name, consumer, pid)

        pending =
          Map.new(m.pending, fn
            {seq, {^consumer, n, _}} -> {seq, {consumer, n, true}}
            other -> other
          end)

        check(%{m | workers: workers, pending: pending})
    end
  end

  # The group's table owner has made the crashed consumer's entries due.
  defp settled(name, consumer, pid) do
    {:ok, c} = Ringbus.incarnation(name)
    key = {:consumer, c, "g", consumer}

    assert eventually(fn ->
             match?([], :ets.lookup(Ringbus.Group.Table.table(), key)) or
               elem(hd(:ets.lookup(Ringbus.Group.Table.table(), key)), 2) != pid
           end)

    _ = :sys.get_state(Ringbus.Group.TableOwner)
  end

  # What a fetch of up to `max` for `consumer` answered, against the model.
  defp fetched(m, consumer, max, got) do
    {again, new} = Enum.split_with(got, fn {seq, _, _} -> seq <= m.last end)

    due = for {seq, {_, n, true}} <- m.pending, in_ring?(m, seq), not dead?(m, n), do: seq
    assert length(again) == min(max, length(due))

    m =
      Enum.reduce(again, m, fn {seq, payload, n}, m ->
        assert seq in due, "#{seq} delivered again, and not due"
        refute MapSet.member?(m.acked, seq)
        {_, before, true} = m.pending[seq]
        assert {payload, n} == {"m#{seq}", before + 1}
        m = %{m | redelivered: m.redelivered + 1}
        put_in(m.pending[seq], {consumer, n, false})
      end)

    m = doomed(m)

    # New messages: from the first the ring holds after the last delivered.
    want = max - length(again)
    start = max(m.last + 1, first(m))
    granted = min(want, max(m.max_pending - map_size(m.pending), 0))
    count = min(granted, m.next - start)
    held = if want > 0 and granted < want and m.next > m.last + 1, do: 1, else: 0
    assert new == for(seq <- start..(start + count - 1)//1, do: {seq, "m#{seq}", 1})

    m =
      if granted > 0 and (count > 0 or start > m.last + 1),
        do: %{m | lost: m.lost + start - (m.last + 1), last: start + count - 1},
        else: m

    pending = for {seq, _, _} <- new, into: m.pending, do: {seq, {consumer, 1, false}}
    %{m | pending: pending, held: m.held + held}
  end

  # Due entries the ring lost, or delivered max_deliver times, leave the
  # group when a fetch comes to them: which did, the group's PEL says.
  defp doomed(m) do
    {:ok, rows} = Ringbus.run(m.name, {:group, {:pending, "g", 0, 1_000_000, 1_000, nil, 0}})
    held = MapSet.new(rows, &elem(&1, 0))

    Enum.reduce(m.pending, m, fn {seq, {_, n, due?}}, m ->
      cond do
        MapSet.member?(held, seq) ->
          m

        due? and not in_ring?(m, seq) ->
          %{m | pending: Map.delete(m.pending, seq), lost: m.lost + 1}

        due? and dead?(m, n) ->
          %{m | pending: Map.delete(m.pending, seq), dead: m.dead + 1}

        true ->
          flunk("#{seq} left the group unacked, not due")
      end
    end)
  end

  # info/1 agrees with the model, and counts every message pushed.
  defp check(m) do
    {:ok, [g]} = Groups.info(m.name)
    unread = max(first(m) - (m.last + 1), 0)
    lag = m.next - max(m.last + 1, first(m))

    assert %{
             acked: MapSet.size(m.acked),
             dead: m.dead,
             lost: m.lost + unread,
             pending: map_size(m.pending),
             lag: lag,
             held: m.held,
             redelivered: m.redelivered,
             delivered: m.last
           } ==
             Map.take(g, [:acked, :dead, :lost, :pending, :lag, :held, :redelivered, :delivered])

    assert g.acked + g.dead + g.lost + g.pending + g.lag == m.next

    {:ok, rows} = Ringbus.run(m.name, {:group, {:pending, "g", 0, 1_000_000, 1_000, nil, 0}})

    assert Enum.sort(for {seq, who, _idle, n} <- rows, do: {seq, who, n}) ==
             Enum.sort(for {seq, {who, n, _}} <- m.pending, do: {seq, who, n})

    m
  end

  # Every consumer crashes; a drain then fetches and acks until nothing is
  # left: every message not acked was delivered again, or counted.
  defp drain(m) do
    m = Enum.reduce(Map.keys(m.workers), m, &step(&2, {:crash, &1}))
    m = drain_all(m)
    {:ok, [g]} = Groups.info(m.name)
    assert %{pending: 0, lag: 0} = g
    assert g.acked + g.dead + g.lost == m.next
    Enum.each(Map.values(m.workers), &Process.exit(&1, :kill))
  end

  defp drain_all(m) do
    case step(m, {:fetch, "drain", 1_000}) do
      %{pending: pending} = m when map_size(pending) == 0 and m.last + 1 >= m.next ->
        m

      m ->
        m |> step({:ack, Map.keys(m.pending)}) |> drain_all()
    end
  end

  ## Consumers: one process each, which runs what it is given

  defp as(m, consumer, fun) do
    {m, pid} =
      case m.workers do
        %{^consumer => pid} ->
          {m, pid}

        _ ->
          pid = spawn(fn -> worker() end)
          {put_in(m.workers[consumer], pid), pid}
      end

    send(pid, {:run, self(), fn -> fun.(m.name) end})
    assert_receive {:ran, ^pid, result}, 5_000
    {m, result}
  end

  defp worker do
    receive do
      {:run, from, fun} ->
        send(from, {:ran, self(), fun.()})
        worker()
    end
  end
end
