defmodule Ringbus.Release do
  @moduledoc """
  Ringbus as a release: built with `MIX_ENV=prod mix release`, configured at
  boot from environment variables.

      MIX_ENV=prod mix release
      RINGBUS_CHANNELS=events:100000 _build/prod/rel/ringbus/bin/ringbus start

  `bin/ringbus start` runs it in the foreground, `daemon` in the background,
  `stop` stops it gracefully (as SIGTERM does), `remote` opens a shell on
  it, and `eval` runs an expression in a fresh VM, for instance the channel
  table of the running node:

      _build/prod/rel/ringbus/bin/ringbus eval 'Ringbus.Release.stats()'

  ## Configuration

  Read once, at boot, by `config/runtime.exs`: from the environment and,
  when `RINGBUS_CONFIG` names one, from a file of `NAME=value` lines (`#`
  comments, values optionally quoted), the environment winning. An unknown
  `RINGBUS_` variable or a bad value stops the boot with one line that names
  the variable, and exit status 1:

      ringbus: RINGBUS_PORT must be an integer in 0..65535, got: "70000"

  | Variable | Default | Meaning |
  |---|---|---|
  #{for {name, _type, default, text} <- Ringbus.Release.Config.variables(), into: "" do
    "| `#{name}` | #{default} | #{text} |\n"
  end}
  The server's limits are those of `Ringbus.Server`; `RINGBUS_CHANNELS`
  creates channels before the server accepts its first connection. To give
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
  The children `Ringbus.Application` starts for a boot configuration:
  none without one (outside a release, or when embedded).
  """
  @spec children(boot() | nil) :: [Supervisor.child_spec() | {module(), term()}]
  def children(nil), do: []

  def children(boot) do
    List.flatten([
      %{id: :ringbus_channels, start: {__MODULE__, :declare, [boot.channels]}},
      {Ringbus.Server, Keyword.put(boot.server, :name, Ringbus.Server)},
      if(boot.http, do: [{Ringbus.HTTP, Keyword.put(boot.http, :name, Ringbus.HTTP)}], else: []),
      %{id: :ringbus_announce, start: {__MODULE__, :announce, [boot]}}
    ])
  end

  @doc false
  # A child's start: creates the declared channels, then steps aside.
  @spec declare([{String.t(), keyword()}]) :: :ignore
  def declare(channels) do
    for {name, opts} <- channels do
      case Ringbus.create(name, opts) do
        :ok -> :ok
        {:error, :exists} -> Logger.warning("Ringbus channel #{inspect(name)} exists already")
      end
    end

    :ignore
  end

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
  Prints the running node's channel table, fetched from its HTTP endpoint
  (`RINGBUS_HTTP_HOST`, `RINGBUS_HTTP_PORT`), or from `url`:

      bin/ringbus eval 'Ringbus.Release.stats()'

  Meant for the command line: when the endpoint cannot be read, it says why
  on stderr and halts the VM with status 1.
  """
  @spec stats(String.t() | nil) :: :ok
  def stats(url \\ nil) do
    url = url || default_url()

    case Ringbus.HTTP.get_status_text(url) do
      {:ok, text} ->
        IO.write(text)

      {:error, reason} ->
        IO.puts(:stderr, "ringbus: cannot read #{url}/status.txt: #{inspect(reason)}")
        System.halt(1)
    end
  end

  defp default_url do
    case Ringbus.Release.Config.load(System.get_env()) do
      {:ok, %{http: http}} when http != nil ->
        "http://#{:inet.ntoa(http[:host])}:#{http[:port]}"

      {:ok, _no_http} ->
        IO.puts(:stderr, "ringbus: RINGBUS_HTTP_PORT is off: no endpoint to read")
        System.halt(1)

      {:error, line} ->
        IO.puts(:stderr, line)
        System.halt(1)
    end
  end
end
