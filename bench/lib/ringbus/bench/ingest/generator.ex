defmodule Ringbus.Bench.Ingest.Generator do
  @moduledoc false
  # The load generator of `Ringbus.Bench.Ingest`. It runs in its own BEAM (an
  # OS process started by the bench), connects with `Ringbus.Client`, pushes
  # `--messages` messages in one mode, waits for the last ack and prints one
  # line on stdout:
  #
  #     RESULT messages=2000000 elapsed_us=812345 ack_messages=1234 errors=0 cpu_ms=1500
  #
  # The clock starts once connected and stops at the last ack; cpu_ms is this
  # VM's CPU time (all schedulers) over the same span. Progress goes
  # to stderr, a line per 10% of the messages. Every loop is bounded by the
  # message count and by `--timeout` seconds.

  alias Ringbus.Client

  @switches [
    port: :integer,
    mode: :string,
    messages: :integer,
    payload: :integer,
    batch: :integer,
    channel: :string,
    timeout: :integer,
    max_pending: :integer,
    quiet: :boolean
  ]

  @check_every 16_384

  @doc "Entry point of the generator's BEAM: runs, prints the result line, halts."
  @spec main([String.t()]) :: no_return()
  def main(argv) do
    {opts, []} = OptionParser.parse!(argv, strict: @switches)

    case run(opts) do
      {:ok, result} ->
        IO.puts(
          "RESULT messages=#{result.messages} elapsed_us=#{result.elapsed_us} " <>
            "ack_messages=#{result.ack_messages} errors=#{result.errors} cpu_ms=#{result.cpu_ms}"
        )

        System.halt(0)

      {:error, reason} ->
        IO.puts("ERROR #{inspect(reason)}")
        System.halt(1)
    end
  end

  @doc "Runs one mode; returns its figures."
  @spec run(keyword()) :: {:ok, map()} | {:error, term()}
  def run(opts) do
    n = Keyword.fetch!(opts, :messages)
    payload = :binary.copy(<<0x5A>>, Keyword.fetch!(opts, :payload))
    timeout_ms = Keyword.get(opts, :timeout, 300) * 1000

    config = %{
      channel: Keyword.fetch!(opts, :channel),
      payload: payload,
      n: n,
      batch: Keyword.get(opts, :batch, 1_000),
      tenth: max(div(n, 10), 1),
      deadline: System.monotonic_time(:millisecond) + timeout_ms,
      mode: Keyword.fetch!(opts, :mode),
      quiet: Keyword.get(opts, :quiet, false)
    }

    client_opts = [
      port: Keyword.fetch!(opts, :port),
      max_pending: Keyword.get(opts, :max_pending, 100_000),
      timeout: timeout_ms
    ]

    with {:ok, client} <- Client.connect(client_opts) do
      start = System.monotonic_time()
      {cpu0, _} = :erlang.statistics(:runtime)

      result =
        try do
          mode(config.mode, client, config)
        catch
          :throw, {:bench_error, reason} -> {:error, reason}
        end

      elapsed = System.monotonic_time() - start
      {cpu1, _} = :erlang.statistics(:runtime)
      Client.close(client)

      with {:ok, ack_messages, errors} <- result do
        {:ok,
         %{
           messages: n,
           elapsed_us: System.convert_time_unit(elapsed, :native, :microsecond),
           ack_messages: ack_messages,
           errors: errors,
           cpu_ms: cpu1 - cpu0
         }}
      end
    end
  end

  defp mode("request_reply", client, config), do: request_reply(client, config, 0, 0)
  defp mode("pipelined", client, config), do: pipelined(client, config, 0, {0, 0, 0})

  defp mode("batched", client, config) do
    payloads = List.duplicate(config.payload, config.batch)
    batched(client, config, payloads, 0, 0, {0, 0, 0})
  end

  defp mode(other, _client, _config), do: {:error, {:unknown_mode, other}}

  # One push, one round trip.
  defp request_reply(_client, %{n: n}, n, errors), do: {:ok, 0, errors}

  defp request_reply(client, config, sent, errors) do
    check(config, sent + 1, 1)

    case Client.push(client, config.channel, config.payload) do
      {:ok, _seq} -> request_reply(client, config, sent + 1, errors)
      {:error, :timeout} -> throw({:bench_error, :timeout})
      {:error, :closed} -> throw({:bench_error, :closed})
      {:error, _} -> request_reply(client, config, sent + 1, errors + 1)
    end
  end

  # Single PUSH frames, as many in flight as the client allows. `acked` is
  # {entries acked, :ringbus_acks messages, failed entries}.
  defp pipelined(client, %{n: n}, n, acked), do: await_all(client, n, acked)

  defp pipelined(client, config, sent, acked) do
    check(config, sent + 1, 1)

    case Client.push_async(client, config.channel, config.payload) do
      {:ok, _corr} -> pipelined(client, config, sent + 1, acked)
      {:error, :backpressure} -> pipelined(client, config, sent, await_acks(client, acked))
      {:error, reason} -> throw({:bench_error, reason})
    end
  end

  # PUSH_BATCH frames of `batch` messages (the last one may be shorter), one
  # ack entry each.
  defp batched(client, config, _payloads, sent, frames, acked) when sent >= config.n,
    do: await_all(client, frames, acked)

  defp batched(client, config, payloads, sent, frames, acked) do
    left = config.n - sent

    {batch, count} =
      if left < config.batch,
        do: {List.duplicate(config.payload, left), left},
        else: {payloads, config.batch}

    case Client.push_async(client, config.channel, batch) do
      {:ok, _corr} ->
        check(config, sent + count, count)
        batched(client, config, payloads, sent + count, frames + 1, acked)

      {:error, :backpressure} ->
        batched(client, config, payloads, sent, frames, await_acks(client, acked))

      {:error, reason} ->
        throw({:bench_error, reason})
    end
  end

  defp await_acks(client, acked) do
    receive do
      {:ringbus_acks, ^client, acks} -> count(acks, acked)
      {:ringbus_down, ^client, reason} -> throw({:bench_error, {:down, reason}})
    after
      30_000 -> throw({:bench_error, :no_acks_for_30s})
    end
  end

  defp count([{_corr, {:ok, _}} | rest], {entries, messages, errors}),
    do: count(rest, {entries + 1, messages, errors})

  defp count([_failed | rest], {entries, messages, errors}),
    do: count(rest, {entries + 1, messages, errors + 1})

  defp count([], {entries, messages, errors}), do: {entries, messages + 1, errors}

  defp await_all(_client, frames, {entries, messages, errors}) when entries >= frames,
    do: {:ok, messages, errors}

  defp await_all(client, frames, acked), do: await_all(client, frames, await_acks(client, acked))

  # Progress at every tenth, and the time limit every few thousand messages.
  defp check(config, sent, step) do
    if not config.quiet and div(sent, config.tenth) != div(sent - step, config.tenth) do
      IO.puts(:stderr, "  #{config.mode}: #{div(sent * 100, config.n)}% sent")
    end

    if div(sent, @check_every) != div(sent - step, @check_every) and
         System.monotonic_time(:millisecond) > config.deadline do
      throw({:bench_error, :timeout})
    end

    :ok
  end
end
