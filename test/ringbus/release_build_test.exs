defmodule Ringbus.ReleaseBuildTest do
  # README's two commands, for real: `MIX_ENV=prod mix release` builds the
  # release and `bin/ringbus start` boots it, configured by RINGBUS_*
  # variables; `eval`, `rpc`, `remote`, `stop` and SIGTERM work on it. Each release
  # runs as an OS process with a node name of its own.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Producer, Promtool}

  @moduletag timeout: 300_000

  @root Path.expand("../..", __DIR__)
  @bin Path.join(@root, "_build/prod/rel/ringbus/bin/ringbus")

  setup_all do
    {out, status} =
      System.cmd("mix", ["release", "--overwrite"],
        cd: @root,
        env: [{"MIX_ENV", "prod"}],
        stderr_to_stdout: true
      )

    if status != 0, do: raise("mix release failed:\n#{out}")
    :ok
  end

  # The environment of a release: the variables given, and no other RINGBUS_
  # variable this VM may have.
  defp env(vars) do
    node = "ringbus_test_#{System.unique_integer([:positive])}"

    unset =
      for {name, _} <- System.get_env(), String.starts_with?(name, "RINGBUS_"), do: {name, nil}

    Map.to_list(Map.merge(Map.new(unset), Map.new([{"RELEASE_NODE", node} | vars])))
  end

  defp run(command, env), do: System.cmd(@bin, command, env: env, stderr_to_stdout: true)

  defp boot(vars, ports \\ [{"RINGBUS_PORT", "0"}, {"RINGBUS_HTTP_PORT", "0"}]) do
    env = env(ports ++ vars)

    port_env =
      for {k, v} <- env,
          do: {String.to_charlist(k), if(v, do: String.to_charlist(v), else: false)}

    release =
      Port.open({:spawn_executable, @bin}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 65_536},
        args: ["start"],
        env: port_env
      ])

    {:os_pid, os_pid} = Port.info(release, :os_pid)
    on_exit(fn -> System.cmd("kill", ["-KILL", "#{os_pid}"], stderr_to_stdout: true) end)

    [tcp, http] =
      await_line(
        release,
        ~r/listening on 127\.0\.0\.1:(\d+) .*HTTP on http:\/\/127\.0\.0\.1:(\d+)/
      )

    %{release: release, os_pid: os_pid, env: env, tcp: String.to_integer(tcp), http: http}
  end

  defp await_line(release, pattern) do
    receive do
      {^release, {:data, {:eol, line}}} ->
        case Regex.run(pattern, line, capture: :all_but_first) do
          nil -> await_line(release, pattern)
          found -> found
        end

      {^release, {:exit_status, status}} ->
        flunk("the release exited with #{status} before saying it listens")
    after
      60_000 -> flunk("the release did not say it listens within 60 s")
    end
  end

  # Runs `expression` in a remote shell on the node (`bin/ringbus remote`,
  # which needs a terminal: `script` gives it one) and returns what the
  # shell printed, once it shows the answer.
  defp remote(env, expression) do
    script = System.find_executable("script") || flunk("script (util-linux) is missing")

    port_env =
      for {k, v} <- env,
          do: {String.to_charlist(k), if(v, do: String.to_charlist(v), else: false)}

    shell =
      Port.open({:spawn_executable, script}, [
        :binary,
        :exit_status,
        args: ["-qec", "#{@bin} remote", "/dev/null"],
        env: port_env
      ])

    {:os_pid, os_pid} = Port.info(shell, :os_pid)
    on_exit(fn -> System.cmd("kill", ["-KILL", "#{os_pid}"], stderr_to_stdout: true) end)
    # Typed once the prompt shows: the shell discards what comes before.
    prompt = await_output(shell, ~r/iex\([^)]*\)1> /, "")
    Port.command(shell, "IO.puts(\"remote: \" <> inspect(#{expression}))\n")
    printed = await_output(shell, ~r/\nremote: [^\r\n]+/, prompt)
    Port.close(shell)
    printed
  end

  defp await_output(shell, pattern, acc) do
    receive do
      {^shell, {:data, data}} ->
        acc = acc <> data
        if acc =~ pattern, do: acc, else: await_output(shell, pattern, acc)

      {^shell, {:exit_status, status}} ->
        flunk("the remote shell exited with #{status}:\n#{acc}")
    after
      60_000 -> flunk("no answer from the remote shell within 60 s:\n#{acc}")
    end
  end

  # What the release wrote, once it has exited.
  defp output(release, lines \\ []) do
    receive do
      {^release, {:data, {_eol, line}}} -> output(release, [line | lines])
    after
      0 -> Enum.reverse(lines)
    end
  end

  defp get(url) do
    {:ok, {{_, 200, _}, _, body}} =
      :httpc.request(:get, {String.to_charlist(url), []}, [], body_format: :binary)

    body
  end

  test "the release ships Ra and the apps it needs, from _vendor/ra" do
    lib = Path.join(@root, "_build/prod/rel/ringbus/lib")

    for app <- ~w(ra aten gen_batch_server seshat) do
      assert [dir] = Path.wildcard(Path.join(lib, app <> "-*")), "no #{app} in #{lib}"
      assert File.regular?(Path.join([dir, "ebin", app <> ".app"]))
    end
  end

  test "a bad variable stops the boot with one line that names it, and status 1" do
    assert {out, 1} = run(["start"], env([{"RINGBUS_MAX_CONNECTIONS", "many"}]))
    assert out == ~s(ringbus: RINGBUS_MAX_CONNECTIONS must be a positive integer, got: "many"\n)
  end

  # No crash dump is written where the release runs from (one left by an
  # earlier run is removed first).
  defp crash_dumps,
    do: [Path.join(@root, "erl_crash.dump"), Path.join(Path.dirname(@bin), "erl_crash.dump")]

  defp remove_crash_dumps, do: Enum.each(crash_dumps(), &File.rm/1)
  defp refute_crash_dump, do: for(dump <- crash_dumps(), do: refute(File.exists?(dump)))

  test "a port in use stops the boot with one line that names its variable, and status 1" do
    remove_crash_dumps()
    {:ok, taken} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(taken)

    assert {out, 1} =
             run(["start"], env([{"RINGBUS_PORT", "#{port}"}, {"RINGBUS_HTTP_PORT", "0"}]))

    assert out ==
             "ringbus: RINGBUS_PORT cannot listen on 127.0.0.1:#{port}: " <>
               "address already in use (:eaddrinuse)\n"

    assert {out, 1} =
             run(["start"], env([{"RINGBUS_PORT", "0"}, {"RINGBUS_HTTP_PORT", "#{port}"}]))

    assert out =~
             ~r/\Aringbus: RINGBUS_HTTP_PORT cannot listen on 127\.0\.0\.1:#{port}: [^\n]+\n\z/

    refute_crash_dump()
  end

  @tag :tmp_dir
  test "a certificate file of garbage stops the boot with one line, and status 1", %{tmp_dir: dir} do
    remove_crash_dumps()
    {_cert, key} = Ringbus.Test.TLS.pem_files!(dir)
    garbage = Path.join(dir, "garbage.pem")
    File.write!(garbage, "garbage\n")

    vars = [{"RINGBUS_CERTFILE", garbage}, {"RINGBUS_KEYFILE", key}]
    env = env(vars ++ [{"RINGBUS_PORT", "0"}, {"RINGBUS_HTTP_PORT", "0"}])
    assert {out, 1} = run(["start"], env)
    assert out == "ringbus: RINGBUS_CERTFILE holds no PEM certificate: #{inspect(garbage)}\n"
    refute_crash_dump()
  end

  @tag :tmp_dir
  test "RINGBUS_NAME, RINGBUS_COOKIE, RINGBUS_NET_TICKTIME, RINGBUS_DATA_DIR and RINGBUS_WAL_MAX_BYTES are the node's",
       %{tmp_dir: tmp} do
    name = "ringbus_named_#{System.unique_integer([:positive])}@127.0.0.1"
    data_dir = Path.join(tmp, "data")

    node =
      boot([
        {"RINGBUS_NAME", name},
        {"RINGBUS_COOKIE", "ringbus_test_cookie"},
        {"RINGBUS_NET_TICKTIME", "17"},
        {"RINGBUS_DATA_DIR", data_dir},
        {"RINGBUS_WAL_MAX_BYTES", "5000000"}
      ])

    # rpc reads the same variables, so it reaches the same node.
    expression =
      "IO.inspect({node(), Node.get_cookie(), :net_kernel.get_net_ticktime(), " <>
        "Ringbus.Replica.Config.data_dir(), Ringbus.Replica.Config.raft()[:wal_max_bytes]}, " <>
        "width: :infinity)"

    assert {out, 0} = run(["rpc", expression], node.env)
    assert out == "{:\"#{name}\", :ringbus_test_cookie, 17, #{inspect(data_dir)}, 5000000}\n"

    assert {_, 0} = run(["stop"], node.env)
    release = node.release
    assert_receive {^release, {:exit_status, 0}}, 30_000
  end

  test "it serves channels, /metrics and the stats table, and bin/ringbus stop stops it" do
    node = boot([{"RINGBUS_CHANNELS", "events:1000,jobs:10:reject"}])

    {:ok, client} = Ringbus.Client.connect(port: node.tcp)
    assert {:ok, 0} = Ringbus.Client.push(client, "events", "hello")
    assert {:error, :exists} = Ringbus.Client.create(client, "jobs", capacity: 1)

    metrics = get("http://127.0.0.1:#{node.http}/metrics")
    assert metrics =~ ~s(ringbus_channel_pushed_total{channel="events"} 1\n)
    assert metrics =~ ~s(ringbus_channel_capacity{channel="jobs"} 10\n)
    assert {"", 0} = Promtool.check(metrics)

    # The stats tables: on the node (rpc), and from a fresh VM (eval) that
    # asks the node where its HTTP endpoint is; neither knows its port.
    {:ok, sub} = Ringbus.Client.subscribe(client, "events")

    for command <- ["rpc", "eval"] do
      assert {table, 0} = run([command, "Ringbus.Release.stats()"], node.env)
      assert table =~ ~r/^CHANNEL\s+LEN\s+CAPACITY/m
      assert table =~ ~r/^events\s+1\s+1000\s/m
      assert table =~ ~r/^jobs\s+0\s+10\s/m
      assert table =~ ~r/^CHANNEL\s+SUBSCRIBER\s+VIA\s+LAG/m
    end

    assert {watched, 0} = run(["rpc", "Ringbus.Release.stats(every: 1, count: 2)"], node.env)
    assert length(Regex.scan(~r/^--- .*, every 1 s \d of 2 ---$/m, watched)) == 2

    # A node that is not running: one line, status 1.
    gone = List.keystore(node.env, "RELEASE_NODE", 0, {"RELEASE_NODE", "absent_#{node.os_pid}"})
    assert {out, 1} = run(["eval", "Ringbus.Release.stats()"], gone)

    assert out =~
             ~r/\Aringbus: cannot reach node absent_\d+@\S+: it is not running, or its cookie differs\n\z/

    assert {"[\"events\", \"jobs\"]\n", 0} =
             run(["rpc", "IO.inspect(Enum.sort(Ringbus.channels()))"], node.env)

    assert {"true\n", 0} =
             run(
               ["rpc", "IO.inspect(List.keymember?(Application.started_applications(), :ra, 0))"],
               node.env
             )

    assert remote(node.env, "Enum.sort(Ringbus.channels())") =~ ~s(remote: ["events", "jobs"])

    assert {_, 0} = run(["stop"], node.env)
    assert_receive {:ringbus_closed, ^sub, :shutting_down}, 30_000
    assert_receive {:ringbus_down, ^client, :shutting_down}, 30_000
    release = node.release
    assert_receive {^release, {:exit_status, 0}}, 30_000

    # At the default level, info: a line per connection opened and closed,
    # each entry one line, with no blank line between entries.
    lines = output(release)
    refute "" in lines
    log = Enum.join(lines, "\n")
    assert log =~ ~r/\[info\] Ringbus binary connection from 127\.0\.0\.1:\d+ opened \(tcp\)/

    assert log =~
             ~r/\[info\] Ringbus binary connection from 127\.0\.0\.1:\d+ closed \(shutting_down\)/
  end

  test "README's command boots it on its default, fixed ports and stops it without an error" do
    # As README says it: no port variable, so 7171 and 9171.
    node = boot([{"RINGBUS_CHANNELS", "events:100000"}], [])
    assert node.tcp == 7171 and node.http == "9171"

    {:ok, client} = Ringbus.Client.connect(port: 7171)
    assert {:ok, 0} = Ringbus.Client.push(client, "events", "hello")
    metrics = get("http://127.0.0.1:9171/metrics")
    assert metrics =~ ~s(ringbus_channel_pushed_total{channel="events"} 1\n)

    assert {_, 0} = run(["stop"], node.env)
    release = node.release
    assert_receive {^release, {:exit_status, 0}}, 30_000
    log = Enum.join(output(release), "\n")
    refute log =~ "[error]"
    refute log =~ "crash"
  end

  test "on SIGTERM a pipelining producer gets an ack or an error for every push" do
    node =
      boot([
        {"RINGBUS_CHANNELS", "events:100000"},
        {"RINGBUS_SHUTDOWN_TIMEOUT", "5000"},
        {"RINGBUS_LOG_LEVEL", "notice"}
      ])

    Producer.start(node.tcp, "events")
    assert_receive {:producing, _producer}, 30_000
    {_, 0} = System.cmd("kill", ["-TERM", "#{node.os_pid}"])

    assert_receive {:produced, result}, 60_000
    assert Enum.map(result.answers, &elem(&1, 0)) == result.sent
    assert result.down == :shutting_down

    assert Enum.all?(
             result.answers,
             &(match?({_, {:ok, _}}, &1) or match?({_, {:error, :closed}}, &1))
           )

    release = node.release
    assert_receive {^release, {:exit_status, 0}}, 30_000
    # At notice, connections are not logged; a stop logs no error.
    log = output(release)
    refute Enum.any?(log, &(&1 =~ "connection from"))
    refute Enum.any?(log, &(&1 =~ "[error]"))
  end
end
