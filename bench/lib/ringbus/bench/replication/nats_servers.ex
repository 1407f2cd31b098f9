defmodule Ringbus.Bench.Replication.NatsServers do
  @moduledoc false
  # Three `nats-server`s with JetStream, clustered on loopback ports, their
  # stores in a temp dir of their own; started by `start!/1`, stopped by OS
  # pid with `stop/1` (which also removes the dir). One may be killed
  # (`kill!/1`) to measure failover.

  alias Ringbus.Bench.RedisServer
  alias Ringbus.Bench.Replication.NatsClient

  @type server :: %{
          name: String.t(),
          port: :inet.port_number(),
          os_pid: non_neg_integer(),
          conf: Path.t(),
          log: Path.t()
        }
  @type t :: %{dir: Path.t(), servers: [server()]}

  @doc "The `nats-server` executable, or nil."
  @spec executable() :: String.t() | nil
  def executable do
    System.find_executable("nats-server") ||
      Enum.find(["/usr/sbin/nats-server", "/usr/bin/nats-server"], &File.exists?/1)
  end

  @doc "Starts the cluster and waits, `ms` at most, until JetStream answers on every server."
  @spec start!(pos_integer()) :: t()
  def start!(ms \\ 30_000) do
    exe = executable() || raise "nats-server is not installed (Debian: nats-server)"
    dir = Path.join(System.tmp_dir!(), "ringbus_bench_nats_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    names = ~w(n1 n2 n3)
    ports = for _ <- names, do: {RedisServer.free_port(), RedisServer.free_port()}

    routes =
      Enum.map_join(ports, ", ", fn {_, cluster} -> "nats-route://127.0.0.1:#{cluster}" end)

    servers =
      for {name, {port, cluster}} <- Enum.zip(names, ports) do
        conf = Path.join(dir, "#{name}.conf")

        File.write!(conf, """
        server_name: #{name}
        listen: 127.0.0.1:#{port}
        jetstream { store_dir: "#{Path.join(dir, name)}" }
        cluster { name: ringbus_bench, listen: 127.0.0.1:#{cluster}, routes: [#{routes}] }
        """)

        spawn_server(exe, %{
          name: name,
          port: port,
          conf: conf,
          log: Path.join(dir, "#{name}.log")
        })
      end

    nats = %{dir: dir, servers: servers}

    case await_jetstream(servers, System.monotonic_time(:millisecond) + ms) do
      :ok ->
        nats

      :error ->
        stop(nats)
        raise "nats-server's JetStream did not come up within #{ms} ms (logs in #{dir})"
    end
  end

  defp spawn_server(exe, server) do
    os_port =
      Port.open({:spawn_executable, exe}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: ["-c", server.conf, "-l", server.log]
      ])

    {:os_pid, os_pid} = Port.info(os_port, :os_pid)
    Map.put(server, :os_pid, os_pid)
  end

  # JetStream answers once its meta group has a leader; until then it errs.
  defp await_jetstream(servers, deadline) do
    ready? =
      Enum.all?(servers, fn s ->
        case NatsClient.connect(s.port) do
          {:ok, client} ->
            reply = NatsClient.request(client, "$JS.API.INFO", "", 1_000)
            NatsClient.close(client)
            match?({:ok, json} when json != "", reply) and not (elem(reply, 1) =~ "\"error\"")

          {:error, _} ->
            false
        end
      end)

    cond do
      ready? ->
        :ok

      System.monotonic_time(:millisecond) > deadline ->
        :error

      true ->
        receive after: (100 -> :ok)
        await_jetstream(servers, deadline)
    end
  end

  @doc "The server named `name`."
  @spec server!(t(), String.t()) :: server()
  def server!(%{servers: servers}, name),
    do: Enum.find(servers, &(&1.name == name)) || raise("no server #{name}")

  @doc "kill -9 of a server's OS process."
  @spec kill!(server()) :: :ok
  def kill!(%{os_pid: pid}) do
    {_, 0} = System.cmd("kill", ["-KILL", "#{pid}"], stderr_to_stdout: true)
    :ok
  end

  @doc "Stops every server (by OS pid, waiting for each, 10 s at most) and removes the dir."
  @spec stop(t()) :: :ok
  def stop(%{dir: dir, servers: servers}) do
    for %{os_pid: pid} <- servers, do: Ringbus.Test.OsProcess.stop(pid)

    File.rm_rf!(dir)
    :ok
  end
end
