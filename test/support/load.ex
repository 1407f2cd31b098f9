defmodule Ringbus.Test.Load do
  @moduledoc """
  Producers, pullers, readers and subscribers for concurrency tests. Payloads
  are `<<producer::8, index::32>>` so each delivery can be traced to its push.
  Every loop ends by itself: producers after their count, the others when
  told the final seq with `stop/2`.
  """

  @timeout 60_000

  @doc """
  Runs `producers` processes that push `count` messages each and waits for
  them. With `batch: n` they push batches of 1 to n messages with `push_many`.
  """
  def run_producers(name, producers, count, opts \\ []) do
    batch = Keyword.get(opts, :batch, 1)

    results =
      1..producers
      |> Enum.map(fn p -> Task.async(fn -> produce(name, p, count, batch) end) end)
      |> Task.await_many(@timeout)

    %{
      ok: results |> Enum.map(&map_size(&1.by_seq)) |> Enum.sum(),
      full: results |> Enum.map(& &1.full) |> Enum.sum(),
      seqs_by_producer: Map.new(results, &{&1.producer, &1.seqs}),
      by_seq: Enum.reduce(results, %{}, &Map.merge(&2, &1.by_seq))
    }
  end

  defp produce(name, p, count, 1) do
    Enum.reduce(1..count, %{producer: p, seqs: [], by_seq: %{}, full: 0}, fn i, acc ->
      payload = <<p::8, i::32>>

      case Ringbus.push(name, payload) do
        {:ok, seq} -> %{acc | seqs: [seq | acc.seqs], by_seq: Map.put(acc.by_seq, seq, payload)}
        {:error, :full} -> %{acc | full: acc.full + 1}
      end
    end)
    |> Map.update!(:seqs, &Enum.reverse/1)
  end

  defp produce(name, p, count, batch) do
    1..count
    |> Enum.map(&<<p::8, &1::32>>)
    |> chunk_randomly(batch, [])
    |> Enum.reduce(%{producer: p, seqs: [], by_seq: %{}, full: 0}, fn payloads, acc ->
      case Ringbus.push_many(name, payloads) do
        {:ok, first} ->
          numbered = Enum.with_index(payloads, first)
          seqs = Enum.reduce(numbered, acc.seqs, fn {_, seq}, seqs -> [seq | seqs] end)
          by_seq = Enum.reduce(numbered, acc.by_seq, fn {pl, seq}, m -> Map.put(m, seq, pl) end)
          %{acc | seqs: seqs, by_seq: by_seq}

        {:error, :full} ->
          %{acc | full: acc.full + length(payloads)}
      end
    end)
    |> Map.update!(:seqs, &Enum.reverse/1)
  end

  defp chunk_randomly([], _max, acc), do: Enum.reverse(acc)

  defp chunk_randomly(items, max, acc) do
    {chunk, rest} = Enum.split(items, :rand.uniform(max))
    chunk_randomly(rest, max, [chunk | acc])
  end

  @doc "Starts a process that pulls until stopped and the channel is empty."
  def start_puller(name), do: spawn_link(fn -> pull_loop(name, [], nil) end)

  defp pull_loop(name, acc, stop) do
    case Ringbus.pull(name) do
      {:ok, seq, payload} ->
        pull_loop(name, [{seq, payload} | acc], stop)

      :empty ->
        case stop || check_stop() do
          {_target, from} -> send(from, {:stopped, self(), Enum.reverse(acc)})
          nil -> :erlang.yield() && pull_loop(name, acc, nil)
        end
    end
  end

  defp check_stop do
    receive do
      {:stop, target, from} -> {target, from}
    after
      0 -> nil
    end
  end

  @doc """
  Starts a process that reads the channel from seq 0 to the end. When stopped
  it returns `{seen, lost, cursor}`, and raises if a batch was not contiguous.
  """
  def start_reader(name), do: spawn_link(fn -> read_loop(name, 0, %{}, 0, nil) end)

  defp read_loop(name, cursor, seen, lost, stop) do
    stop = stop || check_stop()

    case stop do
      {target, from} when cursor >= target ->
        send(from, {:stopped, self(), {seen, lost, cursor}})

      _ ->
        {:ok, items, l} = Ringbus.read(name, cursor, 100)
        {cursor, seen} = take_batch(items, cursor + l, seen)
        if items == [] and l == 0, do: :erlang.yield()
        read_loop(name, cursor, seen, lost + l, stop)
    end
  end

  @doc "Starts a subscriber from seq 0 that acks every batch it gets."
  def start_subscriber(name, opts) do
    parent = self()

    pid =
      spawn_link(fn ->
        {:ok, sub} = Ringbus.subscribe(name, Keyword.put(opts, :from, 0))
        send(parent, {:subscribed, self()})
        subscribe_loop(sub, 0, %{}, 0, nil)
      end)

    receive do
      {:subscribed, ^pid} -> pid
    after
      @timeout -> raise "subscriber did not start"
    end
  end

  defp subscribe_loop(_sub, cursor, seen, lost, {target, from}) when cursor >= target do
    send(from, {:stopped, self(), {seen, lost, cursor}})
  end

  defp subscribe_loop(sub, cursor, seen, lost, stop) do
    receive do
      {:ringbus, ^sub, items, l} ->
        {cursor, seen} = take_batch(items, cursor + l, seen)
        if items != [], do: Ringbus.ack(sub, length(items))
        subscribe_loop(sub, cursor, seen, lost + l, stop)

      {:stop, target, from} ->
        subscribe_loop(sub, cursor, seen, lost, {target, from})
    end
  end

  # A batch must be contiguous, and start no earlier than right after what
  # was seen plus what was lost. It may start later: a read passes over seqs
  # skipped for a stalled producer, which held no message (callers bound
  # those gaps with the channel's `skipped` count).
  defp take_batch([], expected, seen), do: {expected, seen}

  defp take_batch([{seq, _} | _] = items, expected, seen) when seq > expected,
    do: take_batch(items, seq, seen)

  defp take_batch([{seq, payload} | rest], expected, seen) do
    if seq != expected, do: raise("batch not contiguous: got seq #{seq}, expected #{expected}")
    take_batch(rest, seq + 1, Map.put(seen, seq, payload))
  end

  @doc "Tells a puller, reader or subscriber the final seq and waits for its result."
  def stop(pid, target) do
    send(pid, {:stop, target, self()})

    receive do
      {:stopped, ^pid, result} -> result
    after
      @timeout -> raise "#{inspect(pid)} did not stop"
    end
  end
end
