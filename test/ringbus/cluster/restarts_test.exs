defmodule Ringbus.Cluster.RestartsTest do
  # Three nodes that declare the same channels at boot, as a release does
  # with one RINGBUS_CHANNELS on every node (`Ringbus.Release.create_channels/1`
  # right after the cluster layer starts, joining the others), killed with
  # SIGKILL and started again in several orders. After each restart every
  # node must agree on each channel's home, and a push from any node to any
  # channel must be stored.
  use ExUnit.Case, async: false

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.ClusterProbe

  @moduletag timeout: 180_000
  # Many, so that a restarted node's links come up while it declares them.
  @channels for i <- 1..200, do: {"ev-#{i}", [capacity: 100]}
  @names Enum.map(@channels, &elem(&1, 0))

  test "nodes declaring the same channels at boot converge after restarts in any order" do
    # The others reconnect to a restarted node seldom, so that it has
    # started before they connect to it (see `:on_link` below).
    nodes = Nodes.start(3, "declared", net_ticktime: 2, cluster: [reconnect_interval: 3_000])
    on_exit(fn -> Nodes.stop(nodes) end)
    names = Enum.map(nodes, & &1.node)

    # The first boot: every node joins the others and declares at once; the
    # second in the opposite order, so that the channels have two homes.
    nodes
    |> Enum.with_index()
    |> Enum.map(fn {n, i} ->
      channels = if i == 1, do: Enum.reverse(@channels), else: @channels

      Task.async(fn ->
        :ok = call(n, Ringbus.Cluster, :join, [names -- [n.node]])
        call(n, Ringbus.Release, :create_channels, [channels])
      end)
    end)
    |> Enum.each(&assert(Task.await(&1, 30_000) == :ok))

    assert_converged(nodes)

    # Whom each round kills: the home of "ev-1" (whose channels the others
    # ask it to recreate), another node, two at once (the two nodes that
    # home most channels, the one with more first: it comes back while the
    # other is still down), all three; see `restart/3` for how each
    # declares its channels.
    rounds = [
      {:homes, :boot},
      {:home, :on_link},
      {:home, :boot},
      {:other, :on_link},
      {:home, :linked},
      {:home_and_other, :on_link},
      {:home_and_other, :on_link},
      {:homes, :boot},
      {:home_and_other, :on_link},
      {:all, :boot}
    ]

    Enum.reduce(rounds, nodes, fn {who, declare}, nodes ->
      victims = victims(nodes, who)
      nodes = restart(nodes, victims, declare)
      on_exit(fn -> Nodes.stop(nodes) end)
      assert_converged(nodes, "after restarting #{inspect(victims)} (#{declare})")
      nodes
    end)
  end

  defp victims(nodes, :homes) do
    nodes
    |> homes()
    |> Enum.frequencies_by(fn {_, [{:ok, home} | _]} -> home end)
    |> Enum.sort_by(&elem(&1, 1), :desc)
    |> Enum.take(2)
    |> Enum.map(fn {home, _} -> Enum.find(nodes, &(&1.node == home)).name end)
  end

  defp victims(nodes, who) do
    [{:ok, home}] = nodes |> homes() |> Map.fetch!("ev-1") |> Enum.uniq()
    {[h], others} = Enum.split_with(nodes, &(&1.node == home))
    other = hd(others)

    case who do
      :home -> [h.name]
      :other -> [other.name]
      :home_and_other -> [h.name, other.name]
      :all -> Enum.map(nodes, & &1.name)
    end
  end

  # Kills `victims` (by name), then starts them again one after the other.
  # `:boot` starts Ringbus with a release's configuration, read by
  # `Ringbus.Release.Config` from the variables a release would have, so the
  # channels are declared by the release's own boot step, right after the
  # cluster layer starts to join the others (which it does before they
  # reconnect to it); `:on_link` starts it plain, joining no one, and
  # declares as a release does as soon as one of the others connects to
  # it: its links come up while it declares, racing the others' answers to
  # the directory sync each link starts; `:linked` starts it plain and
  # declares once all its links are up.
  defp restart(nodes, victims, declare) do
    {down, up} = Enum.split_with(nodes, &(&1.name in victims))
    for n <- down, do: Nodes.signal(n, :kill)
    # The victims in the order given: the home first.
    down = Enum.sort_by(down, &Enum.find_index(victims, fn v -> v == &1.name end))
    names = Enum.map(nodes, & &1.node)

    Enum.reduce(down, up, fn n, up ->
      n =
        case declare do
          :boot ->
            Nodes.restart(%{n | opts: release_opts(n.opts, names -- [n.node])})

          :on_link ->
            n = Nodes.restart(n)
            assert call(n, ClusterProbe, :declare_on_nodeup, [@channels]) == :ok
            n

          :linked ->
            n = Nodes.restart(n)
            :ok = Nodes.await_links([n | up])
            assert call(n, Ringbus.Release, :create_channels, [@channels]) == :ok
            n
        end

      [n | up]
    end)
    |> Enum.sort_by(& &1.name)
  end

  defp release_opts(opts, others) do
    {:ok, boot} =
      Ringbus.Release.Config.load(%{
        "RINGBUS_CHANNELS" =>
          Enum.map_join(@channels, ",", fn {name, o} -> "#{name}:#{o[:capacity]}" end),
        "RINGBUS_PORT" => "0",
        "RINGBUS_HTTP_PORT" => "off",
        "RINGBUS_JOIN" => Enum.join(others, ",")
      })

    # As config/runtime.exs does: the boot, and the nodes to join.
    opts
    |> Keyword.put(:env, release: boot)
    |> Keyword.update!(:cluster, &Keyword.put(&1, :join, boot.join))
  end

  defp assert_converged(nodes, context \\ "at first boot") do
    deadline = System.monotonic_time(:millisecond) + 5_000

    agreed =
      Nodes.wait_until(deadline, fn ->
        homes = homes(nodes)
        Enum.all?(@names, &match?([{:ok, _}], Enum.uniq(homes[&1]))) and all_push?(nodes)
      end)

    split = for {ch, homes} <- homes(nodes), length(Enum.uniq(homes)) > 1, do: {ch, homes}
    failed = for {_, _, result} = push <- pushes(nodes), not match?({:ok, _}, result), do: push

    assert agreed == :ok,
           "not converged within 5 s #{context}: homes not agreed on #{inspect(split)}, " <>
             "pushes refused #{inspect(failed)}"
  end

  # name => the home each node resolves it to, in the order of `nodes`.
  defp homes(nodes) do
    nodes
    |> Enum.flat_map(&call(&1, ClusterProbe, :homes, [@names]))
    |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
  end

  defp pushes(nodes),
    do:
      for(
        n <- nodes,
        {ch, result} <- call(n, ClusterProbe, :push_each, [@names]),
        do: {n.name, ch, result}
      )

  defp all_push?(nodes), do: Enum.all?(pushes(nodes), &match?({_, _, {:ok, _}}, &1))

  defp call(n, module, fun, args), do: Nodes.call(n, module, fun, args, 30_000)
end
