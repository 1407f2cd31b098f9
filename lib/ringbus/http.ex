defmodule Ringbus.HTTP do
  @moduledoc """
  An HTTP endpoint for operators, on its own port, served by OTP's `:inets`
  httpd and bound to `127.0.0.1` by default:

    * `GET /metrics` - every figure of `Ringbus.Metrics` in the Prometheus
      text format, for a scraper.
    * `GET /status` - an HTML page that reloads itself every 2 seconds: per
      channel its figures (bytes held against `max_bytes` among them) and
      sparklines of its push and pull rates and largest subscriber lag over
      the last minute, then the subscriptions (named as in
      `Ringbus.Metrics.subscriber_labels/2`), the RESP consumer groups, the
      connections per server (with a sparkline of those open), the clients
      (the oldest 100 of `GET /connections.json`) and the cluster's links.
      No script and no external asset: it works offline, and it fits a
      window 1280 px wide.
    * `GET /status.json` - the same data as JSON.
    * `GET /connections.json` - every client connection of the node's
      servers (`Ringbus.Server.clients/0`): peer, protocol, age, idle
      time, frames and bytes in and out, pending output; like Redis's
      `CLIENT LIST` and NATS's `/connz`. Read from counters the
      connections publish, so a busy connection delays nothing.
    * `GET /status.txt` - the same data as tables for a terminal, which
      `mix ringbus.stats` and `Ringbus.Release.stats/1` print.
    * `GET /health` - liveness: `200` with `ok` while the node runs.
    * `GET /ready` - readiness: `200` with `ready` when a server listens
      and, if the node was told to join a cluster (`RINGBUS_JOIN`, or
      `config :ringbus, :cluster, join: [...]`), it is connected to one of
      those nodes; otherwise `503` with `not ready: ` and the reason, say
      `not ready: not joined to the cluster: none of a@10.0.0.1 is connected`.
      For a load balancer or an orchestrator's probes.

  Embed it next to a server:

      children = [
        {Ringbus.Server, port: 7171},
        {Ringbus.HTTP, port: 9171}
      ]

  A release starts it from `RINGBUS_HTTP_HOST` and `RINGBUS_HTTP_PORT` (see
  `Ringbus.Release`).

  ## Process

  One process: it starts the httpd service (each request is handled in a
  process of httpd's), stops it when it stops, and every `:interval` ms
  records a snapshot's rates in an ETS table it owns, which the pages read
  for their sparklines. A request asks no process of Ringbus but the
  subscriptions of each channel, within 100 ms in all (see
  `Ringbus.Metrics`).

  ## Options

    * `:host` - the address to bind, an IP tuple or string. Default `{127, 0, 0, 1}`.
    * `:port` - the port, `0` for any free one (see `port/1`). Default `9171`.
    * `:interval` - ms between the samples of the sparklines, which show
      the last 60. Default `1000`.
    * `:max_groups` - consumer groups `/metrics` and the status views show,
      at most, of all channels; `ringbus_group_omitted` counts the rest.
      Default `1000`.
    * `:max_consumers` - their consumers shown, at most;
      `ringbus_group_consumers_omitted` counts the rest. Default `1000`.
    * `:name` - a name to register the process under.

  Unknown options raise `ArgumentError`.
  """

  use GenServer

  alias Ringbus.Metrics.History
  alias Ringbus.Options

  @defaults [
    host: {127, 0, 0, 1},
    port: 9171,
    interval: 1000,
    max_groups: 1000,
    max_consumers: 1000,
    name: nil
  ]

  @type option ::
          {:host, :inet.ip_address() | String.t()}
          | {:port, :inet.port_number()}
          | {:interval, pos_integer()}
          | {:max_groups, non_neg_integer()}
          | {:max_consumers, non_neg_integer()}
          | {:name, atom()}

  @doc "Starts the endpoint linked to the caller. See the module doc for the options."
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts \\ []) do
    opts = validate_options!(opts)
    GenServer.start_link(__MODULE__, opts, if(opts[:name], do: [name: opts[:name]], else: []))
  end

  @doc false
  def child_spec(opts), do: %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}}

  @doc "The port the endpoint listens on (useful after `port: 0`)."
  @spec port(GenServer.server()) :: :inet.port_number()
  def port(endpoint), do: GenServer.call(endpoint, :port)

  @doc "Validates the options, with defaults; raises `ArgumentError` on a bad one."
  @spec validate_options!(keyword()) :: keyword()
  def validate_options!(opts) do
    opts = Options.validate!(opts, @defaults, "HTTP")
    opts = Keyword.update!(opts, :host, &Options.ip!(:host, &1))

    Options.check!(
      :port,
      opts[:port],
      &(is_integer(&1) and &1 in 0..65_535),
      "an integer in 0..65535"
    )

    Options.check!(:interval, opts[:interval], &Options.positive?/1, "a positive integer")
    Options.check!(:name, opts[:name], &is_atom/1, "an atom")

    for key <- [:max_groups, :max_consumers],
        do: Options.check!(key, opts[key], &(is_integer(&1) and &1 >= 0), "an integer >= 0")

    opts
  end

  @doc """
  Fetches `/status.txt` from the endpoint at `url` (`"http://127.0.0.1:9171"`).
  """
  @spec get_status_text(String.t()) :: {:ok, String.t()} | {:error, term()}
  def get_status_text(url) do
    {:ok, _} = Application.ensure_all_started(:inets)
    request = {String.to_charlist(String.trim_trailing(url, "/") <> "/status.txt"), []}

    case :httpc.request(:get, request, [timeout: 5_000], body_format: :binary) do
      {:ok, {{_, 200, _}, _headers, body}} -> {:ok, body}
      {:ok, {{_, code, _}, _headers, _body}} -> {:error, {:http_status, code}}
      {:error, reason} -> {:error, reason}
    end
  end

  ## Process

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    table = History.new()
    host = opts[:host]

    config = [
      port: opts[:port],
      bind_address: host,
      ipfamily: if(tuple_size(host) == 8, do: :inet6, else: :inet),
      server_name: ~c"ringbus",
      server_root: String.to_charlist(System.tmp_dir!()),
      document_root: String.to_charlist(System.tmp_dir!()),
      modules: [Ringbus.HTTP.Handler],
      max_clients: 64,
      max_body_size: 1024,
      max_header_size: 8192,
      keep_alive_timeout: 15,
      # Plain :ip_comm: inets 8.2's acceptor cannot listen on a fixed port
      # with {:ip_comm, options}; the handler writes each response whole.
      socket_type: :ip_comm,
      ringbus_history: table,
      ringbus_interval: opts[:interval],
      ringbus_bounds: [groups: opts[:max_groups], consumers: opts[:max_consumers]]
    ]

    case :inets.start(:httpd, config) do
      {:ok, httpd} ->
        Process.monitor(httpd)
        [port: port] = :httpd.info(httpd, [:port])
        state = %{httpd: httpd, port: port, table: table, interval: opts[:interval]}
        {:ok, state, {:continue, :sample}}

      {:error, reason} ->
        {:stop, {:http_failed, reason}}
    end
  end

  @impl true
  def handle_continue(:sample, state), do: {:noreply, sample(state)}

  @impl true
  def handle_call(:port, _from, state), do: {:reply, state.port, state}

  @impl true
  def handle_info(:sample, state), do: {:noreply, sample(state)}

  def handle_info({:DOWN, _, :process, httpd, reason}, %{httpd: httpd} = state),
    do: {:stop, {:http_down, reason}, state}

  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state) do
    :inets.stop(:httpd, state.httpd)
    :ok
  end

  # Asks the subscriptions for at most half an interval, so that sampling
  # keeps its pace; the history keeps no group figures, so it reads none.
  defp sample(state) do
    timeout = min(div(state.interval, 2), 100)
    snapshot = Ringbus.Metrics.snapshot(timeout: timeout, groups: 0, consumers: 0)
    History.record(state.table, snapshot)
    Process.send_after(self(), :sample, state.interval)
    state
  end
end
