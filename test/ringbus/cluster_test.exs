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
    assert %Config{call_timeout: 5, reply_timeout: 100, busy_timeout: 100, join: []} =
             Config.new!([])

    assert %Config{join: [:a@h], call_timeout: 50} = Config.new!(join: [:a@h], call_timeout: 50)

    assert_raise ArgumentError, ~r/expected :call_timeout to be a positive integer, got: 0/, fn ->
      Config.new!(call_timeout: 0)
    end

    assert_raise ArgumentError, ~r/expected :join to be a list of node names/, fn ->
      Config.new!(join: ["a@h"])
    end

    assert_raise ArgumentError,
                 ~r/expected :join to be a list of node names \(atoms\), got: :a@h/,
                 fn ->
                   Config.new!(join: :a@h)
                 end

    assert_raise ArgumentError,
                 ~r/expected :join to be a list of node names \(atoms\), got: \[nil\]/,
                 fn ->
                   Config.new!(join: [nil])
                 end
  end

  for key <- [
        :call_timeout,
        :reply_timeout,
        :busy_timeout,
        :create_timeout,
        :max_buffer_bytes,
        :batch_bytes,
        :reconnect_interval
      ] do
    test "option #{inspect(key)} must be a positive integer" do
      key = unquote(key)
      assert %Config{} = config = Config.new!([{key, 7}])
      assert Map.fetch!(config, key) == 7

      for bad <- [0, -1, 1.5, "100", nil, :infinity] do
        message = "expected #{inspect(key)} to be a positive integer, got: #{inspect(bad)}"
        assert_raise ArgumentError, message, fn -> Config.new!([{key, bad}]) end
      end
    end
  end

  test "cluster options must be a keyword list" do
    assert_raise ArgumentError, ~r/expected cluster options to be a keyword list, got: :x/, fn ->
      Config.new!(:x)
    end

    assert_raise ArgumentError, ~r/invalid cluster options/, fn -> Config.new!(colour: :blue) end

    assert_raise ArgumentError, ~r/expected a list of node names/, fn ->
      Ringbus.Cluster.join(["a@h"])
    end
  end

  test "errors of the cluster raise with their meaning" do
    assert Exception.message(%Ringbus.Error{reason: :node_down, channel: "x"}) =~ "not connected"

    assert Exception.message(%Ringbus.Error{reason: :node_busy, channel: "x"}) =~
             "nothing was done"

    assert Exception.message(%Ringbus.Error{reason: :timeout, channel: "x"}) =~
             "may or may not have been done"
  end
end
