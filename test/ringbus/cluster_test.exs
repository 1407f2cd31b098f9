defmodule Ringbus.ClusterTest do
  # The cluster layer in this VM, which is not a distributed node: the
  # channel API is the local one, and the cluster answers what it can.
  use ExUnit.Case, async: true

  alias Ringbus.Cluster.Config

  test "a node that is not distributed is a cluster of one" do
    refute Node.alive?()
    assert Ringbus.Cluster.join([:"other@127.0.0.1"]) == {:error, :not_alive}
    assert %{node: :nonode@nohost, members: [:nonode@nohost], links: %{}} = Ringbus.cluster_info()

    name = {__MODULE__, :alone}
    :ok = Ringbus.create(name, capacity: 4)
    assert Ringbus.Cluster.home(name) == {:ok, node()}
    assert Ringbus.Cluster.home({__MODULE__, :nowhere}) == {:error, :no_channel}

    assert Ringbus.create({__MODULE__, :there}, capacity: 4, node: :"other@127.0.0.1") ==
             {:error, :node_down}

    assert Ringbus.create({__MODULE__, :here}, capacity: 4, node: node()) == :ok
    assert Ringbus.delete({__MODULE__, :here}) == :ok
    assert Ringbus.delete(name) == :ok
    assert Ringbus.delete(name) == {:error, :no_channel}
  end

  test "the process that watches the members' scope is not itself a member" do
    # OTP 25's :pg crashes (and logged an error at every stop) on the exit
    # of a process that is both (erlang/otp#7625).
    scope = Ringbus.Cluster.Links.scope()
    watcher = Process.whereis(Ringbus.Cluster.Members)
    assert [member] = :pg.get_local_members(scope, Ringbus.Cluster.Links.members_group())
    assert member != watcher
    assert {:links, links} = Process.info(watcher, :links)
    assert member in links
  end

  test "options are checked, with the key and the value in the error" do
    assert %Config{call_timeout: 5, busy_timeout: 100, join: []} = Config.new!([])
    assert %Config{join: [:a@h], call_timeout: 50} = Config.new!(join: [:a@h], call_timeout: 50)

    assert_raise ArgumentError, ~r/expected :call_timeout to be a positive integer, got: 0/, fn ->
      Config.new!(call_timeout: 0)
    end

    assert_raise ArgumentError, ~r/expected :join to be a list of node names/, fn ->
      Config.new!(join: ["a@h"])
    end

    assert_raise ArgumentError, ~r/invalid cluster options/, fn -> Config.new!(colour: :blue) end

    assert_raise ArgumentError, ~r/expected a list of node names/, fn ->
      Ringbus.Cluster.join(["a@h"])
    end
  end

  test "errors of the cluster raise with their meaning" do
    assert Exception.message(%Ringbus.Error{reason: :node_down, channel: "x"}) =~ "not connected"
    assert Exception.message(%Ringbus.Error{reason: :node_busy, channel: "x"}) =~ "in time"
  end
end
