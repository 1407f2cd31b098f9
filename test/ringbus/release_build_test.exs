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

  test "it serves channels, /metrics and the stats table, and bin/ringbus stop stops it" do
    node = boot([{"RINGBUS_CHANNELS", "events:1000,jobs:10:reject"}])

    {:ok, client} = Ringbus.Client.connect(port: node.tcp)
    assert {:ok, 0} = Ringbus.Client.push(client, "events", "hello")
    assert {:error, :exists} = Ringbus.Client.create(client, "jobs", capacity: 1)

    metrics = get("http://127.0.0.1:#{node.http}/metrics")
    assert metrics =~ ~s(ringbus_channel_pushed_total{channel="events"} 1\n)
    assert metrics =~ ~s(ringbus_channel_capacity{channel="jobs"} 10\n)
    assert {"", 0} = Promtool.check(metrics)

    # The stats table, from a fresh VM that reads the node's HTTP endpoint.
    eval_env = List.keystore(node.env, "RINGBUS_HTTP_PORT", 0, {"RINGBUS_HTTP_PORT", node.http})
    assert {table, 0} = run(["eval", "Ringbus.Release.stats()"], eval_env)
    assert table =~ ~r/^CHANNEL\s+LEN\s+CAPACITY/m
    assert table =~ ~r/^events\s+1\s+1000\s/m
    assert table =~ ~r/^jobs\s+0\s+10\s/m

    assert {"[\"events\", \"jobs\"]\n", 0} =
             run(["rpc", "IO.inspect(Enum.sort(Ringbus.channels()))"], node.env)

    assert {"true\n", 0} =
             run(
               ["rpc", "IO.inspect(List.keymember?(Application.started_applications(), :ra, 0))"],
               node.env
             )

    assert remote(node.env, "Enum.sort(Ringbus.channels())") =~ ~s(remote: ["events", "jobs"])

    assert {_, 0} = run(["stop"], node.env)
    assert_receive {:ringbus_down, ^client, :shutting_down}, 30_000
    release = node.release
    assert_receive {^release, {:exit_status, 0}}, 30_000

    # At the default level, info: a line per connection opened and closed.
    log = Enum.join(output(release), "\n")
    assert log =~ ~r/\[info\] Ringbus connection from 127\.0\.0\.1:\d+ opened \(tcp\)/
    assert log =~ ~r/\[info\] Ringbus connection from 127\.0\.0\.1:\d+ closed \(shutting_down\)/
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
    refute Enum.any?(log, &(&1 =~ "Ringbus connection"))
    refute Enum.any?(log, &(&1 =~ "[error]"))
  end
end
