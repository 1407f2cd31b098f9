defmodule Mix.Tasks.Ringbus.ServerTest do
  use ExUnit.Case, async: false

  alias Mix.Tasks.Ringbus.Server, as: Task

  @moduletag :tmp_dir

  setup do
    # The task reads RINGBUS_ variables: none but those a test sets.
    saved =
      for {name, value} <- System.get_env(),
          String.starts_with?(name, "RINGBUS_"),
          do: {name, value}

    Enum.each(saved, fn {name, _} -> System.delete_env(name) end)

    on_exit(fn ->
      for {name, _} <- System.get_env(),
          String.starts_with?(name, "RINGBUS_"),
          do: System.delete_env(name)

      System.put_env(saved)
    end)
  end

  test "flags become server options" do
    opts =
      Task.options(
        host: "127.0.0.2",
        port: "0",
        token: "a",
        token: "b",
        capacity: "10",
        max_frame_size: "2048"
      )

    assert opts[:host] == {127, 0, 0, 2}
    assert opts[:port] == 0
    assert opts[:tokens] == %{"a" => :all, "b" => :all}
    assert opts[:auto_create] == [capacity: 10, overflow: :drop_oldest]
    assert opts[:max_frame_size] == 2048
    refute Keyword.has_key?(opts, :tls)
    # The options are valid server options.
    assert %Ringbus.Server.Config{port: 0} = Ringbus.Server.Config.new!(opts)
  end

  test "--resp-port and --resp turn the RESP listener on" do
    assert Task.options(resp_port: "6380")[:resp_port] == 6380
    assert Task.options(resp: true)[:resp_port] == Ringbus.Resp.default_port()
    refute Keyword.has_key?(Task.options([]), :resp_port)

    assert %Ringbus.Server.Config{resp_port: 6380} =
             Ringbus.Server.Config.new!(Task.options(resp_port: "6380"))
  end

  test "environment variables fill in what flags leave out" do
    System.put_env(%{"RINGBUS_PORT" => "7001", "RINGBUS_TOKENS" => "x,y"})

    opts = Task.options(auto_create: false)
    assert opts[:port] == 7001
    assert opts[:tokens] == %{"x" => :all, "y" => :all}
    assert opts[:auto_create] == false
    assert Task.options(port: "7002")[:port] == 7002
  end

  test "the release's variables, through the release's parser, with its errors" do
    System.put_env(%{"RINGBUS_MAX_CREDIT" => "50", "RINGBUS_CHANNELS" => "a:10"})
    boot = Task.config!([])
    assert boot.server[:max_credit] == 50
    assert boot.channels == [{"a", [capacity: 10, overflow: :drop_oldest]}]
    # No HTTP endpoint unless its port is given.
    assert boot.http == nil
    assert Task.config!(http_port: "0").http == [host: {127, 0, 0, 1}, port: 0]

    assert_raise Mix.Error,
                 "ringbus: RINGBUS_PORT (--port) must be an integer in 0..65535, got: 70000",
                 fn ->
                   Task.options(port: "70000")
                 end

    System.put_env("RINGBUS_NOPE", "1")

    assert_raise Mix.Error, ~r/^ringbus: RINGBUS_NOPE is not a Ringbus variable/, fn ->
      Task.options([])
    end
  end

  test "a certificate without its key, or the reverse, is an error, not plain TCP", ctx do
    {cert, key} = Ringbus.Test.TLS.pem_files!(ctx.tmp_dir)

    assert_raise Mix.Error, ~r/RINGBUS_CERTFILE \(--certfile\) needs RINGBUS_KEYFILE too/, fn ->
      Task.options(certfile: cert)
    end

    assert_raise Mix.Error, ~r/RINGBUS_KEYFILE \(--keyfile\) needs RINGBUS_CERTFILE too/, fn ->
      Task.options(keyfile: key)
    end

    assert Task.options(certfile: cert, keyfile: key)[:tls] == [certfile: cert, keyfile: key]
  end

  test "certificate files that do not exist or hold no PEM stop the task with one line", ctx do
    {cert, key} = Ringbus.Test.TLS.pem_files!(ctx.tmp_dir)
    missing = Path.join(ctx.tmp_dir, "missing.pem")
    garbage = Path.join(ctx.tmp_dir, "garbage.pem")
    File.write!(garbage, "not a certificate at all\n")

    error = fn flags ->
      assert_raise(Mix.Error, fn -> Task.run(flags) end).message
    end

    assert error.(["--certfile", missing, "--keyfile", key]) ==
             "ringbus: RINGBUS_CERTFILE (--certfile) must name a readable file: " <>
               "#{inspect(missing)}: no such file or directory"

    assert error.(["--certfile", garbage, "--keyfile", key]) ==
             "ringbus: RINGBUS_CERTFILE (--certfile) holds no PEM certificate: #{inspect(garbage)}"

    assert error.(["--certfile", cert, "--keyfile", garbage]) ==
             "ringbus: RINGBUS_KEYFILE (--keyfile) holds no PEM private key: #{inspect(garbage)}"

    # A certificate is not a key.
    assert error.(["--certfile", cert, "--keyfile", cert]) =~
             "RINGBUS_KEYFILE (--keyfile) holds no PEM private key"
  end

  test "a port in use stops the task with one line naming it" do
    {:ok, taken} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(taken)

    assert_raise Mix.Error,
                 "ringbus: RINGBUS_PORT (--port) cannot listen on 127.0.0.1:#{port}: " <>
                   "address already in use (:eaddrinuse)",
                 fn -> Task.run(["--port", "#{port}"]) end

    assert_raise Mix.Error,
                 "ringbus: RINGBUS_HTTP_PORT (--http-port) cannot listen on 127.0.0.1:#{port}: " <>
                   "address already in use (:eaddrinuse)",
                 fn -> Task.run(["--port", "0", "--http-port", "#{port}"]) end

    System.put_env("RINGBUS_RESP_PORT", "#{port}")

    assert_raise Mix.Error,
                 ~r/^ringbus: RINGBUS_RESP_PORT cannot listen on 127\.0\.0\.1:#{port}: /,
                 fn ->
                   Task.run(["--port", "0"])
                 end
  end

  test "cluster flags name the node, its cookie and the nodes to join" do
    cluster =
      Task.cluster_options(
        name: "b@127.0.0.1",
        cookie: "c",
        join: "a@127.0.0.1, c@127.0.0.1",
        net_ticktime: "10"
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

    assert_raise Mix.Error, ~r/RINGBUS_NAME \(--name\) must be a node name/, fn ->
      Task.cluster_options(name: "b")
    end

    assert_raise Mix.Error,
                 ~r/RINGBUS_NET_TICKTIME \(--net-ticktime\) must be a positive integer/,
                 fn ->
                   Task.cluster_options(name: "b@h", net_ticktime: "0")
                 end

    # The same variables the release reads.
    System.put_env(%{
      "RINGBUS_NAME" => "e@127.0.0.1",
      "RINGBUS_COOKIE" => "k",
      "RINGBUS_NET_TICKTIME" => "7"
    })

    assert %{name: :"e@127.0.0.1", cookie: :k, net_ticktime: 7} = Task.cluster_options([])
  end

  test "mix help ringbus.server names the protocol version it speaks" do
    version = "protocol v#{Ringbus.Wire.Frame.version()}"
    assert Mix.Task.shortdoc(Task) =~ version
    assert Mix.Task.moduledoc(Task) =~ ~r/protocol\s+v#{Ringbus.Wire.Frame.version()}/
    refute Mix.Task.moduledoc(Task) =~ ~r/protocol\s+v1\b/
  end
end
