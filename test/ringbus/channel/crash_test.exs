defmodule Ringbus.Channel.CrashTest do
  # Callers and subscribers die mid-stream; the channel, its data and its
  # counters must not notice beyond what the dead processes did.
  use ExUnit.Case, async: false

  alias Ringbus.Test.Load

  test "a channel outlives the process that created it and filled it" do
    name = {__MODULE__, :orphan}
    on_exit(fn -> Ringbus.delete(name) end)

    {pid, ref} =
      spawn_monitor(fn ->
        :ok = Ringbus.create(name, capacity: 10)
        {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
        exit(:boom)
      end)

    assert_receive {:DOWN, ^ref, :process, ^pid, :boom}
    assert {:ok, [{0, "a"}, {1, "b"}, {2, "c"}], 0} = Ringbus.read(name, 0, 10)
    assert {:ok, %{pushed: 3, len: 3}} = Ringbus.info(name)
  end

  test "killing producers, pullers and subscribers mid-stream loses nothing uncounted" do
    name = {__MODULE__, :kill}
    :ok = Ringbus.create(name, capacity: 256)
    on_exit(fn -> Ringbus.delete(name) end)
    store = Process.whereis(Ringbus.Store)
    log = :ets.new(:crash_log, [:public, :duplicate_bag, write_concurrency: true])
    parent = self()

    producers = for p <- 1..4, do: spawn(fn -> produce(name, p, 20_000, log, parent) end)
    pullers = for _ <- 1..2, do: spawn(fn -> pull_forever(name, log) end)
    [doomed_sub, survivor] = for _ <- 1..2, do: Load.start_subscriber(name, max_credit: 64)
    Process.unlink(doomed_sub)

    [sub_process] =
      for pid <- subscription_processes(name),
          :sys.get_state(pid).subscriber == doomed_sub,
          do: pid

    sub_ref = Process.monitor(sub_process)

    # Kill one of each once the stream is flowing.
    assert_receive {:progress, 1}, 10_000
    Enum.each([hd(producers), hd(pullers), doomed_sub], &kill/1)
    assert_receive {:DOWN, ^sub_ref, :process, ^sub_process, _}, 5_000

    # By name: under load the doomed producer may finish before its kill lands.
    for p <- 2..4, do: assert_receive({:done, ^p}, 60_000)
    Enum.each(tl(pullers), &kill/1)

    # Drain what is left and check the books.
    drained = drain(name, [])
    assert Process.whereis(Ringbus.Store) == store
    {:ok, info} = Ringbus.info(name)
    assert info.len == 0
    assert {:ok, [], _gone} = Ringbus.read(name, 0, 10)

    logged_pushes = :ets.lookup(log, :pushed)
    logged_pulls = :ets.lookup(log, :pulled) |> Enum.map(fn {_, seq} -> seq end)
    pulled_seqs = logged_pulls ++ Enum.map(drained, &elem(&1, 0))
    assert length(pulled_seqs) == length(Enum.uniq(pulled_seqs))
    assert Enum.all?(pulled_seqs, &(&1 < info.next_seq))

    for {_seq, payload} <- drained do
      assert <<p::8, i::32>> = payload
      assert p in 1..4 and i in 1..20_000
    end

    # A killed caller may have finished one operation without logging it:
    # one producer was killed, and every puller.
    assert (info.pushed - length(logged_pushes)) in 0..1
    assert (info.pulled - length(pulled_seqs)) in 0..length(pullers)

    # The surviving subscriber still gets what is pushed now.
    {:ok, last} = Ringbus.push(name, "after the crash")
    assert {seen, _lost, _} = Load.stop(survivor, last + 1)
    assert seen[last] == "after the crash"
  end

  # Kills and waits until it is done: a kill is asynchronous, and the books
  # must not be read while a killed process still runs.
  defp kill(pid) do
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000
  end

  defp produce(name, p, count, log, parent) do
    for i <- 1..count do
      {:ok, seq} = Ringbus.push(name, <<p::8, i::32>>)
      :ets.insert(log, {:pushed, seq})
      if i == 2_000, do: send(parent, {:progress, p})
    end

    send(parent, {:done, p})
  end

  defp pull_forever(name, log) do
    case Ringbus.pull(name) do
      {:ok, seq, _} -> :ets.insert(log, {:pulled, seq})
      :empty -> :erlang.yield()
    end

    pull_forever(name, log)
  end

  defp drain(name, acc) do
    case Ringbus.pull(name) do
      {:ok, seq, payload} -> drain(name, [{seq, payload} | acc])
      :empty -> acc
    end
  end

  # Every subscription monitors its channel's anchor.
  defp subscription_processes(name) do
    {:ok, channel} = Ringbus.Test.Internals.channel(name)
    {:monitored_by, pids} = Process.info(channel.anchor, :monitored_by)
    pids
  end
end
