defmodule Ringbus.Release do
  @moduledoc """
  Ringbus as a release: built with `MIX_ENV=prod mix release`, configured at
  boot from environment variables.

      MIX_ENV=prod mix release
      RINGBUS_CHANNELS=events:100000 _build/prod/rel/ringbus/bin/ringbus start

  `bin/ringbus start` runs it in the foreground, `daemon` in the background,
  `stop` stops it gracefully (as SIGTERM does), `remote` opens a shell on
  it, `rpc` runs an expression on it and `eval` in a fresh VM, for instance
  the tables of the running node (see `stats/1`):

      _build/prod/rel/ringbus/bin/ringbus rpc 'Ringbus.Release.stats()'

  `GET /health` and `GET /ready` on the HTTP endpoint are for probes (see
  `Ringbus.HTTP`).

  ## Configuration

  Read once, at boot, by `config/runtime.exs`: from the environment and,
  when `RINGBUS_CONFIG` names one, from a file of `NAME=value` lines (`#`
  comments, values optionally quoted), the environment winning. An unknown
  `RINGBUS_` variable or a bad value stops the boot with one line that names
  the variable, and exit status 1:

      ringbus: RINGBUS_PORT must be an integer in 0..65535, got: "70000"

  So does a TLS file that holds no PEM certificate (`RINGBUS_CERTFILE`) or
  private key (`RINGBUS_KEYFILE`), read and decoded at boot, and a port that
  cannot be bound, checked before any listener starts:

      ringbus: RINGBUS_PORT cannot listen on 127.0.0.1:7171: address already in use (:eaddrinuse)

  `mix ringbus.server` reads the same variables with the same parser, its
  flags standing for them. `RINGBUS_NAME`, `RINGBUS_COOKIE` and
  `RINGBUS_NET_TICKTIME` must be known before the VM starts, so the
  release's `rel/env.sh` turns them into `RELEASE_NODE` (and
  `RELEASE_DISTRIBUTION=name` when the host has a dot), `RELEASE_COOKIE` and
  `-kernel net_ticktime` for every command (`start`, `rpc`, `remote`,
  `stop`); `RELEASE_NODE` and `RELEASE_COOKIE` still work when they are not
  set.

  | Variable | Default | Meaning |
  |---|---|---|
  #{for {name, _type, default, text} <- Ringbus.Release.Config.variables(), into: "" do
    "| `#{name}` | #{default} | #{text} |\n"
  end}
  The server's limits are those of `Ringbus.Server`; `RINGBUS_CHANNELS`
  creates channels before the server accepts its first connection: one
  with `@replicas=N` as `Ringbus.create/2` with `replicas: N` (on this node
  and the first N - 1 connected ones, its log under `RINGBUS_DATA_DIR`),
  one with `@max_age=MS` as with `max_age: MS`.
  Such a channel that exists already, restored from its log by a restart,
  is kept; one that cannot be created stops the boot with one line:

      ringbus: RINGBUS_CHANNELS "orders" cannot be created: 3 replicas need 3 connected nodes, this one included (RINGBUS_JOIN) (:node_down)

  To give
  the VM a super carrier for multi-MB frames (see `Ringbus.Server`), set
  `ELIXIR_ERL_OPTIONS="+MMscs 4096 +MMsco false"`.

  ## What runs

      Ringbus.Supervisor
      ├── Ringbus.Store, the cluster layer (joining RINGBUS_JOIN's nodes),
      │   Ringbus.Server.Directory
      ├── the channels of RINGBUS_CHANNELS, created in order
      ├── Ringbus.Server          the binary protocol (and RESP)
      └── Ringbus.HTTP             /metrics, /status(.json, .txt), /health, /ready

  ## Stopping

  `bin/ringbus stop` or SIGTERM stops the node: children stop in reverse,
  so the HTTP endpoint closes first, then the server stops accepting and
  each connection answers the read it had taken in (its acks included),
  sends `ERROR shutting_down` and closes, within `RINGBUS_SHUTDOWN_TIMEOUT`
  ms; then the channels go. A stop takes at most that long plus a moment.
  """

  require Logger

  @typedoc "The boot configuration `config/runtime.exs` reads; see the module doc."
  @type boot :: Ringbus.Release.Config.boot()

  @doc """
  What every node runs, release or not, after the store and before the
  replicated channels (whose machines put their consumer groups in it) and
  any server: the owner of the consumer groups of the channels it holds
  (`Ringbus.Group.TableOwner`).
  """
  @spec node_children() :: [module()]
  def node_children, do: [Ringbus.Group.TableOwner]

  @doc """
  The children `Ringbus.Application` starts for a boot configuration:
  none without one (outside a release, or when embedded).
  """
  @spec children(boot() | nil) :: [Supervisor.child_spec() | {module(), term()}]
  def children(nil), do: []

  def children(boot) do
    List.flatten([
      %{id: :ringbus_ports, start: {__MODULE__, :check_ports, [boot]}},
      %{id: :ringbus_channels, start: {__MODULE__, :declare, [boot.channels]}},
      {Ringbus.Server, Keyword.put(boot.server, :name, Ringbus.Server)},
      if(boot.http, do: [{Ringbus.HTTP, Keyword.put(boot.http, :name, Ringbus.HTTP)}], else: []),
      %{id: :ringbus_announce, start: {__MODULE__, :announce, [boot]}}
    ])
  end

  @doc false
  # A child's start, first: a port that cannot be bound stops the boot with
  # one line naming its variable, and status 1 (a failed start would print
  # the supervisors' reports and write a crash dump).
  @spec check_ports(boot()) :: :ignore
  def check_ports(boot), do: boot |> listen_check() |> ignore_or_halt()

  @doc """
  Whether each port `boot` declares can be listened on now: each is opened
  and closed again. `:ok`, or the line that names the variable (or flag) of
  the first that cannot, and why:

      ringbus: RINGBUS_PORT cannot listen on 127.0.0.1:7171: address already in use (:eaddrinuse)
  """
  @spec listen_check(boot()) :: :ok | {:error, String.t()}
  def listen_check(boot) do
    server_host = Keyword.get(boot.server, :host, {127, 0, 0, 1})

    listeners =
      [{:binary, server_host, Keyword.get(boot.server, :port, Ringbus.Wire.Frame.default_port())}] ++
        if(boot.server[:resp_port], do: [{:resp, server_host, boot.server[:resp_port]}], else: []) ++
        if(boot.http, do: [{:http, boot.http[:host], boot.http[:port]}], else: [])

    Enum.find_value(listeners, :ok, fn {listener, host, port} ->
      case probe(host, port) do
        :ok -> nil
        {:error, reason} -> {:error, Ringbus.Release.Config.listen_error(boot, listener, reason)}
      end
    end)
  end

  defp probe(_host, 0), do: :ok

  defp probe(host, port) do
    family = if tuple_size(host) == 8, do: :inet6, else: :inet

    case :gen_tcp.listen(port, [family, ip: host, reuseaddr: true]) do
      {:ok, socket} -> :gen_tcp.close(socket)
      {:error, reason} -> {:error, reason}
    end
  end

  @doc false
  # A child's start: creates the declared channels, then steps aside; one
  # that cannot be created stops the boot with one line, and status 1.
  @spec declare([{String.t(), keyword()}]) :: :ignore
  def declare(channels), do: channels |> create_channels() |> ignore_or_halt()

  # A boot step's result: done (the child steps aside), or the one line that
  # says why not, and status 1.
  defp ignore_or_halt(:ok), do: :ignore

  defp ignore_or_halt({:error, line}) do
    IO.puts(:stderr, line)
    System.halt(1)
  end

  @doc """
  Creates the channels `RINGBUS_CHANNELS` declares, in order. One that
  exists already is kept as it is: a replicated one its node's catalogue
  restored after a restart (logged at info), or another (logged as a
  warning). `{:error, line}` names the first that cannot be created, and
  why (a replicated one with fewer nodes connected than its replicas).
  """
  @spec create_channels([{String.t(), keyword()}]) :: :ok | {:error, String.t()}
  def create_channels(channels) do
    Enum.find_value(channels, :ok, fn {name, opts} ->
      case Ringbus.create(name, opts) do
        :ok ->
          nil

        {:error, :exists} ->
          exists(name, opts)
          nil

        {:error, reason} ->
          {:error,
           "ringbus: RINGBUS_CHANNELS #{inspect(name)} cannot be created: " <>
             create_error(reason, opts[:replicas])}
      end
    end)
  end

  defp exists(name, opts) do
    case {opts[:replicas], Ringbus.info(name)} do
      {n, {:ok, %{replicas: _}}} when n != nil ->
        Logger.info("Ringbus channel #{inspect(name)} restored from its log")

      _ ->
        Logger.warning("Ringbus channel #{inspect(name)} exists already")
    end
  end

  defp create_error(:node_down, n) when is_integer(n),
    do: "#{n} replicas need #{n} connected nodes, this one included (RINGBUS_JOIN) (:node_down)"

  defp create_error(:timeout, n) when is_integer(n),
    do: "its #{n} replicas elected no leader in time (:timeout)"

  defp create_error(reason, _n), do: inspect(reason)

  @doc false
  # A child's start, last: says what the node serves, then steps aside.
  @spec announce(boot()) :: :ignore
  def announce(boot) do
    server = boot.server
    host = server |> Keyword.get(:host, {127, 0, 0, 1}) |> :inet.ntoa()
    kind = if server[:tls], do: "tls", else: "tcp"
    auth = if server[:tokens], do: "tokens required", else: "no auth"

    http =
      if boot.http,
        do: "HTTP on http://#{:inet.ntoa(boot.http[:host])}:#{Ringbus.HTTP.port(Ringbus.HTTP)}",
        else: "no HTTP"

    Logger.notice(
      "Ringbus #{Application.spec(:ringbus, :vsn)} listening on " <>
        "#{host}:#{Ringbus.Server.port(Ringbus.Server)} (#{kind}, #{auth}); #{http}; " <>
        "#{length(boot.channels)} channels declared; VM memory: #{Ringbus.Server.Memory.describe()}"
    )

    :ignore
  end

  @doc """
  Prints the running node's tables (channels, subscriptions, consumer
  groups and their consumers, servers, the cluster), read from its HTTP endpoint's `/status.txt`:

      bin/ringbus rpc 'Ringbus.Release.stats()'
      bin/ringbus rpc 'Ringbus.Release.stats(every: 2, count: 10)'
      bin/ringbus eval 'Ringbus.Release.stats()'

  With `rpc` it runs on the node, which knows its endpoint; with `eval` (a
  fresh VM) it asks the node `RELEASE_NODE` names, over distribution with
  `RELEASE_COOKIE`, where its endpoint is. Either way the tables print where
  the command was typed.

  Options:

    * `:every` - seconds between refreshes: prints the tables again every
      so many seconds, each under a line with the time (like
      `redis-cli --stat`). Default: print once.
    * `:count` - how many times to print, with `:every`. Default: until
      interrupted.
    * `:url` - the endpoint to read (`"http://127.0.0.1:9171"`), instead of
      asking the node.

  When the endpoint cannot be found or read it prints one line saying why
  on stderr and halts the VM with status 1 (under `rpc`, the node's VM is
  not halted: it raises, and `rpc` exits with status 1).
  """
  @spec stats(keyword()) :: :ok
  def stats(opts \\ []) do
    opts = Keyword.validate!(opts, [:every, :count, :url])

    result =
      with {:ok, url} <- if(opts[:url], do: {:ok, opts[:url]}, else: find_endpoint()) do
        watch(url, opts[:every], opts[:count], &IO.write/1)
      end

    case result do
      :ok -> :ok
      {:error, line} -> fail(line)
    end
  end

  defp fail(line) do
    if Process.whereis(Ringbus.Supervisor) do
      # On the node (rpc): never halt it.
      raise RuntimeError, line
    else
      IO.puts(:stderr, line)
      System.halt(1)
    end
  end

  @doc """
  Prints `url`'s `/status.txt` with `write`, once or, with `every` seconds,
  `count` times (`nil`: until interrupted), each under a line with the
  time. `{:error, line}` on the first read that fails.
  """
  @spec watch(String.t(), pos_integer() | nil, pos_integer() | nil, (iodata() -> term())) ::
          :ok | {:error, String.t()}
  def watch(url, every, count, write), do: watch(url, every, count, write, 1)

  defp watch(url, every, count, write, n) do
    with {:ok, text} <- read(url) do
      if every do
        time = DateTime.utc_now() |> DateTime.truncate(:second) |> DateTime.to_iso8601()
        of = if count, do: " #{n} of #{count}", else: ""
        write.(["--- #{time}, every #{every} s#{of} ---\n", text, "\n"])
      else
        write.(text)
      end

      if every && (count == nil or n < count) do
        Process.sleep(every * 1000)
        watch(url, every, count, write, n + 1)
      else
        :ok
      end
    end
  end

  defp read(url) do
    case Ringbus.HTTP.get_status_text(url) do
      {:ok, text} -> {:ok, text}
      {:error, reason} -> {:error, "ringbus: cannot read #{url}/status.txt: #{describe(reason)}"}
    end
  end

  # httpc's errors, said in words.
  defp describe({:failed_connect, details}) do
    case Enum.find_value(details, fn d -> match?({:inet, _, _}, d) && elem(d, 2) end) do
      reason when is_atom(reason) -> "#{:inet.format_error(reason)} (#{inspect(reason)})"
      _ -> "cannot connect"
    end
  end

  defp describe({:http_status, code}), do: "HTTP status #{code}"
  defp describe(reason), do: inspect(reason)

  @doc false
  # Asked on the node, locally or over rpc: the URL of its HTTP endpoint.
  @spec endpoint() :: {:ok, String.t()} | {:error, String.t()}
  def endpoint do
    boot = Application.get_env(:ringbus, :release)

    cond do
      Process.whereis(Ringbus.HTTP) == nil ->
        {:error, "ringbus: #{node()} runs no HTTP endpoint (RINGBUS_HTTP_PORT is off)"}

      true ->
        host = if boot && boot.http, do: boot.http[:host], else: {127, 0, 0, 1}
        host = if host in [{0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}], do: {127, 0, 0, 1}, else: host
        {:ok, "http://#{url_host(host)}:#{Ringbus.HTTP.port(Ringbus.HTTP)}"}
    end
  end

  defp url_host(host) when tuple_size(host) == 8, do: "[#{:inet.ntoa(host)}]"
  defp url_host(host), do: :inet.ntoa(host)

  defp find_endpoint do
    cond do
      Process.whereis(Ringbus.Supervisor) ->
        endpoint()

      node = System.get_env("RELEASE_NODE") ->
        remote_endpoint(node)

      true ->
        {:error, "ringbus: no node to ask: run it with bin/ringbus rpc or eval, or give :url"}
    end
  end

  # From a fresh VM (bin/ringbus eval): becomes a hidden node and asks.
  defp remote_endpoint(name) do
    longnames? = System.get_env("RELEASE_DISTRIBUTION") == "name"
    domain = if longnames?, do: :longnames, else: :shortnames
    self_name = :"ringbus_stats_#{System.unique_integer([:positive])}"

    with :ok <- start_distribution(self_name, domain) do
      if cookie = System.get_env("RELEASE_COOKIE"), do: Node.set_cookie(String.to_atom(cookie))

      target =
        if String.contains?(name, "@"),
          do: String.to_atom(name),
          else: :"#{name}@#{node() |> Atom.to_string() |> String.split("@") |> List.last()}"

      try do
        :erpc.call(target, __MODULE__, :endpoint, [], 5_000)
      catch
        :error, {:erpc, :noconnection} ->
          {:error,
           "ringbus: cannot reach node #{target}: it is not running, or its cookie differs"}

        kind, reason ->
          {:error,
           "ringbus: node #{target} did not say where its endpoint is: #{inspect({kind, reason})}"}
      end
    end
  end

  defp start_distribution(name, domain) do
    if Node.alive?() do
      :ok
    else
      case :net_kernel.start(name, %{name_domain: domain, hidden: true}) do
        {:ok, _} ->
          :ok

        {:error, reason} ->
          {:error, "ringbus: cannot start distribution to ask the node: #{inspect(reason)}"}
      end
    end
  end
end
