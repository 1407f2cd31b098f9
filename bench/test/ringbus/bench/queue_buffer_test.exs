defmodule Ringbus.Bench.QueueBufferTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.QueueBuffer

  test "takes items out in the order they were put" do
    buffer = Enum.reduce(1..3, QueueBuffer.new(5), &QueueBuffer.put(&2, &1))

    assert {{:ok, 1}, buffer} = QueueBuffer.take(buffer)
    assert {{:ok, 2}, buffer} = QueueBuffer.take(buffer)
    assert {{:ok, 3}, buffer} = QueueBuffer.take(buffer)
    assert {:empty, %QueueBuffer{size: 0}} = QueueBuffer.take(buffer)
  end

  test "drops the oldest item when full" do
    buffer = Enum.reduce(1..5, QueueBuffer.new(3), &QueueBuffer.put(&2, &1))

    assert buffer.size == 3
    assert {{:ok, 3}, buffer} = QueueBuffer.take(buffer)
    buffer = QueueBuffer.put(buffer, 6)
    assert [4, 5, 6] == drain(buffer)
  end

  test "rejects a bad capacity" do
    assert_raise ArgumentError, ~r/positive integer, got: 0/, fn -> QueueBuffer.new(0) end
  end

  test "the server pushes and pulls in FIFO order, overwriting the oldest" do
    {:ok, pid} = QueueBuffer.start_link(2)
    assert QueueBuffer.pull(pid) == :empty
    for item <- ["a", "b", "c"], do: :ok = QueueBuffer.push(pid, item)

    assert QueueBuffer.pull(pid) == {:ok, "b"}
    assert QueueBuffer.pull(pid) == {:ok, "c"}
    assert QueueBuffer.pull(pid) == :empty
    assert :ok = QueueBuffer.stop(pid)
  end

  defp drain(buffer) do
    case QueueBuffer.take(buffer) do
      {{:ok, item}, rest} -> [item | drain(rest)]
      {:empty, _} -> []
    end
  end
end
