defmodule Ringbus.Cluster.MembersTest do
  # What a node logs as members join, leave and come back, on real nodes
  # (`:peer`): the lines are recorded on the node that logs them.
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Cluster.Nodes
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

  defp lines(node, recorder) do
    call(node, Probe, :log_lines, [recorder])
    |> Enum.filter(&(elem(&1, 1) =~ "Ringbus cluster member"))
    |> Enum.sort()
  end

  defp eventually(check), do: Ringbus.Test.Eventually.eventually(check, 20_000)
end
