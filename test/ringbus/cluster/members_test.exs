defmodule Ringbus.Cluster.MembersTest do
  # Members on real nodes (`:peer`): what a node logs as they join, leave
  # and come back (recorded on the node that logs them), and forgetting one
  # that is gone for good.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.ClusterProbe, as: Probe

  @moduletag timeout: 90_000

  defp call(n, module, fun, args), do: Nodes.call(n, module, fun, args)

  test "one line per join and leave, with the nodedown reason; a node seen before rejoins" do
    [a, b, c] = nodes = Nodes.start(3, "members", net_ticktime: 4)
    on_exit(fn -> Nodes.stop(nodes) end)
    recorder = call(a, Probe, :log_recorder, [])
    :ok = Nodes.join(nodes)

    assert eventually(fn ->
             lines(a, recorder) ==
               Enum.sort([
                 {:info, "Ringbus cluster member #{b.node} joined"},
                 {:info, "Ringbus cluster member #{c.node} joined"}
               ])
           end)

    Nodes.signal(c, :kill)
    left = {:warning, "Ringbus cluster member #{c.node} left: :connection_closed"}
    assert eventually(fn -> left in lines(a, recorder) end)

    c = Nodes.restart(c)
    on_exit(fn -> Nodes.stop([c]) end)
    :ok = Nodes.await_links([a, b, c])
    rejoined = {:notice, "Ringbus cluster member #{c.node} rejoined"}
    assert eventually(fn -> rejoined in lines(a, recorder) end)

    # Ringbus stopped on a node that stays connected.
    :ok = call(b, Application, :stop, [:ringbus])
    stopped = {:warning, "Ringbus cluster member #{b.node} left: its Ringbus stopped"}
    assert eventually(fn -> stopped in lines(a, recorder) end)

    # One line each, nothing else from the membership.
    assert lines(a, recorder) |> Enum.filter(&(elem(&1, 1) =~ "cluster member")) |> length() == 5
  end

  test "forget_node releases the names of a node killed for good; refused for a connected one" do
    # A link that takes its time on a loaded machine is not what this is
    # about: a request may wait 2 s in it rather than the default 5 ms.
    [a, b, c] = nodes = Nodes.start(3, "forget", net_ticktime: 4, cluster: [call_timeout: 2_000])
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    :ok = call(a, Ringbus, :create, ["on-c", [capacity: 4, node: c.node]])
    assert call(a, Ringbus.Cluster, :forget_node, [c.node]) == {:error, :node_up}
    assert call(a, Ringbus.Cluster, :forget_node, [a.node]) == {:error, :node_up}

    Nodes.signal(c, :kill)
    assert eventually(fn -> call(a, Ringbus, :push, ["on-c", "x"]) == {:error, :node_down} end)
    assert eventually(fn -> call(b, Ringbus, :push, ["on-c", "x"]) == {:error, :node_down} end)
    assert call(a, Ringbus, :create, ["on-c", [capacity: 4]]) == {:error, :exists}

    for n <- [a, b], do: assert(call(n, Ringbus.Cluster, :forget_node, [c.node]) == {:ok, 1})
    assert call(b, Ringbus, :push, ["on-c", "x"]) == {:error, :no_channel}

    assert call(a, Ringbus, :create, ["on-c", [capacity: 4]]) == :ok
    assert call(b, Ringbus, :push, ["on-c", "y"]) == {:ok, 0}
    assert call(b, Ringbus.Cluster, :home, ["on-c"]) == {:ok, a.node}
    assert call(b, Ringbus, :delete, ["on-c"]) == :ok
    assert call(a, Ringbus, :push, ["on-c", "z"]) == {:error, :no_channel}
  end

  defp lines(node, recorder) do
    call(node, Probe, :log_lines, [recorder])
    |> Enum.filter(&(elem(&1, 1) =~ "Ringbus cluster member"))
    |> Enum.sort()
  end

  defp eventually(check), do: Ringbus.Test.Eventually.eventually(check, 20_000)
end
