defmodule Ringbus.Bench.Latency.Generator do
  @moduledoc false
  # The open-loop load generator of `Ringbus.Bench.Latency`: one process per
  # connection, each writing its requests when `Schedule` says they are due,
  # whether or not the earlier ones were answered, and timing each reply
  # from its request's intended time into one shared `Histogram`.
  #
  # A connection's replies come in the order of its requests (RESP, and a
  # Ringbus connection's PUSH acks), so the k-th reply answers the k-th
  # request and no send time is kept. The BEAM's timers count whole
  # milliseconds: a connection sleeps until a millisecond before its next
  # request, then polls its mailbox until the request is due, so requests
  # leave within microseconds of their time at the price of the generator's
  # CPU. Every loop is bounded by the requests of its connection and by
  # `@stall_ms` without a reply once all are sent.

  alias Ringbus.Bench.Latency.{Histogram, Schedule}
  alias Ringbus.Wire.{Decoder, Frame}

  @stall_ms 30_000
  @ms 1_000_000

  @typedoc "What to send: RESP `XADD` to a stream, or binary `PUSH` to a channel."
  @type target :: %{
          required(:protocol) => :resp | :push,
          required(:port) => :inet.port_number(),
          required(:key) => String.t(),
          required(:payload) => binary(),
          optional(:maxlen) => pos_integer()
        }

  @doc """
  Sends `schedule`'s requests to `target`; returns the histogram of their
  latencies (ns) and the figures of the run, or the first connection's error.
  """
  @spec run(target(), Schedule.t()) :: {:ok, map()} | {:error, term()}
  def run(target, %Schedule{} = schedule) do
    parent = self()
    go = make_ref()
    histogram = Histogram.new()
    request = request(target)
    conns = min(schedule.connections, schedule.total)

    workers =
      for c <- 0..(conns - 1) do
        spawn_monitor(fn ->
          result =
            case connect(target) do
              {:ok, socket, decoder} ->
                send(parent, {:connected, self()})

                receive do
                  {^go, start} ->
                    state = %{
                      socket: socket,
                      decoder: decoder,
                      protocol: target.protocol,
                      request: request,
                      schedule: schedule,
                      c: c,
                      n: Schedule.count(schedule, c),
                      start: start,
                      sent: 0,
                      answered: 0,
                      errors: 0,
                      buffer: <<>>,
                      last_send: 0,
                      max_lag: 0,
                      histogram: histogram
                    }

                    loop(state)
                end

              {:error, reason} ->
                {:error, reason}
            end

          exit({:shutdown, {:result, result}})
        end)
      end

    with :ok <- await_connected(workers) do
      # The first request is due a millisecond from now, once every process can read `go`.
      start = System.monotonic_time(:nanosecond) + @ms
      for {pid, _ref} <- workers, do: send(pid, {go, start})
      collect(workers, %{sent: 0, answered: 0, errors: 0, last_send: 0, max_lag: 0}, histogram)
    end
  end

  defp await_connected(workers), do: await_connected(workers, workers)

  defp await_connected([], _all), do: :ok

  defp await_connected(waiting, all) do
    receive do
      {:connected, pid} ->
        await_connected(List.keydelete(waiting, pid, 0), all)

      {:DOWN, _ref, :process, _pid, {:shutdown, {:result, {:error, reason}}}} ->
        kill(all, {:error, reason})

      {:DOWN, _ref, :process, _pid, reason} ->
        kill(all, {:error, reason})
    after
      10_000 -> kill(all, {:error, :connect_timeout})
    end
  end

  defp kill(workers, result) do
    for {pid, ref} <- workers do
      Process.demonitor(ref, [:flush])
      Process.exit(pid, :kill)
    end

    result
  end

  defp collect([], totals, histogram), do: {:ok, Map.put(totals, :histogram, histogram)}

  defp collect(workers, totals, histogram) do
    receive do
      {:DOWN, ref, :process, _pid, {:shutdown, {:result, {:ok, r}}}} ->
        totals = %{
          sent: totals.sent + r.sent,
          answered: totals.answered + r.answered,
          errors: totals.errors + r.errors,
          last_send: max(totals.last_send, r.last_send),
          max_lag: max(totals.max_lag, r.max_lag)
        }

        collect(List.keydelete(workers, ref, 1), totals, histogram)

      {:DOWN, ref, :process, _pid, {:shutdown, {:result, {:error, reason}}}} ->
        kill(List.keydelete(workers, ref, 1), {:error, reason})

      {:DOWN, ref, :process, _pid, reason} ->
        kill(List.keydelete(workers, ref, 1), {:error, reason})
    end
  end

  ## A connection

  defp loop(%{answered: n, n: n} = state) do
    :gen_tcp.close(state.socket)
    {:ok, Map.take(state, [:sent, :answered, :errors, :last_send, :max_lag])}
  end

  defp loop(state) do
    now = System.monotonic_time(:nanosecond) - state.start
    due = Schedule.due(state.schedule, state.c, now)
    state = if due > state.sent, do: send_due(state, due, now), else: state
    socket = state.socket

    timeout =
      if state.sent < state.n,
        do: max(div(Schedule.intended(state.schedule, state.c, state.sent) - now, @ms) - 1, 0),
        else: @stall_ms

    receive do
      {:tcp, ^socket, data} ->
        received = System.monotonic_time(:nanosecond) - state.start
        loop(replies(state, data, received))

      {closed, ^socket, _} when closed in [:tcp_error] ->
        exit({:shutdown, {:result, {:error, :closed}}})

      {:tcp_closed, ^socket} ->
        exit({:shutdown, {:result, {:error, :closed}}})
    after
      timeout ->
        if state.sent == state.n,
          do: exit({:shutdown, {:result, {:error, {:no_reply_for_ms, @stall_ms}}}}),
          else: loop(state)
    end
  end

  # Every request due and not sent, in one write; the lag is the oldest's.
  defp send_due(state, due, now) do
    count = due - state.sent
    lag = now - Schedule.intended(state.schedule, state.c, state.sent)

    case :gen_tcp.send(state.socket, requests(state, count)) do
      :ok ->
        %{state | sent: due, last_send: now, max_lag: max(state.max_lag, lag)}

      {:error, reason} ->
        exit({:shutdown, {:result, {:error, reason}}})
    end
  end

  defp requests(%{protocol: :resp, request: request}, count), do: List.duplicate(request, count)

  # PUSH frames carry their own correlation ids: the connection's sent count, from 1.
  defp requests(%{protocol: :push, request: {key, payload}, sent: sent}, count) do
    for k <- (sent + 1)..(sent + count), do: Frame.encode({:push, corr(k), :ack, key, payload})
  end

  defp corr(k), do: rem(k - 1, 0xFFFF_FFFF) + 1

  defp replies(%{protocol: :resp} = state, data, received) do
    {answered, errors, rest} = resp_replies(state.buffer <> data, 0, 0)
    record(%{state | buffer: rest}, answered, errors, received)
  end

  defp replies(%{protocol: :push} = state, data, received) do
    case Decoder.feed(state.decoder, data) do
      {:ok, frames, decoder} ->
        {answered, errors} = Enum.reduce(frames, {0, 0}, &acks/2)
        record(%{state | decoder: decoder}, answered, errors, received)

      {:error, reason} ->
        exit({:shutdown, {:result, {:error, reason}}})
    end
  end

  defp acks({:push_acks, _count, acks}, acc) do
    Enum.reduce(acks, acc, fn
      {_corr, {:ok, _seq}}, {answered, errors} -> {answered + 1, errors}
      {_corr, {:error, _}}, {answered, errors} -> {answered + 1, errors + 1}
    end)
  end

  defp acks(other, _acc), do: exit({:shutdown, {:result, {:error, {:unexpected_frame, other}}}})

  # The replies answer the oldest requests in flight, in order.
  defp record(state, 0, _errors, _received), do: state

  defp record(state, answered, errors, received) do
    first = state.answered

    if first + answered > state.sent,
      do: exit({:shutdown, {:result, {:error, :more_replies_than_requests}}})

    record_each(state, first, first + answered, received)
    %{state | answered: first + answered, errors: state.errors + errors}
  end

  defp record_each(_state, last, last, _received), do: :ok

  defp record_each(state, k, last, received) do
    Histogram.record(state.histogram, Schedule.latency(state.schedule, state.c, k, received))
    record_each(state, k + 1, last, received)
  end

  @doc false
  # Whole RESP replies at the head of `data`: {replies, error replies, the rest}.
  def resp_replies(data, answered, errors) do
    case data do
      <<"$", _::binary>> ->
        with {:ok, size, body} <- line(data),
             {size, ""} <- Integer.parse(size),
             true <- size < 0 or byte_size(body) >= size + 2 do
          rest =
            if size < 0, do: body, else: binary_part(body, size + 2, byte_size(body) - size - 2)

          resp_replies(rest, answered + 1, errors)
        else
          _ -> {answered, errors, data}
        end

      <<"-", _::binary>> ->
        case line(data) do
          {:ok, _, rest} -> resp_replies(rest, answered + 1, errors + 1)
          :more -> {answered, errors, data}
        end

      <<type, _::binary>> when type in [?+, ?:] ->
        case line(data) do
          {:ok, _, rest} -> resp_replies(rest, answered + 1, errors)
          :more -> {answered, errors, data}
        end

      <<>> ->
        {answered, errors, data}

      _ ->
        exit({:shutdown, {:result, {:error, {:unexpected_reply, binary_part(data, 0, 1)}}}})
    end
  end

  # The first line's text after its type byte, and the bytes after its CRLF.
  defp line(<<_type, rest::binary>>) do
    case :binary.split(rest, "\r\n") do
      [text, after_line] -> {:ok, text, after_line}
      [_] -> :more
    end
  end

  ## Connecting

  defp request(%{protocol: :resp} = target) do
    args = ["XADD", target.key, "MAXLEN", "#{target.maxlen}", "*", "f", target.payload]

    IO.iodata_to_binary([
      "*#{length(args)}\r\n" | Enum.map(args, &["$#{byte_size(&1)}\r\n", &1, "\r\n"])
    ])
  end

  defp request(%{protocol: :push} = target), do: {target.key, target.payload}

  defp connect(target) do
    opts = [:binary, active: true, nodelay: true]

    with {:ok, socket} <- :gen_tcp.connect(~c"127.0.0.1", target.port, opts, 5_000) do
      case target.protocol do
        :resp -> {:ok, socket, nil}
        :push -> hello(socket)
      end
    end
  end

  defp hello(socket) do
    decoder = Decoder.new(Frame.max_error_frame_size(), accept: :responses)
    :ok = :gen_tcp.send(socket, Frame.encode({:hello, 1, Frame.version(), 0, nil}))
    await_hello(socket, decoder)
  end

  defp await_hello(socket, decoder) do
    receive do
      {:tcp, ^socket, data} ->
        case Decoder.feed(decoder, data) do
          {:ok, [], decoder} -> await_hello(socket, decoder)
          {:ok, [{:hello_ok, 1, _version, _limits}], decoder} -> {:ok, socket, decoder}
          {:ok, frames, _} -> {:error, {:no_hello_ok, frames}}
          {:error, reason} -> {:error, reason}
        end

      {:tcp_closed, ^socket} ->
        {:error, :closed}
    after
      5_000 -> {:error, :no_hello_ok}
    end
  end
end
