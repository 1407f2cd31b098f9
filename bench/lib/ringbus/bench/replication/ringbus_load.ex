defmodule Ringbus.Bench.Replication.RingbusLoad do
  @moduledoc false
  # What the replication bench runs on a Ringbus node (through `:peer.call`):
  # windowed pushes, the failover probe and the read pass. Every loop is
  # bounded in count and in time.

  alias Ringbus.Bench.Replication.Samples

  @doc """
  `window` processes push `size`-byte messages to channel `name`, each one
  push in flight, for `ms` or until `max` are sent. With `rate` (msgs/s, all
  together) each process keeps to its share of a schedule, skipping the
  slots it missed instead of bursting. Latency is push to `{:ok, seq}`.
  """
  @spec push(term(), pos_integer(), pos_integer(), pos_integer(), pos_integer(), nil | number()) ::
          Samples.summary()
  def push(name, size, window, ms, max, rate) do
    payload = :binary.copy("x", size)
    samples = Samples.new(max)
    budget = :atomics.new(1, signed: true)
    :ok = :atomics.put(budget, 1, max)
    start = Samples.now()
    interval = if rate, do: window * 1_000_000 / rate
    run = %{name: name, payload: payload, samples: samples, budget: budget}
    run = Map.merge(run, %{start: start, deadline: start + ms * 1_000, interval: interval})

    refs =
      for i <- 0..(window - 1) do
        offset = if interval, do: interval * i / window, else: 0
        {_pid, ref} = spawn_monitor(fn -> worker(run, offset, 0) end)
        ref
      end

    for ref <- refs, do: receive(do: ({:DOWN, ^ref, _, _, _} -> :ok))
    Samples.summary(samples, (Samples.now() - start) / 1_000_000, size)
  end

  defp worker(run, offset, k) do
    now = Samples.now()

    cond do
      now >= run.deadline ->
        :ok

      run.interval != nil and now < run.start + offset + k * run.interval ->
        wait_us = run.start + offset + k * run.interval - now
        receive after: (max(div(trunc(wait_us), 1_000), 1) -> :ok)
        worker(run, offset, k)

      :atomics.sub_get(run.budget, 1, 1) < 0 ->
        :ok

      true ->
        case Ringbus.push(run.name, run.payload) do
          {:ok, _seq} -> Samples.add(run.samples, Samples.now() - now)
          _error -> Samples.error(run.samples)
        end

        worker(run, offset, next_slot(run, offset, k, Samples.now()))
    end
  end

  # Paced: the next slot not yet past, so a stall is followed by no burst.
  defp next_slot(%{interval: nil}, _offset, k, _now), do: k + 1

  defp next_slot(run, offset, k, now),
    do: max(k + 1, trunc(Float.ceil((now - run.start - offset) / run.interval)))

  @doc """
  The counts of replicated channel `name`'s writer on this node
  (`Ringbus.Replica.Writer`): commands, requests, sends, most commands
  unanswered at once.
  """
  @spec writer_counts(term()) :: map()
  def writer_counts(name) do
    {:ok, %Ringbus.Channel{replica: %{writer: writer}}} = Ringbus.Store.fetch(name)
    :sys.get_state(writer).counts
  end

  @doc """
  Pushes one message at a time (each waiting `timeout` ms at most) until
  one is acked or `ms` pass; the OS time (µs, the clock every node of the
  machine shares) of that ack, or nil.
  """
  @spec first_ack(term(), pos_integer(), pos_integer()) :: integer() | nil
  def first_ack(name, timeout, ms) do
    deadline = Samples.now() + ms * 1_000
    probe(name, timeout, deadline)
  end

  defp probe(name, timeout, deadline) do
    cond do
      Samples.now() > deadline ->
        nil

      match?({:ok, _}, Ringbus.push(name, "failover", timeout: timeout)) ->
        System.os_time(:microsecond)

      true ->
        # An error that is no timeout comes at once (no channel yet): not a spin.
        receive after: (5 -> :ok)
        probe(name, timeout, deadline)
    end
  end

  @doc """
  Reads channel `name`'s ring on this node from its oldest message, in
  reads of 1000, pass after pass, for about `ms` (20 passes at most);
  returns `{messages, seconds}`.
  """
  @spec read(term(), pos_integer()) :: {non_neg_integer(), float()}
  def read(name, ms) do
    start = Samples.now()
    deadline = start + ms * 1_000
    messages = read_passes(name, deadline, 20, 0)
    {messages, (Samples.now() - start) / 1_000_000}
  end

  defp read_passes(_name, _deadline, 0, acc), do: acc

  defp read_passes(name, deadline, passes, acc) do
    acc = acc + read_pass(name, 0, 0)
    if Samples.now() < deadline, do: read_passes(name, deadline, passes - 1, acc), else: acc
  end

  defp read_pass(name, from, acc) do
    case Ringbus.read(name, from, 1_000) do
      {:ok, [], _lost} ->
        acc

      {:ok, messages, _lost} ->
        {last, n} = last_and_count(messages, 0)
        read_pass(name, last + 1, acc + n)
    end
  end

  # One walk of a read's (at most 1,000) messages.
  defp last_and_count([{seq, _}], n), do: {seq, n + 1}
  defp last_and_count([_ | rest], n), do: last_and_count(rest, n + 1)
end
