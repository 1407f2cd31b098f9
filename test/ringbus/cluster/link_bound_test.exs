defmodule Ringbus.Cluster.LinkBoundTest do
  # A link holds at most `max_buffer_bytes` (4 MiB by default): a read from
  # another node is cut to fit, and a message larger than the bound is
  # refused rather than carried. Real nodes (`:peer`); patient timeouts, as
  # these tests check what is carried, not how fast.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 120_000
  @bound 4 * 1024 * 1024

  setup_all do
    cluster = [call_timeout: 2_000, reply_timeout: 10_000]
    nodes = Nodes.start(2, "bound", net_ticktime: 4, cluster: cluster)
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    [a, b] = nodes
    %{a: a, b: b}
  end

  defp call(n, module, fun, args, timeout \\ 60_000),
    do: Nodes.call(n, module, fun, args, timeout)

  test "40 messages of 1 MB read from another node arrive once, in order, within the bound",
       %{a: a, b: b} do
    :ok = call(b, Ringbus, :create, ["big", [capacity: 64]])
    pushed = call(b, Probe, :push_n, ["big", 40, 1_000_000])
    assert Enum.all?(pushed, &match?({:ok, _}, &1))
    samplers = for n <- [a, b], do: {n, call(n, Probe, :queue_sampler, [])}

    # Two readers at once on a, each asking for all 40 in every read.
    readers = for _ <- 1..2, do: Task.async(fn -> call(a, Probe, :read_all, ["big", 40, 40]) end)

    for %{tags: tags, largest: {count, bytes}} <- Task.await_many(readers, 120_000) do
      assert tags == Enum.to_list(1..40)
      # Cut: fewer than asked, and never more than the link may hold.
      assert count < 40
      assert bytes <= @bound
    end

    for {n, sampler} <- samplers, do: assert(call(n, Probe, :largest_queued, [sampler]) <= @bound)
  end

  test "a message larger than the bound is refused across nodes and stays", %{a: a, b: b} do
    :ok = call(b, Ringbus, :create, ["huge", [capacity: 8]])
    huge = :binary.copy("h", @bound + 1)
    assert {:ok, 0} = call(b, Ringbus, :push, ["huge", huge])
    assert {:ok, 1} = call(b, Ringbus, :push, ["huge", "small"])

    assert call(a, Ringbus, :read, ["huge", 0, 10]) == {:error, :too_large}
    assert call(a, Ringbus, :pull, ["huge"]) == {:error, :too_large}
    assert call(a, Ringbus, :push, ["huge", huge]) == {:error, :too_large}
    # Every form of push is measured: tagged, a batch, and one that answers
    # its incarnation with a trim (RESP's XADD).
    assert call(a, Ringbus, :push, ["huge", huge, [producer: {"p", 1}]]) == {:error, :too_large}
    assert call(a, Ringbus, :push_many, ["huge", [huge]]) == {:error, :too_large}
    trim = %{strategy: {:maxlen, 8}, approx: false, limit: nil}
    xadd = {:stamped, {:push_trim, {:push_many, [huge], 1, byte_size(huge)}, trim}}
    assert call(a, Ringbus, :run, ["huge", xadd]) == {:error, :too_large}
    # Nothing was lost: the caller can skip it, and its home still has it.
    assert call(a, Ringbus, :read, ["huge", 1, 10]) == {:ok, [{1, "small"}], 0}
    assert call(a, Ringbus, :len, ["huge"]) == 2
    assert {:ok, [{0, ^huge}], 0} = call(b, Ringbus, :read, ["huge", 0, 1])
    assert call(a, Ringbus, :cluster_info, []).links[b.node].state == :up
  end
end
