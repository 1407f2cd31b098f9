defmodule Ringbus.Bench.Tracer do
  @moduledoc """
  Traces one process from a separate collector process and keeps compact
  figures: its garbage collections (count, longest, total) and, when asked,
  the latency of each request it serves or each call it makes.

  The collector is its own process so that whatever it allocates never lands
  on the heap of the traced process. It keeps per-request latencies in an
  `:atomics` array (see `Ringbus.Bench.Stats`), not in a list.

      tracer = Ringbus.Bench.Tracer.start(pid, :gc)
      # ... load ...
      %{gc_count: n, gc_max_ns: longest} = Ringbus.Bench.Tracer.stop(tracer)

  Tracing costs the traced process a trace message per event; the figures of
  a traced process are a little worse than untraced ones.

  ## Modes

    * `:gc` - garbage collections only.
    * `:messages` - also, for a GenServer, the time from receiving each
      `:"$gen_call"` to sending the next message (its reply). Messages
      are traced rather than `handle_call/3` so that the server's state is
      not copied into every trace message.
    * `{:calls, mfas}` - also the time from each call of one of the
      functions `mfas` (`{module, name, arity}`) by the traced process to its
      return. Set with `:erlang.trace_pattern/3` and `return_trace`; the
      functions must not call each other.

  ## Options

    * `:max_samples` - room for latencies in `:messages` and `:calls`
      modes; requests beyond it are counted but not kept. Defaults to
      `1_000_000`.
    * `:timeout` - how long `stop/1` waits for the trace to drain, in
      milliseconds. Defaults to `120_000`.
  """

  alias Ringbus.Bench.Stats

  @enforce_keys [:traced, :collector, :mode, :timeout]
  defstruct @enforce_keys

  @type mode :: :gc | :messages | {:calls, [mfa()]}

  @type t :: %__MODULE__{traced: pid(), collector: pid(), mode: mode(), timeout: timeout()}

  @typedoc """
  The figures of a trace. Durations are in nanoseconds; `samples` holds the
  first `min(requests, max_samples)` request latencies (nil in `:gc` mode).
  """
  @type result :: %{
          gc_count: non_neg_integer(),
          gc_max_ns: non_neg_integer(),
          gc_total_ns: non_neg_integer(),
          requests: non_neg_integer(),
          samples: :atomics.atomics_ref() | nil
        }

  @doc "Starts tracing `pid`; see the module doc for modes and options."
  @spec start(pid(), mode(), keyword()) :: t()
  def start(pid, mode, opts \\ []) when is_pid(pid) do
    opts = Keyword.validate!(opts, max_samples: 1_000_000, timeout: 120_000)
    samples = if mode == :gc, do: nil, else: Stats.new_samples(opts[:max_samples])
    init = %{samples: samples, max: opts[:max_samples], requests: 0, started: nil}
    collector = spawn(fn -> collect(init, {0, 0, 0, nil}) end)

    flags =
      case mode do
        :gc ->
          []

        :messages ->
          [:receive, :send]

        {:calls, mfas} ->
          Enum.each(mfas, &:erlang.trace_pattern(&1, [{:_, [], [{:return_trace}]}], []))
          [:call, :arity]
      end

    1 =
      :erlang.trace(pid, true, [
        {:tracer, collector},
        :garbage_collection,
        :monotonic_timestamp | flags
      ])

    %__MODULE__{traced: pid, collector: collector, mode: mode, timeout: opts[:timeout]}
  end

  @doc """
  Stops tracing, waits until every trace message has reached the collector
  and returns the figures. Raises if the trace does not drain in time.
  """
  @spec stop(t()) :: result()
  def stop(%__MODULE__{traced: pid, collector: collector} = tracer) do
    if Process.alive?(pid), do: :erlang.trace(pid, false, [:all])

    with {:calls, mfas} <- tracer.mode do
      Enum.each(mfas, &:erlang.trace_pattern(&1, false, []))
    end

    ref = :erlang.trace_delivered(pid)

    receive do
      {:trace_delivered, ^pid, ^ref} -> :ok
    after
      tracer.timeout -> raise "trace of #{inspect(pid)} did not drain in #{tracer.timeout} ms"
    end

    tag = make_ref()
    send(collector, {:stop, self(), tag})

    receive do
      {^tag, result} -> result
    after
      tracer.timeout -> raise "tracer of #{inspect(pid)} did not answer in #{tracer.timeout} ms"
    end
  end

  # gc: {count, longest, total, started}
  defp collect(%{started: started} = req, {count, longest, total, gc_started} = gc) do
    receive do
      {:trace_ts, _pid, event, _info, ts} when event in [:gc_minor_start, :gc_major_start] ->
        collect(req, {count, longest, total, ts})

      {:trace_ts, _pid, event, _info, ts}
      when event in [:gc_minor_end, :gc_major_end] and is_integer(gc_started) ->
        took = ts - gc_started
        collect(req, {count + 1, max(longest, took), total + took, nil})

      {:trace_ts, _pid, :receive, {:"$gen_call", _from, _request}, ts} ->
        collect(%{req | started: ts}, gc)

      {:trace_ts, _pid, :call, _mfa, ts} ->
        collect(%{req | started: ts}, gc)

      {:trace_ts, _pid, :send, _msg, _to, ts} when is_integer(started) ->
        collect(record(req, ts), gc)

      {:trace_ts, _pid, :return_from, _mfa, _value, ts} when is_integer(started) ->
        collect(record(req, ts), gc)

      {:stop, from, tag} ->
        send(from, {tag, result(req, gc)})

      _other ->
        collect(req, gc)
    end
  end

  defp record(%{requests: n, max: max, started: started} = req, ts) do
    if n < max, do: :atomics.put(req.samples, n + 1, ts - started)
    %{req | requests: n + 1, started: nil}
  end

  defp result(req, {count, longest, total, _started}) do
    %{
      gc_count: count,
      gc_max_ns: longest,
      gc_total_ns: total,
      requests: req.requests,
      samples: req.samples
    }
  end
end
