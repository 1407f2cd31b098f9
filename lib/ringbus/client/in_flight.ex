defmodule Ringbus.Client.InFlight do
  @moduledoc false
  # The correlation ids of a client's acked async pushes in flight, in send
  # order, which is the order their acks come back in. They are kept as runs
  # of consecutive ids, since a producer's pushes take consecutive ids: the
  # run being extended is a tuple of its own, the runs before it wait in a
  # queue. Adding a push and dropping acked ones cost O(1) each, and memory
  # grows with the runs, not the pushes, for a single producer.

  @type corr :: pos_integer()
  @opaque t :: {:queue.queue({corr(), corr()}), {corr(), corr()} | nil}

  @spec new() :: t()
  def new, do: {:queue.new(), nil}

  @doc "A push with correlation id `corr` went out."
  @spec push(t(), corr()) :: t()
  def push({runs, {first, last}}, corr) when corr == last + 1, do: {runs, {first, corr}}
  def push({runs, nil}, corr), do: {runs, {corr, corr}}
  def push({runs, run}, corr), do: {:queue.in(run, runs), {corr, corr}}

  @doc "The `n` oldest pushes have been acked."
  @spec drop(t(), non_neg_integer()) :: t()
  def drop(in_flight, 0), do: in_flight

  def drop({runs, current}, n) do
    case :queue.out(runs) do
      {{:value, {first, last}}, rest} when last - first < n ->
        drop({rest, current}, n - (last - first + 1))

      {{:value, {first, last}}, rest} ->
        {:queue.in_r({first + n, last}, rest), current}

      {:empty, _} ->
        {runs, drop_run(current, n)}
    end
  end

  defp drop_run({first, last}, n) when last - first < n, do: nil
  defp drop_run({first, last}, n), do: {first + n, last}
  defp drop_run(nil, _n), do: nil

  @doc "How many pushes are in flight."
  @spec count(t()) :: non_neg_integer()
  def count({runs, current}) do
    runs
    |> :queue.to_list()
    |> Enum.reduce(run_size(current), &(run_size(&1) + &2))
  end

  defp run_size({first, last}), do: last - first + 1
  defp run_size(nil), do: 0

  @doc "The correlation ids in flight, oldest first."
  @spec to_list(t()) :: [corr()]
  def to_list({runs, current}) do
    for {first, last} <- :queue.to_list(runs) ++ List.wrap(current), corr <- first..last, do: corr
  end
end
