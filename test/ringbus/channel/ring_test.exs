defmodule Ringbus.Channel.RingTest do
  # When the ring says its messages were stored: one time per push or batch,
  # read back as runs by `Ring.read_timed/3`.
  use ExUnit.Case, async: true

  alias Ringbus.Channel.Ring

  defp channel(opts), do: Ringbus.Test.Internals.temp_channel!(opts)

  defp now, do: System.monotonic_time(:microsecond)

  defp push_batch(ch, payloads) do
    {n, bytes} = Ring.measure!(payloads)
    Ring.push_measured(ch, payloads, n, bytes)
  end

  # Each kind of row: messages pushed alone, a batch stored as a chunk
  # (drop-oldest), a batch stored row by row (reject, and drop-oldest under
  # max_bytes).
  for opts <- [
        [capacity: 100],
        [capacity: 100, overflow: :reject],
        [capacity: 100, max_bytes: 10_000]
      ] do
    test "runs count every message read, each batch once, at its push's time (#{inspect(opts)})" do
      ch = channel(unquote(opts))
      t0 = now()
      {:ok, 0} = Ring.push(ch, "a")
      {:ok, 1} = Ring.push(ch, "b")
      t1 = now()
      {:ok, 2} = push_batch(ch, ~w(c d e f))
      t2 = now()

      {items, 6, 0, 6, runs} = Ring.read_timed(ch, 0, 10)
      assert {items, 6, 0, 6} == Ring.read(ch, 0, 10)
      assert Enum.map(items, &elem(&1, 1)) == ~w(a b c d e f)

      # Newest first: the batch's run, then the two single pushes (one run
      # if they share a µs).
      [{batch_at, 4} | singles] = runs
      assert batch_at in t1..t2
      assert Enum.sum(for {_, n} <- singles, do: n) == 2
      assert Enum.all?(singles, fn {at, _} -> at in t0..t1 end)

      # A read that starts inside the batch counts only what it returns.
      assert {[{3, "d"}, {4, "e"}], 2, 0, 5, [{^batch_at, 2}]} = Ring.read_timed(ch, 3, 2)
    end
  end

  test "a read that finds nothing has no runs" do
    ch = channel(capacity: 4)
    assert {[], 0, 0, 0, []} = Ring.read_timed(ch, 0, 10)
  end
end
