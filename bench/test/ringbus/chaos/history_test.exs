defmodule Ringbus.Chaos.HistoryTest do
  use ExUnit.Case, async: true

  alias Ringbus.Chaos.{History, Payload}

  test "entries come back in the order recorded, stamped, and the history is bounded" do
    history = History.new(4)
    assert History.record(history, 1, :invoke, :push, {"c", [{1, 0}]}) == :ok
    assert History.record(history, 1, :ok, :push, {"c", [{1, 0}], 0}) == :ok
    refute History.full?(history)
    assert History.record(history, 2, :invoke, :read, {"c", 0}) == :ok
    # A quarter is kept for completions: clients stop invoking now.
    assert History.full?(history)
    assert History.record(history, 2, :fail, :read, {"c", 0, :node_busy}) == :ok
    assert History.record(history, 2, :ok, :read, {"c", 0, [], 0}) == :full

    assert [{1, :invoke, :push, _, t1}, {1, :ok, :push, _, t2}, {2, :invoke, :read, _, _}, _] =
             History.entries(history)

    assert t1 <= t2

    path = Path.join(System.tmp_dir!(), "history_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm(path) end)
    assert History.dump(history, path) == 4
    assert History.load(path) == History.entries(history)
    History.delete(history)
  end

  test "a named history is found by its name" do
    name = :"history_#{System.unique_integer([:positive])}"
    history = History.new(10, name)
    assert History.open(name) == history
    assert History.record(History.open(name), 1, :invoke, :pull, {"c"}) == :ok
    assert [{1, :invoke, :pull, {"c"}, _}] = History.entries(history)
    History.delete(history)
  end

  test "node_busy and node_down are failures today; timeouts and closed connections unknown" do
    assert History.classify({:ok, 3}) == :ok
    assert History.classify(:empty) == :ok
    assert History.classify({:error, :node_busy}) == :fail
    assert History.classify({:error, :node_down}) == :fail
    assert History.classify({:error, :full}) == :fail
    assert History.classify({:error, :timeout}) == :info
    assert History.classify({:error, :closed}) == :info
  end

  test "payloads carry their producer's key, padded to the size asked" do
    payload = Payload.encode({7, 42}, 1_000)
    assert byte_size(payload) == 1_000
    assert Payload.key(payload) == {7, 42}
    assert Payload.key("other") == {:unknown, 5}
    assert Payload.keys([{0, Payload.encode({1, 2})}]) == [{0, {1, 2}}]
  end
end
