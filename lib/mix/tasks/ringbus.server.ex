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
      `--idle-timeout MS`, `--handshake-timeout MS` - limits; see `Ringbus.Server`.
    * `--capacity N` - the capacity of channels created by a push. Default 100000.
    * `--no-auto-create` - answer pushes to unknown channels with `no_channel`.

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

  Flags win over environment variables.
  """

  use Mix.Task

  @switches [
    host: :string,
    port: :integer,
    resp_port: :integer,
    resp: :boolean,
    certfile: :string,
    keyfile: :string,
    token: :keep,
    max_frame_size: :integer,
    max_connections: :integer,
    max_subscriptions: :integer,
    idle_timeout: :integer,
    handshake_timeout: :integer,
    capacity: :integer,
    auto_create: :boolean,
    name: :string,
    cookie: :string,
    join: :string,
    net_ticktime: :integer
  ]

  @impl Mix.Task
  def run(args) do
    {flags, _rest} = OptionParser.parse!(args, strict: @switches)
    cluster = cluster_options(flags)
    start_node!(cluster)
    Mix.Task.run("app.start")
    join!(cluster)

    opts = options(flags)
    {:ok, server} = Ringbus.Server.start_link(opts)
    kind = if opts[:tls], do: "tls", else: "tcp"
    auth = if opts[:tokens], do: "tokens required", else: "no auth"
    host = opts[:host] || "127.0.0.1"

    Mix.shell().info(
      "Ringbus #{Application.spec(:ringbus, :vsn)} listening on #{host}:#{Ringbus.Server.port(server)} (#{kind}, #{auth}); Ctrl-C to stop"
    )

    if opts[:resp_port] do
      Mix.shell().info(
        "RESP (Redis clients) on #{host}:#{Ringbus.Server.port(server, :resp)}: redis-cli -p #{Ringbus.Server.port(server, :resp)}"
      )
    end

    Mix.shell().info("VM memory: #{Ringbus.Server.Memory.describe()}")

    Process.sleep(:infinity)
  end

  @doc false
  # The cluster flags (and their environment variables), checked.
  def cluster_options(flags) do
    env = &System.get_env/1
    name = flags[:name] || env.("RINGBUS_NAME")
    cookie = flags[:cookie] || env.("RINGBUS_COOKIE")
    join = (flags[:join] || env.("RINGBUS_JOIN") || "") |> String.split(",", trim: true)

    ticktime =
      flags[:net_ticktime] ||
        (env.("RINGBUS_NET_TICKTIME") && String.to_integer(env.("RINGBUS_NET_TICKTIME")))

    if name == nil and (cookie || join != [] || ticktime),
      do: Mix.raise("--cookie, --join and --net-ticktime need --name")

    if name != nil and not String.contains?(name, "@"),
      do: Mix.raise("expected --name to be NAME@HOST, got: #{inspect(name)}")

    if ticktime != nil and ticktime < 1,
      do: Mix.raise("expected --net-ticktime to be a positive integer, got: #{ticktime}")

    %{
      name: name && String.to_atom(name),
      name_domain: if(name && host(name) =~ ".", do: :longnames, else: :shortnames),
      cookie: cookie && String.to_atom(cookie),
      join: Enum.map(join, &String.to_atom(String.trim(&1))),
      net_ticktime: ticktime
    }
  end

  defp host(name), do: name |> String.split("@") |> List.last()

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

  @doc false
  def options(flags) do
    env = &System.get_env/1
    certfile = flags[:certfile] || env.("RINGBUS_CERTFILE")
    keyfile = flags[:keyfile] || env.("RINGBUS_KEYFILE")

    tokens =
      case Keyword.get_values(flags, :token) do
        [] -> (env.("RINGBUS_TOKENS") || "") |> String.split(",", trim: true)
        tokens -> tokens
      end

    auto_create =
      if Keyword.get(flags, :auto_create, true),
        do: [capacity: flags[:capacity] || 100_000, overflow: :drop_oldest],
        else: false

    [
      host: flags[:host] || env.("RINGBUS_HOST"),
      port: flags[:port] || (env.("RINGBUS_PORT") && String.to_integer(env.("RINGBUS_PORT"))),
      resp_port: resp_port(flags, env.("RINGBUS_RESP_PORT")),
      tls: tls!(certfile, keyfile),
      tokens: if(tokens != [], do: Map.new(tokens, &{&1, :all})),
      auto_create: auto_create,
      max_frame_size: flags[:max_frame_size],
      max_connections: flags[:max_connections],
      max_subscriptions: flags[:max_subscriptions],
      idle_timeout: flags[:idle_timeout],
      handshake_timeout: flags[:handshake_timeout]
    ]
    |> Enum.reject(fn {_key, value} -> is_nil(value) end)
  end

  # TLS takes both files; one without the other must not serve plain TCP.
  defp tls!(nil, nil), do: nil

  defp tls!(certfile, keyfile) when certfile != nil and keyfile != nil,
    do: [certfile: certfile, keyfile: keyfile]

  defp tls!(certfile, _keyfile) do
    {given, missing} =
      if certfile, do: {"--certfile", "--keyfile"}, else: {"--keyfile", "--certfile"}

    Mix.raise(
      "#{given} was given without #{missing} (or RINGBUS_CERTFILE/RINGBUS_KEYFILE): " <>
        "TLS needs both, and the server will not fall back to plain TCP"
    )
  end

  defp resp_port(flags, env) do
    cond do
      flags[:resp_port] -> flags[:resp_port]
      flags[:resp] -> Ringbus.Resp.default_port()
      env -> String.to_integer(env)
      true -> nil
    end
  end
end
