defmodule Ringbus.Test.Nodes do
  @moduledoc """
  Real Ringbus nodes on this machine, started with OTP's `:peer`, for the
  cluster tests, and for the cluster and replication benches and the chaos
  run, which compile this file with theirs.

  Each node is a separate BEAM (`connection: :standard_io`, so a stopped node
  cannot wedge the caller's distribution), named uniquely for this run (other
  runs may share the machine's epmd), with this VM's code paths, the same
  cookie and `net_ticktime`, and Ringbus started with the given cluster
  options. The caller need not be a distributed node: it drives the nodes
  through `:peer.call/5` over their standard I/O.

      nodes = Nodes.start(3, "mytest", net_ticktime: 2, cluster: [call_timeout: 50])
      :ok = Nodes.join(nodes)
      [a, b, c] = nodes
      Nodes.call(a, Ringbus, :create, ["x", [capacity: 10, node: c.node]])
      Nodes.signal(c, :stop)     # SIGSTOP: c goes silent
      Nodes.signal(c, :cont)
      Nodes.stop(nodes)          # CONTinues each before stopping it
  """

  @typedoc "A started node."
  @type t :: %{
          peer: pid(),
          node: node(),
          name: atom(),
          os_pid: String.t(),
          opts: keyword(),
          data_dir: Path.t()
        }

  @doc """
  Starts `count` nodes named `prefix_N_UNIQUE@127.0.0.1` in parallel.

  Options: `:net_ticktime` (seconds, default 60), `:cluster` (Ringbus's
  cluster options), `:cookie` (default: a fresh one per call), `:env`
  (more of Ringbus's application env). Each node keeps its replicated
  channels in a `:data_dir` of its own under the system's temp dir, which
  `restart/1` keeps and `stop/1` removes.
  """
  @spec start(pos_integer(), String.t(), keyword()) :: [t()]
  def start(count, prefix, opts \\ []) do
    opts = Keyword.put_new_lazy(opts, :cookie, fn -> :"ringbus_#{unique()}" end)
    ensure_epmd()
    run = unique()

    1..count
    |> Enum.map(fn i -> Task.async(fn -> start_one(:"#{prefix}_#{i}_#{run}", opts) end) end)
    |> Enum.map(&Task.await(&1, 60_000))
  end

  @doc """
  Starts `count` nodes as `start/3` does, joins them (`join/2`, 30 s at
  most), runs `fun` with them and stops them, whatever `fun` does.
  """
  @spec with_joined(pos_integer(), String.t(), keyword(), ([t()] -> result)) :: result
        when result: term()
  def with_joined(count, prefix, opts, fun) do
    nodes = start(count, prefix, opts)

    try do
      :ok = join(nodes, 30_000)
      fun.(nodes)
    after
      stop(nodes)
    end
  end

  @doc "Starts a node of `name` again (after it was killed), with the same options."
  @spec restart(t()) :: t()
  def restart(%{name: name, opts: opts}),
    do: Task.async(fn -> start_one(name, opts) end) |> Task.await(60_000)

  @doc """
  Makes every node join every other and waits, up to `timeout` ms, until
  each sees all the others as members with links up.
  """
  @spec join([t()], timeout()) :: :ok | {:error, :timeout}
  def join(nodes, timeout \\ 15_000) do
    names = Enum.map(nodes, & &1.node)
    for n <- nodes, do: :ok = call(n, Ringbus.Cluster, :join, [names -- [n.node]])
    await_links(nodes, timeout)
  end

  @doc "Waits until every node in `nodes` has its links to all the others up."
  @spec await_links([t()], timeout()) :: :ok | {:error, :timeout}
  def await_links(nodes, timeout \\ 15_000) do
    deadline = System.monotonic_time(:millisecond) + timeout
    names = Enum.map(nodes, & &1.node)

    wait_until(deadline, fn ->
      Enum.all?(nodes, fn n ->
        links = call(n, Ringbus, :cluster_info, []).links
        Enum.all?(names -- [n.node], &match?(%{^&1 => %{state: :up}}, links))
      end)
    end)
  end

  @doc "Calls `module.fun(args)` on a node, within `timeout` ms."
  @spec call(t(), module(), atom(), [term()], timeout()) :: term()
  def call(%{peer: peer}, module, fun, args, timeout \\ 10_000),
    do: :peer.call(peer, module, fun, args, timeout)

  @doc "Sends a signal to a node's OS process: `:stop`, `:cont` or `:kill`."
  @spec signal(t(), :stop | :cont | :kill) :: :ok
  def signal(%{os_pid: os_pid}, signal) do
    flag = %{stop: "-STOP", cont: "-CONT", kill: "-KILL"} |> Map.fetch!(signal)
    {_, 0} = System.cmd("kill", [flag, os_pid])
    :ok
  end

  @doc "Stops nodes, continuing each first in case it was stopped; killed ones are skipped."
  @spec stop([t()]) :: :ok
  def stop(nodes) do
    for n <- nodes do
      System.cmd("kill", ["-CONT", n.os_pid], stderr_to_stdout: true)

      try do
        :peer.stop(n.peer)
      catch
        :exit, _ -> :ok
      end

      File.rm_rf(n.data_dir)
    end

    :ok
  end

  @doc "Polls `check` every 20 ms until it is true or `deadline` (monotonic ms) passes."
  @spec wait_until(integer(), (() -> boolean())) :: :ok | {:error, :timeout}
  def wait_until(deadline, check) do
    cond do
      check.() -> :ok
      System.monotonic_time(:millisecond) > deadline -> {:error, :timeout}
      true -> Process.sleep(20) && wait_until(deadline, check)
    end
  end

  defp start_one(name, opts) do
    # The node's standard I/O goes to the group leader of the process that
    # starts it. Elixir sets binary mode on it at boot, which a captured one
    # (a test's `capture_io`) refuses; the VM's own `:user` does not.
    Process.group_leader(self(), Process.whereis(:user))

    args =
      [~c"-setcookie", to_charlist(opts[:cookie])] ++
        [~c"-kernel", ~c"net_ticktime", to_charlist(Keyword.get(opts, :net_ticktime, 60))] ++
        [~c"-kernel", ~c"logger_level", ~c"emergency", ~c"-logger", ~c"level", ~c"emergency"] ++
        Enum.flat_map(code_paths(), &[~c"-pa", &1])

    {:ok, peer, node} =
      :peer.start(%{
        name: name,
        host: ~c"127.0.0.1",
        longnames: true,
        connection: :standard_io,
        args: args
      })

    :ok =
      :peer.call(peer, Application, :put_env, [
        :ringbus,
        :cluster,
        Keyword.get(opts, :cluster, [])
      ])

    env = Keyword.get(opts, :env, [])
    default_dir = Path.join([System.tmp_dir!(), "ringbus_nodes", Atom.to_string(name)])
    data_dir = Keyword.get(env, :data_dir, default_dir)

    for {key, value} <- Keyword.put(env, :data_dir, data_dir),
        do: :ok = :peer.call(peer, Application, :put_env, [:ringbus, key, value])

    {:ok, _} = :peer.call(peer, Application, :ensure_all_started, [:ringbus], 30_000)
    os_pid = :peer.call(peer, :os, :getpid, []) |> to_string()
    %{peer: peer, node: node, name: name, os_pid: os_pid, opts: opts, data_dir: data_dir}
  end

  # The paths OTP does not give every node already: Elixir's and this build's.
  defp code_paths do
    otp = to_string(:code.lib_dir())
    for path <- :code.get_path(), not String.starts_with?(to_string(path), otp), do: path
  end

  defp ensure_epmd do
    case System.find_executable("epmd") do
      nil -> :ok
      epmd -> System.cmd(epmd, ["-daemon"], stderr_to_stdout: true)
    end

    :ok
  end

  defp unique, do: "#{System.pid()}_#{System.unique_integer([:positive])}"
end
