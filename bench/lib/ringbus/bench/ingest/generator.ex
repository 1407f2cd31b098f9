defmodule Ringbus.Bench.Ingest.Generator do
  @moduledoc false
  # The load generator of `Ringbus.Bench.Ingest`. It runs in its own BEAM (an
  # OS process started by the bench), pushes `--messages` messages in one mode,
  # waits for the last ack and prints two lines on stdout:
  #
  #     READY
  #     RESULT messages=2000000 elapsed_us=812345 acks=2000000 ack_frames=1234 errors=0 cpu_user_us=1500000 cpu_sys_us=300000 cores=3
  #
  # READY comes once connected (and, in `encoded` mode, with every frame
  # encoded), just before the clock starts, so that the bench can read its
  # own CPU time over the same span. The clock stops at the last ack. `acks`
  # counts ack entries (one per PUSH, one per PUSH_BATCH), `ack_frames` the
  # PUSH_ACKS frames they came in ("-" where the client does not show them);
  # the CPU figures are this VM's over the timed span ("-" without /proc),
  # and `cores` the mask of the cores it may run on (3 is cores 0 and 1).
  #
  # Modes: `request_reply`, `pipelined` and `batched` go through
  # `Ringbus.Client` (`pipelined` with `--linger` is the client coalescing
  # single pushes); `encoded` writes pre-encoded frames from raw sockets
  # (`Ringbus.Bench.Ingest.Encoded`). Progress goes to stderr, a line per 10%
  # of the messages. Every loop is bounded by the message count and by
  # `--timeout` seconds.

  alias Ringbus.Bench.CPU
  alias Ringbus.Bench.Ingest.Encoded
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
    connections: :integer,
    window: :integer,
    chunk: :integer,
    linger: :integer,
    quiet: :boolean
  ]

  @check_every 16_384

  @doc "Entry point of the generator's BEAM: runs, prints the result line, halts."
  @spec main([String.t()]) :: no_return()
  def main(argv) do
    {opts, []} = OptionParser.parse!(argv, strict: @switches)

    case run(opts, fn -> IO.puts("READY") end) do
      {:ok, result} ->
        cpu = result.cpu || %{user_us: "-", sys_us: "-"}

        IO.puts(
          "RESULT messages=#{result.messages} elapsed_us=#{result.elapsed_us} " <>
            "acks=#{result.acks} ack_frames=#{result.ack_frames || "-"} " <>
            "errors=#{result.errors} cpu_user_us=#{cpu.user_us} cpu_sys_us=#{cpu.sys_us} " <>
            "cores=#{cores()}"
        )

        System.halt(0)

      {:error, reason} ->
        IO.puts("ERROR #{inspect(reason)}")
        System.halt(1)
    end
  end

  # The cores this VM may run on, as a bit mask (1 is core 0), from /proc; "-" without it.
  defp cores do
    with {:ok, status} <- File.read("/proc/self/status"),
         [_, hex] <- Regex.run(~r/^Cpus_allowed:\s*([0-9a-f,]+)$/m, status),
         {mask, ""} <- Integer.parse(String.replace(hex, ",", ""), 16) do
      mask
    else
      _ -> "-"
    end
  end

  @doc """
  Runs one mode, calling `ready` just before the clock starts; returns its
  figures.
  """
  @spec run(keyword(), (() -> any())) :: {:ok, map()} | {:error, term()}
  def run(opts, ready) do
    n = Keyword.fetch!(opts, :messages)
    payload = :binary.copy(<<0x5A>>, Keyword.fetch!(opts, :payload))
    timeout_ms = Keyword.get(opts, :timeout, 300) * 1000

    case Keyword.fetch!(opts, :mode) do
      "encoded" ->
        Encoded.run(
          %{
            port: Keyword.fetch!(opts, :port),
            channel: Keyword.fetch!(opts, :channel),
            payload: payload,
            n: n,
            connections: Keyword.get(opts, :connections, 1),
            window: Keyword.fetch!(opts, :window),
            chunk: Keyword.fetch!(opts, :chunk),
            timeout_ms: timeout_ms
          },
          ready
        )

      mode ->
        config = %{
          channel: Keyword.fetch!(opts, :channel),
          payload: payload,
          n: n,
          batch: Keyword.get(opts, :batch, 1_000),
          tenth: max(div(n, 10), 1),
          deadline: System.monotonic_time(:millisecond) + timeout_ms,
          mode: mode,
          quiet: Keyword.get(opts, :quiet, false)
        }

        client_opts = [
          port: Keyword.fetch!(opts, :port),
          max_pending: Keyword.get(opts, :max_pending, 100_000),
          timeout: timeout_ms,
          linger: Keyword.get(opts, :linger)
        ]

        # The acks of up to `max_pending` pushes wait in this mailbox until
        # the producer takes them; off the heap, garbage collections do not
        # copy them (see "Backpressure" in `Ringbus.Client`).
        Process.flag(:message_queue_data, :off_heap)

        with {:ok, client} <- Client.connect(client_opts) do
          client_mode(client, config, ready)
        end
    end
  end

  defp client_mode(client, config, ready) do
    hz = CPU.ticks_per_second()
    ready.()
    cpu0 = CPU.sample()
    start = System.monotonic_time()

    result =
      try do
        mode(config.mode, client, config)
      catch
        :throw, {:bench_error, reason} -> {:error, reason}
      end

    elapsed = System.monotonic_time() - start
    cpu = CPU.used(cpu0, CPU.sample(), hz)
    Client.close(client)

    with {:ok, acks, ack_frames, errors} <- result do
      {:ok,
       %{
         messages: config.n,
         elapsed_us: System.convert_time_unit(elapsed, :native, :microsecond),
         acks: acks,
         ack_frames: ack_frames,
         errors: errors,
         cpu: cpu
       }}
    end
  end

  defp mode("request_reply", client, config), do: request_reply(client, config, 0, 0)
  defp mode("pipelined", client, config), do: pipelined(client, config, 0, {0, 0, 0})

  defp mode("batched", client, config) do
    payloads = List.duplicate(config.payload, config.batch)
    batched(client, config, payloads, 0, 0, {0, 0, 0})
  end

  defp mode(other, _client, _config), do: {:error, {:unknown_mode, other}}

  # One push, one round trip; each push/3 that returns has seen its ack.
  defp request_reply(_client, %{n: n}, n, errors), do: {:ok, n, nil, errors}

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
    do: {:ok, entries, messages, errors}

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
