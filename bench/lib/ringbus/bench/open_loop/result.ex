defmodule Ringbus.Bench.OpenLoop.Result do
  @moduledoc """
  The figures of one run of the open-loop generator (`bench/c/openloop.c`),
  read from the `key=value` line it prints, and whether the generator kept
  up. Everything here is pure.

      iex> line = "requests=10 sent=10 answered=10 errors=0 unanswered=0 target_rate=1000 " <>
      ...>   "achieved_rate=1000 elapsed_s=0.011 p50_us=20.0 p99_us=31.5 p999_us=31.5 " <>
      ...>   "p9999_us=31.5 max_us=31.5 lag_p999_us=4.1 lag_max_us=4.1 curve_us=12.0,20.0"
      iex> {:ok, r} = Ringbus.Bench.OpenLoop.Result.parse(line)
      iex> {r.answered, r.p99_us, r.curve_us}
      {10, 31.5, [12.0, 20.0]}
      iex> Ringbus.Bench.OpenLoop.Result.behind?(r)
      false

  Latencies and send lags are in microseconds.
  """

  @type t :: %{
          requests: non_neg_integer(),
          sent: non_neg_integer(),
          answered: non_neg_integer(),
          errors: non_neg_integer(),
          unanswered: non_neg_integer(),
          target_rate: float(),
          achieved_rate: float(),
          elapsed_s: float(),
          p50_us: float(),
          p99_us: float(),
          p999_us: float(),
          p9999_us: float(),
          max_us: float(),
          lag_p999_us: float(),
          lag_max_us: float(),
          curve_us: [float()]
        }

  @integers ~w(requests sent answered errors unanswered)a
  @floats ~w(target_rate achieved_rate elapsed_s p50_us p99_us p999_us p9999_us max_us lag_p999_us lag_max_us)a

  # The p99.9 send lag above which the generator, not the server, set the latencies.
  @max_lag_us 1_000.0
  # The share of the target rate below which the generator fell short.
  @min_rate_share 0.98

  @doc "Reads the generator's line; an error names what is missing or malformed."
  @spec parse(String.t()) :: {:ok, t()} | {:error, String.t()}
  def parse(line) do
    fields =
      for field <- String.split(line),
          [key, value] <- [String.split(field, "=", parts: 2)],
          into: %{},
          do: {key, value}

    Enum.reduce_while(@integers ++ @floats ++ [:curve_us], {:ok, %{}}, fn key, {:ok, acc} ->
      case value(key, Map.get(fields, Atom.to_string(key))) do
        {:ok, value} -> {:cont, {:ok, Map.put(acc, key, value)}}
        :error -> {:halt, {:error, "no #{key} in the generator's line: #{line}"}}
      end
    end)
  end

  defp value(_key, nil), do: :error

  defp value(:curve_us, ""), do: {:ok, []}

  defp value(:curve_us, text) do
    text |> String.split(",") |> Enum.reduce_while({:ok, []}, &number/2) |> reverse()
  end

  defp value(key, text) when key in @integers do
    case Integer.parse(text) do
      {n, ""} -> {:ok, n}
      _ -> :error
    end
  end

  defp value(_key, text) do
    case Float.parse(text) do
      {x, ""} -> {:ok, x}
      _ -> :error
    end
  end

  defp number(text, {:ok, acc}) do
    case Float.parse(text) do
      {x, ""} -> {:cont, {:ok, [x | acc]}}
      _ -> {:halt, :error}
    end
  end

  defp reverse({:ok, list}), do: {:ok, Enum.reverse(list)}
  defp reverse(:error), do: :error

  @doc """
  Whether the generator itself fell behind, so that the run's latencies are
  partly its own: its p99.9 send lag is above 1 ms, or it achieved more
  than 2% below its target rate. A slow server does neither (the generator
  queues what the server does not read, and goes on).

      iex> ok = %{target_rate: 1000.0, achieved_rate: 985.0, lag_p999_us: 900.0}
      iex> Ringbus.Bench.OpenLoop.Result.behind?(ok)
      false
      iex> Ringbus.Bench.OpenLoop.Result.behind?(%{ok | achieved_rate: 979.0})
      true
      iex> Ringbus.Bench.OpenLoop.Result.behind?(%{ok | lag_p999_us: 1000.1})
      true
  """
  @spec behind?(%{
          target_rate: number(),
          achieved_rate: number(),
          lag_p999_us: number()
        }) :: boolean()
  def behind?(%{target_rate: target, achieved_rate: achieved, lag_p999_us: lag}),
    do: lag > @max_lag_us or achieved < target * @min_rate_share

  @doc """
  The percentile curve as `Ringbus.Bench.Chart` draws it: `{nines, us}`
  points, `nines` being `-log10(1 - p)`, from the generator's spectrum (a
  point every 0.1 nines while there are requests to rank), ended by the
  max at the rank of the last request.

      iex> Ringbus.Bench.OpenLoop.Result.curve(%{curve_us: [5.0, 6.0], answered: 100, max_us: 90.0})
      [{0.0, 5.0}, {0.1, 6.0}, {2.0, 90.0}]
      iex> Ringbus.Bench.OpenLoop.Result.curve(%{curve_us: [], answered: 0, max_us: 0.0})
      []
  """
  @spec curve(%{curve_us: [float()], answered: non_neg_integer(), max_us: float()}) ::
          [{float(), float()}]
  def curve(%{answered: 0}), do: []

  def curve(%{curve_us: values, answered: answered, max_us: max}) do
    points = values |> Enum.with_index() |> Enum.map(fn {v, i} -> {i / 10, v} end)
    points ++ [{:math.log10(answered), max}]
  end
end
