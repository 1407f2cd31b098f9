defmodule Ringbus.Bench.EtsServerBufferTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.EtsServerBuffer

  test "takes items out in the order they were put, across the wrap" do
    ring = EtsServerBuffer.new(3)
    ring = Enum.reduce(1..2, ring, &EtsServerBuffer.put(&2, &1))
    {{:ok, 1}, ring} = EtsServerBuffer.take(ring)
    ring = Enum.reduce(3..4, ring, &EtsServerBuffer.put(&2, &1))

    assert ring.push_at == 1
    assert [2, 3, 4] == drain(ring)
  end

  test "overwrites the oldest item when full and frees pulled slots" do
    ring = Enum.reduce(1..7, EtsServerBuffer.new(3), &EtsServerBuffer.put(&2, &1))

    assert ring.size == 3
    assert :ets.info(ring.table, :size) == 3
    {{:ok, 5}, ring} = EtsServerBuffer.take(ring)
    assert :ets.info(ring.table, :size) == 2
    assert [6, 7] == drain(ring)
    assert :ets.info(ring.table, :size) == 0
  end

  test "an empty ring has nothing to take" do
    ring = EtsServerBuffer.new(1)
    assert {:empty, ^ring} = EtsServerBuffer.take(ring)
  end

  test "the server pushes and pulls in FIFO order, overwriting the oldest" do
    {:ok, pid} = EtsServerBuffer.start_link(2)
    for item <- ["a", "b", "c"], do: :ok = EtsServerBuffer.push(pid, item)

    assert %{size: 2, table_bytes: bytes} = EtsServerBuffer.info(pid)
    assert bytes > 0
    assert EtsServerBuffer.pull(pid) == {:ok, "b"}
    assert EtsServerBuffer.pull(pid) == {:ok, "c"}
    assert EtsServerBuffer.pull(pid) == :empty
    assert :ok = EtsServerBuffer.stop(pid)
  end

  defp drain(ring) do
    case EtsServerBuffer.take(ring) do
      {{:ok, item}, rest} -> [item | drain(rest)]
      {:empty, _} -> []
    end
  end
end
