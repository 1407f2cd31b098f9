defmodule Ringbus.Bench.TracerTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.{QueueBuffer, Stats, Tracer}

  test ":messages mode times every call a server answers and counts its GCs" do
    {:ok, pid} = QueueBuffer.start_link(10)
    tracer = Tracer.start(pid, :messages, max_samples: 2)
    for i <- 1..3, do: :ok = QueueBuffer.push(pid, i)
    :erlang.garbage_collect(pid)

    assert %{requests: 3, samples: samples, gc_count: gcs} = Tracer.stop(tracer)
    assert gcs >= 1
    assert {a, b} = Stats.sorted(samples, 2)
    assert a > 0 and b > 0
    QueueBuffer.stop(pid)
  end

  test "{:calls, mfas} mode times the traced process's calls" do
    tracer = Tracer.start(self(), {:calls, [{Stats, :median, 1}]}, max_samples: 10)
    for i <- 1..4, do: Stats.median([i])

    assert %{requests: 4, gc_count: _} = Tracer.stop(tracer)
  end
end
