defmodule Ringbus.Test.TaggedProducer do
  @moduledoc """
  A producer that runs on a node and pushes to a channel one message at a
  time under producer tags `{id, n}`, for the tests that kill nodes under
  it. A push that fails is tried again under the same tag (so an unknown
  outcome is stored once) until it is acked. Every attempt is recorded with
  how long it took.

      pid = Nodes.call(node, TaggedProducer, :start, ["orders", "p1"])
      ...
      %{attempts: attempts, acked: acked} = Nodes.call(node, TaggedProducer, :stop, [pid])
  """

  @doc """
  Starts the producer (not linked to the caller, which `:peer.call/5` ends).
  `opts`: `:timeout` of each push (ms, default 5000).
  """
  @spec start(term(), term(), keyword()) :: pid()
  def start(channel, id, opts \\ []) do
    timeout = Keyword.get(opts, :timeout, 5_000)
    spawn(fn -> loop(%{channel: channel, id: id, timeout: timeout, n: 1, attempts: []}) end)
  end

  @doc """
  Stops the producer after its push in progress and returns what it did:
  `attempts`, each `{n, result, ms}` oldest first, and `acked`, each
  `{n, seq, payload}` of the pushes acked.
  """
  @spec stop(pid(), timeout()) :: %{attempts: list(), acked: list()}
  def stop(pid, timeout \\ 30_000) do
    ref = Process.monitor(pid)
    send(pid, {:stop, self(), ref})

    receive do
      {^ref, result} -> result
      {:DOWN, ^ref, _, _, reason} -> exit({:producer_died, reason})
    after
      timeout -> exit(:producer_stuck)
    end
  end

  @doc "How many pushes the producer has had acked so far."
  @spec acked(pid(), timeout()) :: non_neg_integer()
  def acked(pid, timeout \\ 10_000) do
    ref = Process.monitor(pid)
    send(pid, {:acked, self(), ref})

    receive do
      {^ref, count} -> count
      {:DOWN, ^ref, _, _, reason} -> exit({:producer_died, reason})
    after
      timeout -> exit(:producer_stuck)
    end
  end

  @doc "The payload of push `n` of producer `id`."
  @spec payload(term(), pos_integer()) :: binary()
  def payload(id, n), do: "#{id}-#{n}"

  defp loop(state) do
    receive do
      {:stop, from, ref} ->
        send(from, {ref, result(state)})

      {:acked, from, ref} ->
        send(from, {ref, state.n - 1})
        loop(state)
    after
      0 -> state |> push() |> loop()
    end
  end

  defp push(%{n: n} = state) do
    started = System.monotonic_time(:millisecond)
    opts = [producer: {state.id, n}, timeout: state.timeout]

    result =
      try do
        Ringbus.push(state.channel, payload(state.id, n), opts)
      catch
        kind, reason -> {:raised, kind, reason}
      end

    ms = System.monotonic_time(:millisecond) - started
    state = %{state | attempts: [{n, result, ms} | state.attempts]}

    case result do
      {:ok, _seq} ->
        %{state | n: n + 1}

      _failed ->
        Process.sleep(10)
        state
    end
  end

  defp result(state) do
    attempts = Enum.reverse(state.attempts)
    acked = for {n, {:ok, seq}, _ms} <- attempts, do: {n, seq, payload(state.id, n)}
    %{attempts: attempts, acked: acked}
  end
end
