defmodule Mix.Tasks.Ringbus.Server do
  @shortdoc "Runs a Ringbus server (protocol v#{Ringbus.Wire.Frame.version()}) with embedded defaults"

  @moduledoc """
  Runs a Ringbus server until interrupted: channels in memory, protocol
  v#{Ringbus.Wire.Frame.version()} on
  `127.0.0.1:#{Ringbus.Wire.Frame.default_port()}`, channels created on their
  first push.

      mix ringbus.server
      mix ringbus.server --port 7000 --token s3cret
      mix ringbus.server --certfile cert.pem --keyfile key.pem
      mix ringbus.server --resp-port 6380     # Redis clients too (docs/RESP.md)
      mix ringbus.server --name b@127.0.0.1 --cookie c --join a@127.0.0.1 --port 7172

  ## Command line options

    * `--host ADDR` - the address to bind (`RINGBUS_HOST`). Default `127.0.0.1`.
    * `--port N` - the port (`RINGBUS_PORT`). Default `#{Ringbus.Wire.Frame.default_port()}`.
    * `--resp-port N` - also listen for Redis clients (RESP2/RESP3) on this
      port (`RINGBUS_RESP_PORT`); `--resp` does on Redis's port, 6379. Off
      by default. See `Ringbus.Resp`.
    * `--certfile FILE`, `--keyfile FILE` - serve TLS with this certificate and
      key (`RINGBUS_CERTFILE`, `RINGBUS_KEYFILE`).
    * `--token T` - accept HELLO only with this token, granting all channels;
      repeat for more tokens (`RINGBUS_TOKENS`, comma-separated). Tokens
      limited to channel prefixes are set when embedding `Ringbus.Server`.
    * `--max-frame-size BYTES`, `--max-connections N`, `--max-subscriptions N`,
      `--idle-timeout MS`, `--resp-idle-timeout MS`, `--handshake-timeout MS` -
      limits; see `Ringbus.Server`.
    * `--capacity N` - the capacity of channels created by a push. Default 100000.
    * `--no-auto-create` - answer pushes to unknown channels with `no_channel`.
    * `--http-port N` - serve `/metrics`, `/status`, `/health` and `/ready`
      on this port (`RINGBUS_HTTP_PORT`), for `mix ringbus.stats`. Off by default.

  In a cluster (see `Ringbus.Cluster`):

    * `--name NAME@HOST` - start this VM as a distributed node of that name
      (`RINGBUS_NAME`); long names when HOST has a dot, short names
      otherwise. Starts `epmd` if it is not running.
    * `--cookie C` - the cluster's cookie (`RINGBUS_COOKIE`); every node needs
      the same one.
    * `--join NODE,...` - nodes to connect to and keep connected to
      (`RINGBUS_JOIN`); joining one member is enough to meet them all.
    * `--net-ticktime SECONDS` - how long a silent node takes to be declared
      down, ± 25% (`RINGBUS_NET_TICKTIME`); set it alike on every node.
      Default 60, the VM's.
    * `--data-dir DIR` - where replicated channels keep their Raft logs
      (`RINGBUS_DATA_DIR`); default `ringbus_data/NODE` here.

  Every flag stands for a `RINGBUS_*` variable, and the variables are read
  as the release reads them (one table, one parser: see `Ringbus.Release`),
  so `RINGBUS_CHANNELS`, `RINGBUS_TOKENS_FILE`, `RINGBUS_CONFIG` and the
  server's other limits work here too, and an unknown `RINGBUS_` variable is
  an error. Flags win over environment variables. The HTTP endpoint
  (`Ringbus.HTTP`) starts only when `--http-port` or `RINGBUS_HTTP_PORT`
  is given.

  A bad value, a certificate or key file that is missing or holds no PEM
  certificate or key, or a port that cannot be bound stops the task before
  it serves, with one line naming the flag and its variable, and status 1:

      ** (Mix) ringbus: RINGBUS_PORT (--port) cannot listen on 127.0.0.1:7171: address already in use (:eaddrinuse)
  """

  use Mix.Task

  alias Ringbus.Release.Config

  # Each flag and the variable it stands for.
  @flags [
    host: "RINGBUS_HOST",
    port: "RINGBUS_PORT",
    resp_port: "RINGBUS_RESP_PORT",
    certfile: "RINGBUS_CERTFILE",
    keyfile: "RINGBUS_KEYFILE",
    max_frame_size: "RINGBUS_MAX_FRAME_SIZE",
    max_connections: "RINGBUS_MAX_CONNECTIONS",
    max_subscriptions: "RINGBUS_MAX_SUBSCRIPTIONS",
    idle_timeout: "RINGBUS_IDLE_TIMEOUT",
    resp_idle_timeout: "RINGBUS_RESP_IDLE_TIMEOUT",
    handshake_timeout: "RINGBUS_HANDSHAKE_TIMEOUT",
    http_port: "RINGBUS_HTTP_PORT",
    name: "RINGBUS_NAME",
    cookie: "RINGBUS_COOKIE",
    join: "RINGBUS_JOIN",
    net_ticktime: "RINGBUS_NET_TICKTIME",
    data_dir: "RINGBUS_DATA_DIR"
  ]

  @switches Keyword.new(@flags, fn {flag, _} -> {flag, :string} end) ++
              [resp: :boolean, token: :keep, capacity: :string, auto_create: :boolean]

  @impl Mix.Task
  def run(args) do
    {flags, _rest} = OptionParser.parse!(args, strict: @switches)
    boot = config!(flags)
    cluster = cluster_options(boot)
    listen_check!(boot)
    start_node!(cluster)
    if boot.data_dir, do: Application.put_env(:ringbus, :data_dir, boot.data_dir)

    if boot.wal_max_bytes,
      do: Application.put_env(:ringbus, :raft, wal_max_bytes: boot.wal_max_bytes)

    Mix.Task.run("app.start")
    join!(cluster)
    Logger.configure(level: boot.log_level)
    Ringbus.Release.declare(boot.channels)

    opts = boot.server
    server = start!(boot, :binary, fn -> Ringbus.Server.start_link(opts) end)
    kind = if opts[:tls], do: "tls", else: "tcp"
    auth = if opts[:tokens], do: "tokens required", else: "no auth"
    host = :inet.ntoa(opts[:host] || {127, 0, 0, 1})

    Mix.shell().info(
      "Ringbus #{Application.spec(:ringbus, :vsn)} listening on #{host}:#{Ringbus.Server.port(server)} (#{kind}, #{auth}); Ctrl-C to stop"
    )

    if opts[:resp_port] do
      Mix.shell().info(
        "RESP (Redis clients) on #{host}:#{Ringbus.Server.port(server, :resp)}: redis-cli -p #{Ringbus.Server.port(server, :resp)}"
      )
    end

    if boot.http do
      http = start!(boot, :http, fn -> Ringbus.HTTP.start_link(boot.http) end)

      Mix.shell().info(
        "HTTP on http://#{:inet.ntoa(boot.http[:host])}:#{Ringbus.HTTP.port(http)}"
      )
    end

    Mix.shell().info("VM memory: #{Ringbus.Server.Memory.describe()}")

    Process.sleep(:infinity)
  end

  @doc false
  # The configuration the flags and the environment give, as a release's
  # (`Ringbus.Release.Config`), or `Mix.Error` with the line that says what
  # is wrong. No HTTP endpoint unless its port was given.
  def config!(flags, env \\ System.get_env()) do
    case Config.load(env, flag_variables(flags)) do
      {:ok, boot} ->
        if Map.has_key?(boot.given, {:http, :port}), do: boot, else: %{boot | http: nil}

      {:error, line} ->
        Mix.raise(line)
    end
  end

  defp flag_variables(flags) do
    given =
      for {flag, name} <- @flags, value = flags[flag], into: %{} do
        {name, {value, "--#{String.replace(to_string(flag), "_", "-")}"}}
      end

    given
    |> put_new_flag(
      "RINGBUS_RESP_PORT",
      flags[:resp] && "#{Ringbus.Resp.default_port()}",
      "--resp"
    )
    |> put_flag("RINGBUS_TOKENS", tokens(flags), "--token")
    |> put_flag("RINGBUS_AUTO_CREATE", auto_create(flags), auto_create_flag(flags))
  end

  defp put_flag(vars, _name, nil, _flag), do: vars
  defp put_flag(vars, name, value, flag), do: Map.put(vars, name, {value, flag})

  defp put_new_flag(vars, name, value, flag),
    do: if(Map.has_key?(vars, name), do: vars, else: put_flag(vars, name, value, flag))

  defp tokens(flags) do
    case Keyword.get_values(flags, :token) do
      [] -> nil
      tokens -> Enum.join(tokens, ",")
    end
  end

  defp auto_create(flags) do
    cond do
      flags[:auto_create] == false -> "off"
      flags[:capacity] -> "#{flags[:capacity]}:drop_oldest"
      true -> nil
    end
  end

  defp auto_create_flag(flags),
    do: if(flags[:auto_create] == false, do: "--no-auto-create", else: "--capacity")

  @doc false
  # The server options of `flags` (and the environment).
  def options(flags), do: config!(flags).server

  @doc false
  # The cluster part of the configuration, checked.
  def cluster_options(%{} = boot) do
    name = boot.name

    if name == nil and (boot.cookie || boot.join != [] || boot.net_ticktime),
      do: Mix.raise("--cookie, --join and --net-ticktime need --name (RINGBUS_NAME)")

    %{
      name: name,
      name_domain: if(name && host(name) =~ ".", do: :longnames, else: :shortnames),
      cookie: boot.cookie,
      join: boot.join,
      net_ticktime: boot.net_ticktime
    }
  end

  def cluster_options(flags) when is_list(flags), do: cluster_options(config!(flags))

  defp host(name), do: name |> Atom.to_string() |> String.split("@") |> List.last()

  defp listen_check!(boot) do
    case Ringbus.Release.listen_check(boot) do
      :ok -> :ok
      {:error, line} -> Mix.raise(line)
    end
  end

  # Starts a listener linked to the task; a failure to listen (a port taken
  # since listen_check!) is the same one line.
  defp start!(boot, listener, start) do
    trap = Process.flag(:trap_exit, true)
    result = start.()
    Process.flag(:trap_exit, trap)

    case result do
      {:ok, pid} ->
        pid

      {:error, reason} ->
        receive do
          {:EXIT, _pid, _} -> :ok
        after
          0 -> :ok
        end

        Mix.raise(Config.listen_error(boot, listener, listen_reason(reason)))
    end
  end

  # The socket's reason, wherever the supervisors wrapped it.
  defp listen_reason({:listen_failed, reason}), do: reason
  defp listen_reason({:http_failed, reason}), do: listen_reason(reason)
  defp listen_reason({:listen, reason}), do: reason

  defp listen_reason(reason) when is_tuple(reason),
    do: reason |> Tuple.to_list() |> Enum.find_value(reason, &nested_reason/1)

  defp listen_reason(reason), do: reason

  defp nested_reason(term) when is_tuple(term) do
    case listen_reason(term) do
      ^term -> nil
      reason -> reason
    end
  end

  defp nested_reason(_term), do: nil

  defp start_node!(%{name: nil}), do: :ok

  defp start_node!(cluster) do
    if Node.alive?(), do: Mix.raise("this VM is a distributed node already: #{node()}")
    # A node registers its name with epmd, which must run first.
    if epmd = System.find_executable("epmd"), do: System.cmd(epmd, ["-daemon"])

    opts = %{name_domain: cluster.name_domain}

    opts =
      if cluster.net_ticktime, do: Map.put(opts, :net_ticktime, cluster.net_ticktime), else: opts

    case :net_kernel.start(cluster.name, opts) do
      {:ok, _} -> :ok
      {:error, reason} -> Mix.raise("could not start node #{cluster.name}: #{inspect(reason)}")
    end

    if cluster.cookie, do: Node.set_cookie(cluster.cookie)
    :ok
  end

  defp join!(%{name: nil}), do: :ok

  defp join!(cluster) do
    :ok = Ringbus.Cluster.join(cluster.join)

    Mix.shell().info(
      "Node #{node()} (net_ticktime #{:net_kernel.get_net_ticktime()} s), joining: " <>
        if(cluster.join == [], do: "none", else: Enum.join(cluster.join, ", "))
    )
  end
end
