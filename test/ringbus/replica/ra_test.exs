defmodule Ringbus.Replica.RaTest do
  # Ra (from Debian's rabbitmq-server, see bin/setup-ra) is on the code path
  # and started with Ringbus: a system in a data dir of its own commits
  # commands on one member in this VM and on three members on three nodes.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Nodes

  # The channels these tests create, gone after each (the status page test
  # counts what the page shows).
  setup do
    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, "ra_channel_"),
          do: Ringbus.delete(name)
    end)
  end

  @moduletag :tmp_dir
  @moduletag timeout: 120_000

  # A machine every node has: the state is a sum, and a command adds to it.
  @machine {:simple, &Kernel.+/2, 0}

  defp system_config(name, dir) do
    %{
      name: name,
      names: :ra_system.derive_names(name),
      data_dir: String.to_charlist(dir),
      wal_data_dir: String.to_charlist(dir)
    }
  end

  test "Ra is started with Ringbus" do
    assert List.keymember?(Application.started_applications(), :ra, 0)
  end

  test "a one-member cluster in this VM commits commands and keeps them in its data dir",
       %{tmp_dir: dir} do
    system = :"ringbus_ra_test_#{System.unique_integer([:positive])}"
    {:ok, _} = :ra_system.start(system_config(system, dir))
    id = {:"sum_#{system}", node()}

    assert {:ok, [^id], []} = :ra.start_cluster(system, :sum, @machine, [id])
    assert {:ok, 5, ^id} = :ra.process_command(id, 5)
    assert {:ok, 12, ^id} = :ra.process_command(id, 7)
    assert File.ls!(dir) != []

    # Stopped and restarted from its log, it has the sum still.
    assert :ok = :ra.stop_server(system, id)
    assert :ok = :ra.restart_server(system, id)
    assert {:ok, 13, _} = :ra.process_command(id, 1)
    assert :ok = :ra.stop_server(system, id)
  end

  test "a channel's machine in Ra: commands reach the ring, and a restart from the log rebuilds it",
       %{tmp_dir: dir} do
    system = :"ringbus_ra_test_#{System.unique_integer([:positive])}"
    {:ok, _} = :ra_system.start(system_config(system, dir))
    name = "ra_channel_#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, capacity: 3)
    id = {:"channel_#{system}", node()}
    machine = {:module, Ringbus.Replica.Machine, %{channel: name, capacity: 3}}

    assert {:ok, [^id], []} = :ra.start_cluster(system, :channel, machine, [id])
    assert {:ok, {:ok, 0}, ^id} = :ra.process_command(id, {:push, {:p, 1}, ["a", "b"]})
    assert {:ok, {:ok, [{0, "a"}]}, ^id} = :ra.process_command(id, {:pull, 1})
    assert {:ok, {:ok, 2}, ^id} = :ra.process_command(id, {:push, {:p, 2}, ["c", "d"]})
    assert {:ok, {:ok, 0}, ^id} = :ra.process_command(id, {:push, {:p, 1}, ["a", "b"]})
    assert {:ok, [{1, "b"}, {2, "c"}, {3, "d"}], 1} = Ringbus.read(name, 0, 10)

    # The ring is lost (a node restart) and the server recovers from its log.
    :ok = :ra.stop_server(system, id)
    :ok = Ringbus.delete(name)
    :ok = Ringbus.create(name, capacity: 3)
    :ok = :ra.restart_server(system, id)
    assert {:ok, {:ok, 4}, _} = :ra.process_command(id, {:push, {:p, 3}, ["e"]})
    assert {:ok, [{2, "c"}, {3, "d"}, {4, "e"}], 2} = Ringbus.read(name, 0, 10)
    assert {:ok, {:ok, 2}, _} = :ra.process_command(id, {:push, {:p, 2}, ["c", "d"]})
    :ok = :ra.stop_server(system, id)
  end

  test "a three-member cluster on three nodes commits through its leader", %{tmp_dir: dir} do
    nodes = Nodes.start(3, "ra")
    on_exit(fn -> Nodes.stop(nodes) end)

    ids =
      for {n, i} <- Enum.with_index(nodes) do
        config = system_config(:ringbus_ra_test, Path.join(dir, "node#{i}"))
        assert {:ok, _} = Nodes.call(n, :ra_system, :start, [config])
        {:sum, n.node}
      end

    [a, b, c] = nodes

    assert {:ok, started, []} =
             Nodes.call(a, :ra, :start_cluster, [:ringbus_ra_test, :sum, @machine, ids], 30_000)

    assert Enum.sort(started) == Enum.sort(ids)
    assert {:ok, 5, leader} = Nodes.call(b, :ra, :process_command, [ids, 5, 10_000], 15_000)
    assert leader in ids
    assert {:ok, 7, _} = Nodes.call(c, :ra, :process_command, [ids, 2, 10_000], 15_000)

    # Every member applied both: each answers a local query with the sum.
    for {n, id} <- Enum.zip(nodes, ids) do
      assert :ok =
               Nodes.wait_until(System.monotonic_time(:millisecond) + 10_000, fn ->
                 match?(
                   {:ok, {_, 7}, _},
                   Nodes.call(n, :ra, :local_query, [id, &Function.identity/1])
                 )
               end)
    end
  end
end
