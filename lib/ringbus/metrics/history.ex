defmodule Ringbus.Metrics.History do
  @moduledoc false
  # The last minute of the few figures the status page draws as sparklines:
  # per channel its pushed and pulled counts and its largest subscriber lag,
  # per server its open connections, and the cluster links that are up.
  #
  # `Ringbus.HTTP` takes a snapshot every interval and records it here, in
  # an ETS table it owns; the pages read the table from the request's own
  # process. Each key holds its last `@keep` points, newest first, so the
  # table's size is bounded by the number of channels and servers, and a
  # channel or server gone from the snapshot is dropped from it.

  @keep 61

  @type point :: {at_ms :: integer(), [number() | nil]}
  @type t :: %{term() => [point()]}

  @doc "A table for `record/2`, owned by the caller, readable by any process."
  @spec new() :: :ets.tid()
  def new, do: :ets.new(:ringbus_history, [:set, :protected, read_concurrency: true])

  @doc "Adds a snapshot's figures to the table."
  @spec record(:ets.tid(), map()) :: :ok
  def record(table, snapshot) do
    points = points(snapshot)

    for {key, values} <- points do
      previous =
        case :ets.lookup(table, key) do
          [{_, series}] -> Enum.take(series, @keep - 1)
          [] -> []
        end

      :ets.insert(table, {key, [{snapshot.at, values} | previous]})
    end

    # What the snapshot no longer has: a deleted channel, a stopped server.
    for key <- :ets.select(table, [{{:"$1", :_}, [], [:"$1"]}]),
        not Map.has_key?(points, key),
        do: :ets.delete(table, key)

    :ok
  end

  @doc "Everything recorded, by key: `{:channel, label}`, `{:server, protocol, port}`, `:links`."
  @spec read(:ets.tid() | nil) :: t()
  def read(nil), do: %{}
  def read(table), do: Map.new(:ets.tab2list(table))

  defp points(snapshot) do
    channels =
      for ch <- snapshot.channels, into: %{} do
        lags = for %{lag: lag} when is_integer(lag) <- ch.subscriptions, do: lag

        {{:channel, ch.label},
         [ch.info[:pushed], ch.info[:pulled], Enum.max(lags, fn -> nil end)]}
      end

    servers =
      for s <- snapshot.servers, into: %{}, do: {{:server, s.protocol, s.port}, [s.counts.open]}

    links =
      case snapshot.cluster do
        nil ->
          %{}

        cluster ->
          up =
            Enum.count(
              Ringbus.Metrics.Cluster.normalize(cluster).links,
              &(&1.state in ~w(up connected))
            )

          %{links: [up]}
      end

    channels |> Map.merge(servers) |> Map.merge(links)
  end

  @doc """
  Per second rates of the `index`th figure of a series (a running count),
  oldest first: one rate between each two points.
  """
  @spec rates([point()], non_neg_integer()) :: [float()]
  def rates(series, index) do
    series
    |> Enum.reverse()
    |> Enum.chunk_every(2, 1, :discard)
    |> Enum.map(fn [{t0, v0}, {t1, v1}] ->
      a = Enum.at(v0, index)
      b = Enum.at(v1, index)

      if is_number(a) and is_number(b) and t1 > t0,
        do: Float.round(max(b - a, 0) * 1000 / (t1 - t0), 1),
        else: 0.0
    end)
  end

  @doc "The `index`th figure of a series, oldest first (nil where it was unknown)."
  @spec values([point()], non_neg_integer()) :: [number() | nil]
  def values(series, index),
    do: series |> Enum.reverse() |> Enum.map(&Enum.at(elem(&1, 1), index))
end
