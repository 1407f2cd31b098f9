defmodule Mix.Tasks.Ringbus.ServerTest do
  use ExUnit.Case, async: false

  alias Mix.Tasks.Ringbus.Server, as: Task

  test "flags become server options" do
    opts =
      Task.options(
        host: "127.0.0.2",
        port: 0,
        token: "a",
        token: "b",
        capacity: 10,
        max_frame_size: 2048
      )

    assert opts[:host] == "127.0.0.2"
    assert opts[:port] == 0
    assert opts[:tokens] == %{"a" => :all, "b" => :all}
    assert opts[:auto_create] == [capacity: 10, overflow: :drop_oldest]
    assert opts[:max_frame_size] == 2048
    refute Keyword.has_key?(opts, :tls)
    # The options are valid server options.
    assert %Ringbus.Server.Config{port: 0} = Ringbus.Server.Config.new!(opts)
  end

  test "--resp-port and --resp turn the RESP listener on" do
    assert Task.options(resp_port: 6380)[:resp_port] == 6380
    assert Task.options(resp: true)[:resp_port] == Ringbus.Resp.default_port()
    refute Keyword.has_key?(Task.options([]), :resp_port)

    assert %Ringbus.Server.Config{resp_port: 6380} =
             Ringbus.Server.Config.new!(Task.options(resp_port: 6380))
  end

  test "environment variables fill in what flags leave out" do
    System.put_env(%{"RINGBUS_PORT" => "7001", "RINGBUS_TOKENS" => "x,y"})
    on_exit(fn -> Enum.each(~w(RINGBUS_PORT RINGBUS_TOKENS), &System.delete_env/1) end)

    opts = Task.options(auto_create: false)
    assert opts[:port] == 7001
    assert opts[:tokens] == %{"x" => :all, "y" => :all}
    assert opts[:auto_create] == false
    assert Task.options(port: 7002)[:port] == 7002
  end

  test "a certificate without its key, or the reverse, is an error, not plain TCP" do
    assert_raise Mix.Error, ~r/--certfile was given without --keyfile/, fn ->
      Task.options(certfile: "cert.pem")
    end

    assert_raise Mix.Error, ~r/--keyfile was given without --certfile/, fn ->
      Task.options(keyfile: "key.pem")
    end

    assert Task.options(certfile: "c.pem", keyfile: "k.pem")[:tls] ==
             [certfile: "c.pem", keyfile: "k.pem"]
  end

  test "cluster flags name the node, its cookie and the nodes to join" do
    cluster =
      Task.cluster_options(
        name: "b@127.0.0.1",
        cookie: "c",
        join: "a@127.0.0.1, c@127.0.0.1",
        net_ticktime: 10
      )

    assert cluster == %{
             name: :"b@127.0.0.1",
             name_domain: :longnames,
             cookie: :c,
             join: [:"a@127.0.0.1", :"c@127.0.0.1"],
             net_ticktime: 10
           }

    assert %{name: :b@host, name_domain: :shortnames, join: []} =
             Task.cluster_options(name: "b@host")

    assert %{name: nil} = Task.cluster_options([])
    assert_raise Mix.Error, ~r/need --name/, fn -> Task.cluster_options(join: "a@h") end
    assert_raise Mix.Error, ~r/NAME@HOST/, fn -> Task.cluster_options(name: "b") end

    assert_raise Mix.Error, ~r/net-ticktime/, fn ->
      Task.cluster_options(name: "b@h", net_ticktime: 0)
    end
  end

  test "mix help ringbus.server names the protocol version it speaks" do
    version = "protocol v#{Ringbus.Wire.Frame.version()}"
    assert Mix.Task.shortdoc(Task) =~ version
    assert Mix.Task.moduledoc(Task) =~ ~r/protocol\s+v#{Ringbus.Wire.Frame.version()}/
    refute Mix.Task.moduledoc(Task) =~ ~r/protocol\s+v1\b/
  end
end
