defmodule Ringbus.Channel.ProducersTest do
  # Producer tags on memory channels: `Ringbus.push/3` with `producer: {id, n}`
  # stores a tagged push once, however often and however concurrently it
  # is sent, within the window the channel remembers.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.Producers

  defp channel(opts \\ []) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, Keyword.merge([capacity: 1_000], opts))
    on_exit(fn -> Ringbus.delete(name) end)
    name
  end

  test "a tag sent again answers its first seq and stores nothing" do
    name = channel()
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert {:ok, 1} = Ringbus.push(name, ["b", "c"], producer: {"p", 2})
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert {:ok, 1} = Ringbus.push(name, ["b", "c"], producer: {"p", 2})
    # Another producer's n is its own.
    assert {:ok, 3} = Ringbus.push(name, "d", producer: {{:worker, 7}, 1})
    assert {:ok, 1} = Ringbus.push(name, ["b", "c"], producer: {"p", 2}, timeout: 1_000)
    assert Ringbus.len(name) == 4
    assert {:ok, [{0, "a"}, {1, "b"}, {2, "c"}, {3, "d"}], 0} = Ringbus.read(name, 0, 10)
    # Untagged pushes through push/3 are plain pushes.
    assert {:ok, 4} = Ringbus.push(name, "e", producer: nil)
    assert {:ok, 5} = Ringbus.push(name, "e", producer: nil)
  end

  test "ids that look like match-spec variables are ids like any other" do
    name = channel()
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {:_, 1})
    assert {:ok, 1} = Ringbus.push(name, "b", producer: {:"$1", 1})
    for n <- 2..100, do: {:ok, _} = Ringbus.push(name, "x", producer: {:_, n})
    assert {:ok, 1} = Ringbus.push(name, "b", producer: {:"$1", 1})
  end

  test "a refused push does not spend its tag" do
    name = channel(capacity: 1, overflow: :reject)
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert {:error, :full} = Ringbus.push(name, "b", producer: {"p", 2})
    assert {:ok, 0, "a"} = Ringbus.pull(name)
    assert {:ok, 1} = Ringbus.push(name, "b", producer: {"p", 2})
    assert {:ok, 1} = Ringbus.push(name, "b", producer: {"p", 2})
    assert {:ok, %{pushed: 2, rejected: 1}} = Ringbus.info(name)
  end

  test "a producer's last 64 tags are remembered; older ones answer :stale_tag" do
    name = channel()
    for n <- 1..65, do: assert({:ok, n - 1} == Ringbus.push(name, "m#{n}", producer: {"p", n}))

    # 65 stored: tags 2..65 remembered, tag 1 forgotten.
    assert {:error, :stale_tag} = Ringbus.push(name, "m1", producer: {"p", 1})
    assert {:ok, 1} = Ringbus.push(name, "m2", producer: {"p", 2})
    assert {:ok, 64} = Ringbus.push(name, "m65", producer: {"p", 65})
    # A jump forgets everything 64 or more below it.
    assert {:ok, 65} = Ringbus.push(name, "m200", producer: {"p", 200})
    assert {:error, :stale_tag} = Ringbus.push(name, "m65", producer: {"p", 65})
    assert {:error, :stale_tag} = Ringbus.push(name, "m136", producer: {"p", 136})
    assert Ringbus.len(name) == 66

    # The table holds the window and no more.
    {:ok, channel} = Ringbus.Store.fetch(name)
    assert :ets.select_count(channel.producers, [{{{:t, "p", :_}, :_}, [], [true]}]) == 1
  end

  test "at most 1024 producers per channel; the least recently seen is forgotten" do
    name = channel(capacity: 4_000)
    max = Producers.max_producers()
    for id <- 1..max, do: {:ok, _} = Ringbus.push(name, "x", producer: {id, 1})
    # Producer 1 is seen again, so producer 2 is now the least recently seen.
    assert {:ok, 1024} = Ringbus.push(name, "x", producer: {1, 2})
    assert {:ok, 1025} = Ringbus.push(name, "new", producer: {:new, 1})

    {:ok, channel} = Ringbus.Store.fetch(name)
    assert :ets.select_count(channel.producers, [{{{:p, :_}, :_, :_}, [], [true]}]) == max
    # Producer 2 is forgotten: its tag stores again. Producer 1 is not.
    assert {:ok, 0} = Ringbus.push(name, "x", producer: {1, 1})
    assert {:ok, 1026} = Ringbus.push(name, "x", producer: {2, 1})
  end

  test "many processes sending one tag at once store it once, and all get its seq" do
    name = channel()
    {:ok, 0} = Ringbus.push(name, "before")
    answers = at_once(50, fn _ -> Ringbus.push(name, "once", producer: {"p", 7}) end)
    assert Enum.uniq(answers) == [{:ok, 1}]
    assert {:ok, [{0, "before"}, {1, "once"}], 0} = Ringbus.read(name, 0, 10)
  end

  test "many processes sending the same run of tags at once store each exactly once" do
    name = channel(capacity: 100_000)
    tags = 300

    answers =
      at_once(8, fn _ ->
        for n <- 1..tags, do: {n, Ringbus.push(name, "p#{n}", producer: {"shared", n})}
      end)

    assert Ringbus.len(name) == tags
    {:ok, held, 0} = Ringbus.read(name, 0, 2 * tags)
    assert Enum.sort(for {_seq, p} <- held, do: p) == Enum.sort(for n <- 1..tags, do: "p#{n}")
    seq_of = Map.new(held, fn {seq, "p" <> n} -> {String.to_integer(n), seq} end)

    # Each send got its tag's one seq, or, for a sender 64 tags behind
    # another, :stale_tag.
    for per_sender <- answers, {n, answer} <- per_sender do
      assert answer in [{:ok, seq_of[n]}, {:error, :stale_tag}]
    end
  end

  # Runs `fun` in `count` processes released together; their results.
  defp at_once(count, fun) do
    parent = self()

    pids =
      for i <- 1..count do
        spawn_link(fn ->
          receive do: (:go -> :ok)
          send(parent, {:result, self(), fun.(i)})
        end)
      end

    for pid <- pids, do: send(pid, :go)

    for pid <- pids,
        do:
          receive(do: ({:result, ^pid, result} -> result), after: (30_000 -> flunk("no result")))
  end

  test "a claim left by a killed sender is taken over" do
    name = channel()
    {:ok, channel} = Ringbus.Store.fetch(name)
    dead = spawn(fn -> :ok end)
    ref = Process.monitor(dead)
    assert_receive {:DOWN, ^ref, :process, ^dead, _}
    :ets.insert(channel.producers, {{:t, "p", 1}, {:pending, dead}})
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
  end

  test "a send that finds a live claim waits for its seq" do
    name = channel()
    {:ok, channel} = Ringbus.Store.fetch(name)
    parent = self()
    claimant = spawn(fn -> receive do: (:stop -> :ok) end)
    :ets.insert(channel.producers, {{:t, "p", 1}, {:pending, claimant}})

    spawn(fn -> send(parent, {:answer, Ringbus.push(name, "a", producer: {"p", 1})}) end)
    # The claimant stores: the waiter is answered its seq, and stores nothing.
    {:ok, 0} = Ringbus.push(name, "a")
    :ets.insert(channel.producers, {{:t, "p", 1}, {:ok, 0}})
    assert_receive {:answer, {:ok, 0}}, 5_000
    assert Ringbus.len(name) == 1
    send(claimant, :stop)
  end

  test "a push that raises leaves no claim" do
    name = channel()
    {:ok, channel} = Ringbus.Store.fetch(name)

    assert_raise RuntimeError, fn ->
      Producers.push(channel.producers, {"p", 1}, fn -> raise "boom" end)
    end

    assert {:ok, 0} = Ringbus.push(name, "a", producer: {"p", 1})
  end

  test "bad options raise" do
    name = channel()
    assert_raise ArgumentError, ~r/:producer/, fn -> Ringbus.push(name, "a", producer: {"p"}) end

    assert_raise ArgumentError, ~r/:producer/, fn ->
      Ringbus.push(name, "a", producer: {"p", 1.0})
    end

    assert_raise ArgumentError, ~r/:timeout/, fn -> Ringbus.push(name, "a", timeout: 0) end
    assert_raise ArgumentError, ~r/:other/, fn -> Ringbus.push(name, "a", other: 1) end
  end

  test "a deleted channel answers :no_channel" do
    name = channel()
    :ok = Ringbus.delete(name)
    assert {:error, :no_channel} = Ringbus.push(name, "a", producer: {"p", 1})
  end
end
