defmodule Ringbus.Client.GroupsTest do
  # Ringbus.Client.Groups end to end against a server: its documented
  # example, run as written; owners; answers in several frames; waits.
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  alias Ringbus.Client
  alias Ringbus.Client.Groups

  setup do
    server = start_supervised!({Ringbus.Server, [port: 0]})
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
    %{port: Ringbus.Server.port(server)}
  end

  # The code block of the moduledoc's "## Example".
  defp example do
    {:docs_v1, _, _, _, %{"en" => doc}, _, _} = Code.fetch_docs(Groups)
    [_, rest] = String.split(doc, "## Example\n", parts: 2)
    [block | _] = String.split(rest, "\n## ", parts: 2)
    block |> String.split("\n") |> Enum.map_join("\n", &String.replace_prefix(&1, "    ", ""))
  end

  test "the documented example runs as written", %{port: port} do
    {result, binding} = Code.eval_string(example(), port: port)
    assert {:ok, [%{name: "workers", acked: 1, pending: 1}]} = result
    assert binding[:next] == binding[:seq] + 1
    Client.close(binding[:client])
  end

  defp connect(port, opts \\ []), do: Client.connect!([port: port] ++ opts)

  test "a client that closes: its pending message goes to another's waiting fetch at once",
       %{port: port} do
    :ok = Ringbus.create("c-owned", capacity: 10)
    a = connect(port)
    b = connect(port)
    :ok = Groups.create(a, "c-owned", "g", from: :earliest, ack_wait: 60_000)
    {:ok, 0} = Client.push(a, "c-owned", "job")
    assert Groups.fetch(a, "c-owned", "g", "wa", 1) == {:ok, [{0, "job", 1}]}
    assert Groups.fetch(b, "c-owned", "g", "wb", 1) == {:ok, []}

    waiting = Task.async(fn -> Groups.fetch(b, "c-owned", "g", "wb", 1, timeout: 30_000) end)
    waiters = Ringbus.Test.Internals.channel!("c-owned").waiters
    assert eventually(fn -> :ets.info(waiters, :size) > 0 end)
    :ok = Client.close(a)

    assert Task.await(waiting, 10_000) == {:ok, [{0, "job", 2}]}
  end

  # The messages of a group subscription's batches, until `count` came.
  defp received(sub, count, acc \\ [])
  defp received(_sub, count, acc) when length(acc) >= count, do: acc

  defp received(sub, count, acc) do
    assert_receive {:ringbus, ^sub, messages, 0}, 5_000
    received(sub, count, acc ++ messages)
  end

  test "subscribe: batches within the credit acks give back, each with its delivery count; " <>
         "a closed client's message goes to another subscriber at once; a deleted group ends it",
       %{port: port} do
    :ok = Ringbus.create("c-push", capacity: 10)
    a = connect(port)
    :ok = Groups.create(a, "c-push", "g", from: :earliest, ack_wait: 60_000)
    {:ok, 0} = Client.push_many(a, "c-push", ["x", "y", "z"])
    {:ok, sub} = Groups.subscribe(a, "c-push", "g", "wa", credit: 2, max_batch: 1)

    assert received(sub, 2) == [{0, "x", 1}, {1, "y", 1}]
    assert eventually(fn -> match?({:ok, [%{pending: 2, lag: 1}]}, Groups.info(a, "c-push")) end)
    {:ok, [%{pending: 2}]} = Groups.info(a, "c-push")

    assert Groups.ack(a, "c-push", "g", [0]) == {:ok, 1}
    assert received(sub, 1) == [{2, "z", 1}]

    b = connect(port)
    {:ok, sub_b} = Groups.subscribe(b, "c-push", "g", "wb", credit: 10, times: true)
    :ok = Client.close(a)
    [{1, "y", 2, t1}, {2, "z", 2, t2}] = received(sub_b, 2) |> Enum.sort()
    assert is_integer(t1) and t1 <= t2

    # The subscription learns of the delete when a push wakes it.
    :ok = Groups.delete(b, "c-push", "g")
    {:ok, 3} = Client.push(b, "c-push", "w")
    assert_receive {:ringbus_closed, ^sub_b, :no_group}, 5_000
    Client.close(b)
  end

  test "claim, autoclaim, in_progress, remove_consumer, delete and info", %{port: port} do
    :ok = Ringbus.create("c-claims", capacity: 10)
    c = connect(port)
    :ok = Groups.create(c, "c-claims", "g", from: :earliest, max_deliver: 9, dead_letter: "dl")
    assert Groups.create(c, "c-claims", "g") == {:error, :exists}
    {:ok, 0} = Client.push_many(c, "c-claims", ["a", "b"])

    assert Groups.fetch(c, "c-claims", "g", "w1", 2) == {:ok, [{0, "a", 1}, {1, "b", 1}]}
    assert Groups.in_progress(c, "c-claims", "g", [0, 1, 5]) == {:ok, 2}
    assert Groups.claim(c, "c-claims", "g", "w2", [1]) == {:ok, [{1, "b", 2}]}
    assert Groups.autoclaim(c, "c-claims", "g", "w3", 0, 10) == {:ok, [{0, "a", 2}, {1, "b", 3}]}
    assert Groups.remove_consumer(c, "c-claims", "g", "w3") == {:ok, 2}

    assert {:ok, [group]} = Groups.info(c, "c-claims")
    assert %{name: "g", delivered: 1, pending: 2, redelivered: 3, acked: 0, lag: 0} = group

    assert group.config == %{
             ack_wait: 30_000,
             max_deliver: 9,
             max_pending: 10_000,
             dead_letter: "dl"
           }

    assert Enum.sort(for c <- group.consumers, do: c.name) == ["w1", "w2"]

    assert Groups.ack(c, "c-claims", "g", [0, 1]) == {:ok, 2}
    assert Groups.delete(c, "c-claims", "g") == :ok
    assert Groups.delete(c, "c-claims", "g") == {:error, :no_group}
    assert Groups.fetch(c, "c-claims", "g", "w1", 1) == {:error, :no_group}
    assert Groups.info(c, "c-claims") == {:ok, []}
  end

  test "a fetch's answer in several frames comes back whole" do
    server = start_supervised!({Ringbus.Server, [port: 0, max_frame_size: 1024]}, id: :small)
    c = connect(Ringbus.Server.port(server))
    :ok = Ringbus.create("c-big", capacity: 10)
    payloads = for b <- ~w(a b c), do: String.duplicate(b, 600)
    {:ok, 0} = Ringbus.push_many("c-big", payloads)
    :ok = Groups.create(c, "c-big", "g", from: :earliest)

    assert {:ok, messages} = Groups.fetch(c, "c-big", "g", "w", 10)
    assert messages == Enum.with_index(payloads, fn p, i -> {i, p, 1} end)
  end

  test "a fetch may wait past the client's timeout; the client's other calls go on meanwhile",
       %{port: port} do
    c = connect(port, timeout: 300)
    :ok = Ringbus.create("c-wait", capacity: 10)
    :ok = Groups.create(c, "c-wait", "g")

    started = System.monotonic_time(:millisecond)
    waiting = Task.async(fn -> Groups.fetch(c, "c-wait", "g", "w", 1, timeout: 1_000) end)
    waiters = Ringbus.Test.Internals.channel!("c-wait").waiters
    assert eventually(fn -> :ets.info(waiters, :size) > 0 end)
    assert Client.ping(c) == :ok

    # Nothing came: answered empty once its wait passed, not `:timeout` at 300 ms.
    assert Task.await(waiting, 10_000) == {:ok, []}
    assert System.monotonic_time(:millisecond) - started >= 1_000

    {:ok, 0} = Client.push(c, "c-wait", "x")
    assert Groups.fetch(c, "c-wait", "g", "w", 1, timeout: 1_000) == {:ok, [{0, "x", 1}]}
  end

  test "bad arguments raise before anything is sent", %{port: port} do
    c = connect(port)

    for call <- [
          fn -> Groups.fetch(c, "ch", "g", "w", 0) end,
          fn -> Groups.fetch(c, "ch", "g", "w", 1001) end,
          fn -> Groups.fetch(c, "ch", "", "w", 1) end,
          fn -> Groups.ack(c, "ch", "g", [-1]) end,
          fn -> Groups.create(c, "ch", "g", from: :sometime) end,
          fn -> Groups.create(c, "ch", "g", bogus: 1) end
        ] do
      assert_raise ArgumentError, call
    end
  end
end
