defmodule Ringbus.Bench.Groups.RabbitServers do
  @moduledoc false
  # A RabbitMQ cluster on loopback for the groups bench: `count` broker
  # nodes (`rb1@127.0.0.1`, ...) run from Debian's package as
  # `bin/setup-rabbitmq` unpacks it in `_vendor/rabbitmq/`, with this
  # machine's `erl`, each with its own AMQP and distribution ports, its data
  # and logs in a temp dir of its own, a cookie of its own. The first node
  # starts alone; the others start with it as their cluster seed (`rabbit`'s
  # `cluster_nodes`), so they join it as they boot. Readiness is asked of
  # the first node over distribution (this VM becomes a node on 127.0.0.1
  # when it is not one, and stops being one in `stop/1`). Stopped by OS pid.

  alias Ringbus.Bench.RedisServer

  @type node_info :: %{node: node(), port: :inet.port_number(), os_pid: non_neg_integer()}
  @type t :: %{dir: Path.t(), nodes: [node_info()], started_dist: boolean()}

  @doc "The unpacked broker's directory, or nil when `bin/setup-rabbitmq` has not run."
  @spec home() :: Path.t() | nil
  def home do
    dir = Path.expand("../../../../../_vendor/rabbitmq", __DIR__)
    if Path.wildcard(Path.join(dir, "plugins/rabbit-[0-9]*/ebin")) != [], do: dir
  end

  @doc "Runs `bin/setup-rabbitmq` when the broker is not unpacked; raises with its reason."
  @spec ensure!() :: Path.t()
  def ensure! do
    with nil <- home() do
      setup = Path.expand("../../../../../bin/setup-rabbitmq", __DIR__)
      {out, status} = System.cmd(setup, [], stderr_to_stdout: true)

      if status != 0 or home() == nil,
        do: raise("#{setup} failed (exit #{status}): RabbitMQ is missing\n#{out}")

      home()
    end
  end

  @doc """
  Puts the AMQP client (and `rabbit_common`, with the apps they need) on
  this VM's code path from the unpacked package and starts it.
  """
  @spec load_client!(Path.t()) :: :ok
  def load_client!(home) do
    for app <- ~w(amqp_client rabbit_common credentials_obfuscation jsx recon),
        ebin <- Path.wildcard(Path.join(home, "plugins/#{app}-[0-9]*/ebin")),
        do: Code.append_path(ebin)

    case Application.ensure_all_started(:amqp_client) do
      {:ok, _} -> :ok
      {:error, reason} -> raise "the AMQP client from #{home} did not start: #{inspect(reason)}"
    end
  end

  @doc "Starts the cluster; waits, `ms` at most, until every node runs in it."
  @spec start!(pos_integer(), pos_integer()) :: t()
  def start!(count, ms \\ 120_000) do
    home = ensure!()
    erl = System.find_executable("erl") || raise "erl is not on the PATH"
    started_dist = ensure_dist!()

    dir =
      Path.join(System.tmp_dir!(), "ringbus_bench_rabbit_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)
    cookie = "ringbus_bench_#{System.unique_integer([:positive])}"
    names = for i <- 1..count, do: :"rb#{i}@127.0.0.1"
    for name <- names, do: :erlang.set_cookie(name, String.to_atom(cookie))
    deadline = System.monotonic_time(:millisecond) + ms
    [seed | rest] = names

    spawn = &spawn_node(erl, home, dir, cookie, &1, seed)
    cluster = %{dir: dir, nodes: [spawn.(seed)], started_dist: started_dist}
    stopping(cluster, fn -> await!(cluster, seed, [seed], deadline) end)
    cluster = %{cluster | nodes: cluster.nodes ++ Enum.map(rest, spawn)}
    stopping(cluster, fn -> await!(cluster, seed, names, deadline) end)
    cluster
  end

  # Runs `fun`; should it raise, stops the nodes started so far first.
  defp stopping(cluster, fun) do
    fun.()
  rescue
    e ->
      stop(cluster)
      reraise e, __STACKTRACE__
  end

  defp ensure_dist! do
    if Node.alive?() do
      false
    else
      # Distribution on loopback only, as everything the bench starts.
      Application.put_env(:kernel, :inet_dist_use_interface, {127, 0, 0, 1})
      name = :"ringbus_bench_#{System.unique_integer([:positive])}@127.0.0.1"
      {:ok, _} = :net_kernel.start([name, :longnames])
      true
    end
  end

  defp spawn_node(erl, home, dir, cookie, name, seed) do
    [short, _host] = name |> Atom.to_string() |> String.split("@")
    base = Path.join(dir, short)
    File.mkdir_p!(Path.join(base, "home"))
    port = RedisServer.free_port()
    dist = RedisServer.free_port()
    seeds = if name == seed, do: "[]", else: "['#{seed}']"
    advanced = Path.join(base, "advanced.config")
    File.write!(advanced, "[{rabbit, [{cluster_nodes, {#{seeds}, disc}}]}].\n")

    env = [
      {"HOME", Path.join(base, "home")},
      {"RABBITMQ_HOME", home},
      {"RABBITMQ_NODENAME", Atom.to_string(name)},
      {"RABBITMQ_USE_LONGNAME", "true"},
      {"RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1"},
      {"RABBITMQ_NODE_PORT", "#{port}"},
      {"RABBITMQ_DIST_PORT", "#{dist}"},
      {"RABBITMQ_MNESIA_BASE", Path.join(base, "mnesia")},
      {"RABBITMQ_LOG_BASE", Path.join(base, "log")},
      {"RABBITMQ_CONFIG_FILE", Path.join(base, "rabbitmq")},
      {"RABBITMQ_ADVANCED_CONFIG_FILE", advanced},
      {"RABBITMQ_ENABLED_PLUGINS_FILE", Path.join(base, "enabled_plugins")},
      {"RABBITMQ_PLUGINS_DIR", Path.join(home, "plugins")},
      {"RABBITMQ_PID_FILE", Path.join(base, "pid")},
      {"ERL_LIBS", Path.join(home, "plugins")},
      {"ERL_EPMD_ADDRESS", "127.0.0.1"}
    ]

    args =
      ~w(-noinput -name #{name} -setcookie #{cookie} -boot start_sasl -s rabbit boot) ++
        ~w(-kernel inet_dist_use_interface {127,0,0,1}) ++
        ~w(-kernel inet_dist_listen_min #{dist} -kernel inet_dist_listen_max #{dist})

    # The node's output goes to a file, not to this VM's mailbox; `sh` and
    # then `erl` exec the VM, so the port's OS pid is the broker's.
    os_port =
      Port.open({:spawn_executable, "/bin/sh"}, [
        :binary,
        :exit_status,
        args: ["-c", ~s(exec "$0" "$@" >"#{Path.join(base, "out")}" 2>&1), erl | args],
        env: Enum.map(env, fn {k, v} -> {~c"#{k}", ~c"#{v}"} end),
        cd: base
      ])

    {:os_pid, os_pid} = Port.info(os_port, :os_pid)
    %{node: name, port: port, os_pid: os_pid}
  end

  defp await!(cluster, seed, names, deadline) do
    # Hidden, so that this VM is no part of the cluster's `global`, which
    # would otherwise warn of partitions as the nodes stop.
    _ = :net_kernel.hidden_connect_node(seed)

    running = :rpc.call(seed, :rabbit_nodes, :all_running, [], 2_000)

    cond do
      is_list(running) and Enum.sort(running) == Enum.sort(names) ->
        :ok

      System.monotonic_time(:millisecond) > deadline ->
        raise "RabbitMQ did not come up as a cluster of #{Enum.count(names)} " <>
                "in time (running: #{inspect(running)}); its nodes' last output:\n" <>
                tails(cluster)

      true ->
        receive after: (200 -> :ok)
        await!(cluster, seed, names, deadline)
    end
  end

  # What each node printed last (the files go with the temp dir).
  defp tails(cluster) do
    Enum.map_join(cluster.nodes, "\n", fn %{node: node} ->
      [short, _] = node |> Atom.to_string() |> String.split("@")

      lines =
        case File.read(Path.join([cluster.dir, short, "out"])) do
          {:ok, ""} -> ["(nothing yet)"]
          {:ok, out} -> out |> String.split("\n", trim: true) |> Enum.take(-5)
          {:error, reason} -> ["(no output: #{reason})"]
        end

      Enum.map_join(lines, "\n", &"  #{node}: #{&1}")
    end)
  end

  @doc """
  The quorum queue `queue`'s members and its leader's node, as the
  cluster's first node sees them; raises unless it has a member on every
  node.
  """
  @spec quorum_members!(t(), String.t()) :: %{members: [node()], leader: node()}
  def quorum_members!(%{nodes: [first | _] = nodes}, queue) do
    _ = :net_kernel.hidden_connect_node(first.node)
    {:ok, q} = :rpc.call(first.node, :rabbit_amqqueue, :lookup, [{:resource, "/", :queue, queue}])
    members = :rpc.call(first.node, :amqqueue, :get_type_state, [q]).nodes
    {_ra_name, leader} = :rpc.call(first.node, :amqqueue, :get_pid, [q])

    if Enum.sort(members) != Enum.sort(Enum.map(nodes, & &1.node)),
      do: raise("quorum queue #{queue} has members #{inspect(members)}, not every node")

    %{members: members, leader: leader}
  end

  @doc "Stops every node (by OS pid, waiting for each) and removes the dir."
  @spec stop(t()) :: :ok
  def stop(%{dir: dir, nodes: nodes, started_dist: started_dist}) do
    for %{node: node} <- nodes, do: :erlang.disconnect_node(node)
    for %{os_pid: pid} <- nodes, do: Ringbus.Test.OsProcess.stop(pid)
    if started_dist, do: :net_kernel.stop()
    File.rm_rf!(dir)
    :ok
  end
end
