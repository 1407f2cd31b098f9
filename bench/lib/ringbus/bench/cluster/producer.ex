defmodule Ringbus.Bench.Cluster.Producer do
  @moduledoc false
  # The parts of `mix ringbus.bench cluster` that run inside the bench's
  # nodes: the paced producer of each variant, the sinks the bare sends go
  # to, and the throughput loops. All times that cross nodes are
  # `System.os_time/1` (one clock on one machine); durations are monotonic.

  alias Ringbus.Bench.Stats

  # After a stall, a paced producer skips the calls it missed rather than
  # bursting them: the rate it shows is what it could do.
  @max_catch_up 20

  ## Sinks (the bare variants' receivers)

  @doc "Starts a sink that counts what it receives; returns its pid."
  @spec start_sink() :: pid()
  def start_sink, do: spawn(fn -> sink(0, nil, nil) end)

  defp sink(count, cont_at, first) do
    receive do
      {:bench, sent_at, _payload} ->
        first =
          if first == nil and cont_at != nil and sent_at >= cont_at,
            do: System.os_time(:microsecond),
            else: first

        sink(count + 1, cont_at, first)

      {:cont_at, at} ->
        sink(count, at, first)

      {:stats, from} ->
        send(from, {:sink, count, first})
        sink(count, cont_at, first)
    end
  end

  @doc """
  Tells a sink when the silence ended, so that it records when the first
  message sent after that arrives.
  """
  @spec mark_cont(pid(), integer()) :: :ok
  def mark_cont(sink, cont_at) do
    send(sink, {:cont_at, cont_at})
    :ok
  end

  @doc "A sink's count, and when (os_time µs) the first message sent after the silence arrived."
  @spec sink_stats(pid()) :: {non_neg_integer(), integer() | nil}
  def sink_stats(sink) do
    send(sink, {:stats, self()})

    receive do
      {:sink, count, first} -> {count, first}
    after
      10_000 -> {0, nil}
    end
  end

  ## The paced producer

  @doc """
  Runs one variant's producer from `schedule.start` to `schedule.finish`
  (os_time µs), calling `rate` times a second in all, in turn to the live
  target and the silent one. Returns its figures.
  """
  @spec run(atom(), %{live: term(), silent: term()}, map(), pos_integer(), pos_integer()) :: map()
  def run(variant, targets, schedule, rate, payload_bytes) do
    payload = :binary.copy("x", payload_bytes)
    wait_until(schedule.start)
    lateness = start_lateness(schedule.finish)
    span = schedule.finish - schedule.start
    slots = max(div(span * rate, 1_000_000), 1)
    samples = Stats.new_samples(slots)

    state = %{
      variant: variant,
      targets: {targets.live, targets.silent},
      schedule: schedule,
      interval: 1_000_000 / rate,
      payload: payload,
      samples: samples,
      sampled: 0,
      max_slots: slots,
      issued: 0,
      live_before: 0,
      live_silent: 0,
      results: %{},
      healed_at: nil,
      slowest: []
    }

    state = loop(state, System.monotonic_time(:microsecond), schedule.start)
    sorted = Stats.sorted(samples, state.sampled)

    %{
      calls: state.issued,
      live_before: state.live_before,
      live_silent: state.live_silent,
      max_block_us: Stats.percentile(sorted, 1.0),
      p99_block_us: Stats.percentile(sorted, 0.99),
      results: state.results,
      healed_at: state.healed_at,
      slowest: state.slowest,
      lateness_us: lateness_max(lateness)
    }
  end

  # A control for what the machine alone costs a process that waits: one
  # that sleeps 1 ms in a loop beside the producer, and how late it woke at
  # worst, over the timed part of the run.
  defp start_lateness(finish) do
    parent = self()
    spawn_link(fn -> lateness(parent, finish, 0) end)
  end

  defp lateness(parent, finish, worst) do
    if System.os_time(:microsecond) >= finish do
      receive do
        {:lateness, ^parent} -> send(parent, {:lateness, self(), worst})
      end
    else
      t0 = System.monotonic_time(:microsecond)

      receive do
      after
        1 -> :ok
      end

      late = System.monotonic_time(:microsecond) - t0 - 1_000
      lateness(parent, finish, max(worst, late))
    end
  end

  defp lateness_max(pid) do
    send(pid, {:lateness, self()})

    receive do
      {:lateness, ^pid, worst} -> worst
    after
      5_000 -> nil
    end
  end

  defp loop(state, t0, start) do
    now = System.os_time(:microsecond)

    cond do
      now >= state.schedule.finish ->
        state

      true ->
        due = trunc((now - start) / state.interval) + 1
        issued = max(state.issued, due - @max_catch_up)

        if issued < due do
          loop(call(%{state | issued: issued}, now), t0, start)
        else
          receive do
          after
            1 -> loop(state, t0, start)
          end
        end
    end
  end

  defp call(state, started) do
    {live, silent} = state.targets
    {which, target} = if rem(state.issued, 2) == 0, do: {:live, live}, else: {:silent, silent}
    t0 = System.monotonic_time(:microsecond)
    result = send_one(state.variant, target, started, state.payload)
    micros = System.monotonic_time(:microsecond) - t0
    accepted? = match?({:ok, _}, result) or result == :ok
    phase = phase(state.schedule, started)

    key = {which, outcome(result)}

    state = %{
      state
      | issued: state.issued + 1,
        results: Map.update(state.results, key, 1, &(&1 + 1))
    }

    state = state |> sample(phase, micros) |> slowest({micros, which, phase, outcome(result)})

    case {which, phase, accepted?} do
      {:live, :before, true} ->
        %{state | live_before: state.live_before + 1}

      {:live, :silent, true} ->
        %{state | live_silent: state.live_silent + 1}

      {:silent, :after, true} when state.healed_at == nil ->
        %{state | healed_at: System.os_time(:microsecond)}

      _ ->
        state
    end
  end

  # Calls from the moment the node is stopped on are the ones timed.
  defp sample(%{sampled: n, max_slots: max} = state, phase, micros)
       when phase != :before and n < max do
    :atomics.put(state.samples, n + 1, micros)
    %{state | sampled: n + 1}
  end

  defp sample(state, _phase, _micros), do: state

  # The five longest calls, to say what the longest were.
  defp slowest(%{slowest: slowest} = state, {micros, _, _, _} = call) do
    case slowest do
      [{shortest, _, _, _} | rest] when length(slowest) >= 5 and micros > shortest ->
        %{state | slowest: Enum.sort([call | rest])}

      _ when length(slowest) < 5 ->
        %{state | slowest: Enum.sort([call | slowest])}

      _ ->
        state
    end
  end

  defp phase(schedule, at) do
    cond do
      at < schedule.stop -> :before
      at < schedule.cont -> :silent
      true -> :after
    end
  end

  defp send_one(:plain_send, pid, at, payload) do
    send(pid, {:bench, at, payload})
    :ok
  end

  defp send_one(:noconnect, pid, at, payload),
    do: :erlang.send(pid, {:bench, at, payload}, [:noconnect])

  defp send_one(:nosuspend, pid, at, payload),
    do: :erlang.send(pid, {:bench, at, payload}, [:noconnect, :nosuspend])

  defp send_one(:ringbus, name, _at, payload), do: Ringbus.push(name, payload)

  defp outcome({:ok, _}), do: :ok
  defp outcome({:error, reason}), do: reason
  defp outcome(other), do: other

  defp wait_until(at) do
    ms = div(at - System.os_time(:microsecond), 1_000)
    if ms > 0, do: Process.sleep(ms)
    :ok
  end

  ## Throughput

  @doc """
  Pushes `messages` payloads of `bytes` (rounded down to whole batches) to
  `name` with `push_many/2` in batches of `batch`, from `producers`
  processes at once, each waiting for
  each of its pushes; returns the seconds it took and `true`, or the first
  error.
  """
  @spec ingest(term(), pos_integer(), pos_integer(), pos_integer(), pos_integer()) ::
          {float(), true | term()}
  def ingest(name, messages, bytes, batch, producers \\ 1) do
    payloads = List.duplicate(:binary.copy("i", bytes), batch)
    rounds = div(messages, batch)
    t0 = System.monotonic_time(:microsecond)

    results =
      0..(producers - 1)
      |> Enum.map(fn i ->
        mine = div(rounds, producers) + if(i < rem(rounds, producers), do: 1, else: 0)
        Task.async(fn -> push_rounds(name, payloads, mine) end)
      end)
      |> Task.await_many(:infinity)

    ok? = Enum.find(results, true, &(&1 != true))
    {(System.monotonic_time(:microsecond) - t0) / 1_000_000, ok?}
  end

  # true, or the first error.
  defp push_rounds(_name, _payloads, 0), do: true

  defp push_rounds(name, payloads, left) do
    case Ringbus.push_many(name, payloads) do
      {:ok, _} -> push_rounds(name, payloads, left - 1)
      error -> error
    end
  end

  @doc """
  Subscribes to `name` from its earliest message and acks every batch at
  once until `messages` have come; returns the seconds it took.
  """
  @spec deliver(term(), pos_integer(), keyword()) :: {float(), true | term()}
  def deliver(name, messages, opts) do
    t0 = System.monotonic_time(:microsecond)
    {:ok, sub} = Ringbus.subscribe(name, [from: :earliest] ++ opts)
    ok? = receive_all(sub, messages)
    seconds = (System.monotonic_time(:microsecond) - t0) / 1_000_000
    Ringbus.unsubscribe(sub)
    {seconds, ok?}
  end

  defp receive_all(_sub, left) when left <= 0, do: true

  defp receive_all(sub, left) do
    receive do
      {:ringbus, ^sub, batch, 0} ->
        n = length(batch)
        Ringbus.ack(sub, n)
        receive_all(sub, left - n)

      {:ringbus, ^sub, _batch, _lost} ->
        false
    after
      30_000 -> false
    end
  end
end
