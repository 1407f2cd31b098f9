defmodule Ringbus.Bench.Latency.Generator do
  @moduledoc false
  # The open-loop load generator of `Ringbus.Bench.Latency`: ONE process
  # owns every connection and keeps the schedule itself. Its loop reads
  # whatever replies have arrived (the sockets are `active: true`, so a
  # message holds all a read found), counts them by binary matching
  # (`Replies`) and times each from its request's intended time, then
  # writes every request now due, all those of a connection in one write,
  # whether or not earlier ones were answered. While the next request is
  # due within 2 ms it spins on `:erlang.monotonic_time/0` (the BEAM's
  # timers count whole milliseconds), so requests leave within microseconds
  # of their time; further off, it sleeps in `receive`.
  #
  # One loop does reads and writes, so a generator slow to read is late to
  # write: the send lag it records for every request (actual write after
  # intended time) is its own delay, whichever side caused it. It also
  # counts its busy time (loops that read or wrote), against the run's.
  #
  # Writes go straight to the port (`:erlang.port_command/2`, as
  # `gen_tcp:send/2` does) and the `inet_reply` that each write's status
  # comes in is read with the replies: `gen_tcp:send/2` would wait for it
  # with a selective receive that scans every reply queued before it.
  #
  # A connection's replies come in the order of its requests (RESP, and a
  # Ringbus connection's PUSH acks), so its k-th reply answers its k-th
  # request and no send time is kept. The run is bounded by the schedule
  # and by `@stall_ms` without a reply once every request is sent.

  alias Ringbus.Bench.Latency.{Histogram, Replies, Schedule}
  alias Ringbus.Wire.{Decoder, Frame}

  @stall_ms 30_000
  @ms 1_000_000
  # Spin (rather than sleep) when the next request is due within this.
  @spin_ns 2_000_000

  @typedoc """
  What to send: RESP `XADD` to a stream, binary `PUSH` to a channel, or
  RESP `PING` (the generator's floor, against a bare responder).
  """
  @type target :: %{
          required(:protocol) => :resp | :push | :ping,
          required(:port) => :inet.port_number(),
          optional(:key) => String.t(),
          optional(:payload) => binary(),
          optional(:maxlen) => pos_integer()
        }

  @doc """
  Sends `schedule`'s requests to `target` from a process of its own;
  returns the histograms of their latencies and send lags (ns) and the
  figures of the run, or the first error.
  """
  @spec run(target(), Schedule.t()) :: {:ok, map()} | {:error, term()}
  def run(target, %Schedule{} = schedule) do
    {pid, ref} = spawn_monitor(fn -> exit({:shutdown, {:result, generate(target, schedule)}}) end)

    receive do
      {:DOWN, ^ref, :process, ^pid, {:shutdown, {:result, result}}} -> result
      {:DOWN, ^ref, :process, ^pid, reason} -> {:error, reason}
    end
  end

  defp generate(target, schedule) do
    conns = min(schedule.connections, schedule.total)

    case connect_all(target, conns, []) do
      {:ok, sockets} ->
        try do
          for socket <- sockets, do: :ok = :inet.setopts(socket, active: true)
          rest = if target.protocol == :push, do: push_decoder(), else: <<>>

          state = %{
            schedule: schedule,
            n: conns,
            total: schedule.total,
            protocol: target.protocol,
            request: request(target),
            # The first request is due a millisecond from now.
            start: System.monotonic_time(:nanosecond) + @ms,
            next: 0,
            answered: 0,
            errors: 0,
            sockets: List.to_tuple(sockets),
            index: sockets |> Enum.with_index() |> Map.new(),
            answered_on: :atomics.new(conns, signed: false),
            rests: List.to_tuple(List.duplicate(rest, conns)),
            histogram: Histogram.new(),
            send_lags: Histogram.new(),
            max_lag: 0,
            last_send: 0,
            busy: 0
          }

          loop(state)
        catch
          {:generator, reason} -> {:error, reason}
        after
          Enum.each(sockets, &:gen_tcp.close/1)
        end

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp now(state), do: System.monotonic_time(:nanosecond) - state.start

  ## The loop

  defp loop(%{answered: total, total: total} = state) do
    {:ok,
     %{
       answered: state.answered,
       errors: state.errors,
       last_send: state.last_send,
       max_lag: state.max_lag,
       histogram: state.histogram,
       send_lags: state.send_lags,
       busy: state.busy,
       duration: now(state)
     }}
  end

  defp loop(state) do
    t0 = now(state)
    {state, read} = drain(state, false)
    t1 = if read, do: now(state), else: t0
    due = Schedule.due_total(state.schedule, t1)
    {state, t2} = if due > state.next, do: send_due(state, due), else: {state, t1}
    state = %{state | busy: state.busy + (t2 - t0)}

    cond do
      state.answered == state.total ->
        loop(state)

      state.next == state.total ->
        wait(state, @stall_ms)

      (gap = Schedule.at(state.schedule, state.next) - t2) > @spin_ns ->
        wait(state, div(gap, @ms) - 1)

      true ->
        # The sockets' reads run as port tasks on this scheduler: let them in at each turn.
        :erlang.yield()
        loop(state)
    end
  end

  # Sleeps until a message comes or `timeout` ms pass; then loops.
  defp wait(state, timeout) do
    receive do
      message -> loop(handle(state, message))
    after
      timeout ->
        if state.next == state.total,
          do: throw({:generator, {:no_reply_for_ms, @stall_ms, answered: state.answered}}),
          else: loop(state)
    end
  end

  # Handles every message queued (replies and write statuses, bounded by the
  # requests in flight); whether it read any replies.
  defp drain(state, read) do
    receive do
      message -> drain(handle(state, message), read or elem(message, 0) == :tcp)
    after
      0 -> {state, read}
    end
  end

  defp handle(state, {:tcp, socket, data}), do: replies(state, socket, data, now(state))
  defp handle(state, {:inet_reply, _socket, :ok}), do: state
  defp handle(_state, {:inet_reply, _socket, error}), do: throw({:generator, error})
  defp handle(_state, {:tcp_closed, _socket}), do: throw({:generator, :closed})
  defp handle(_state, {:tcp_error, _socket, reason}), do: throw({:generator, reason})
  defp handle(_state, other), do: throw({:generator, {:unexpected_message, other}})

  ## Writing

  # Every request due and not sent, a write per connection; each request's
  # send lag is counted from the time after the last write, at the most.
  defp send_due(state, due) do
    n = state.n
    from = state.next
    last = due - 1

    for i <- from..min(from + n - 1, last)//1 do
      c = rem(i, n)
      socket = elem(state.sockets, c)
      write(socket, requests(state, i, last, n, []))
    end

    sent = now(state)
    record_lags(state.send_lags, state.schedule, from, last, sent)
    lag = sent - Schedule.at(state.schedule, from)

    {%{state | next: due, last_send: sent, max_lag: max(state.max_lag, lag)}, sent}
  end

  # An inet port: the status comes back as {:inet_reply, socket, status}; a closed one is gone.
  defp write(socket, data) do
    :erlang.port_command(socket, data)
  rescue
    ArgumentError -> throw({:generator, :closed})
  end

  defp requests(_state, i, last, _n, acc) when i > last, do: Enum.reverse(acc)

  defp requests(state, i, last, n, acc),
    do: requests(state, i + n, last, n, [request(state, i, n) | acc])

  defp request(%{protocol: :push, request: {key, payload}}, i, n),
    do: Frame.encode({:push, corr(div(i, n) + 1), :ack, key, payload})

  defp request(%{request: request}, _i, _n), do: request

  # PUSH frames carry their own correlation ids: the connection's count of requests, from 1.
  defp corr(k), do: rem(k - 1, 0xFFFF_FFFF) + 1

  defp record_lags(_h, _schedule, i, last, _sent) when i > last, do: :ok

  defp record_lags(h, schedule, i, last, sent) do
    Histogram.record(h, sent - Schedule.at(schedule, i))
    record_lags(h, schedule, i + 1, last, sent)
  end

  ## Reading

  defp replies(state, socket, data, received) do
    c = Map.fetch!(state.index, socket)
    rest = elem(state.rests, c)

    {answered, errors, rest} =
      case state.protocol do
        :push -> Replies.push(rest, data)
        _resp -> Replies.resp(rest <> data, 0, 0)
      end
      |> case do
        {:ok, answered, errors, rest} -> {answered, errors, rest}
        {:error, reason} -> throw({:generator, reason})
      end

    first = :atomics.get(state.answered_on, c + 1)

    if first + answered > sent_on(state, c),
      do: throw({:generator, :more_replies_than_requests})

    record_latencies(state, c, first, first + answered, received)
    :atomics.put(state.answered_on, c + 1, first + answered)

    %{
      state
      | rests: put_elem(state.rests, c, rest),
        answered: state.answered + answered,
        errors: state.errors + errors
    }
  end

  # The requests connection `c` was sent: those of 0..next-1 with index c mod n.
  defp sent_on(%{next: next, n: n}, c), do: max(div(next - c + n - 1, n), 0)

  defp record_latencies(_state, _c, last, last, _received), do: :ok

  defp record_latencies(state, c, k, last, received) do
    Histogram.record(state.histogram, Schedule.latency(state.schedule, c, k, received))
    record_latencies(state, c, k + 1, last, received)
  end

  ## Connecting

  defp request(%{protocol: :resp} = target),
    do: command(["XADD", target.key, "MAXLEN", "#{target.maxlen}", "*", "f", target.payload])

  defp request(%{protocol: :ping}), do: command(["PING"])
  defp request(%{protocol: :push} = target), do: {target.key, target.payload}

  defp command(args) do
    IO.iodata_to_binary([
      "*#{length(args)}\r\n" | Enum.map(args, &["$#{byte_size(&1)}\r\n", &1, "\r\n"])
    ])
  end

  defp connect_all(_target, 0, sockets), do: {:ok, Enum.reverse(sockets)}

  defp connect_all(target, left, sockets) do
    case connect(target) do
      {:ok, socket} ->
        connect_all(target, left - 1, [socket | sockets])

      {:error, reason} ->
        Enum.each(sockets, &:gen_tcp.close/1)
        {:error, reason}
    end
  end

  defp connect(target) do
    # inet_backend: :inet, as writes go to the port itself.
    opts = [:binary, active: false, nodelay: true]

    with {:ok, socket} <- :gen_tcp.connect(~c"127.0.0.1", target.port, opts, 5_000) do
      true = is_port(socket)

      case target.protocol do
        :push -> hello(socket)
        _resp -> {:ok, socket}
      end
    end
  end

  defp push_decoder, do: Decoder.new(Frame.max_error_frame_size(), accept: :responses)

  defp hello(socket) do
    :ok = :gen_tcp.send(socket, Frame.encode({:hello, 1, Frame.version(), 0, nil}))
    await_hello(socket, push_decoder())
  end

  # HELLO_OK alone: the decoder's rest is dropped, as nothing follows it before a PUSH.
  defp await_hello(socket, decoder) do
    with {:ok, data} <- :gen_tcp.recv(socket, 0, 5_000) do
      case Decoder.feed(decoder, data) do
        {:ok, [], decoder} -> await_hello(socket, decoder)
        {:ok, [{:hello_ok, 1, _version, _limits}], _decoder} -> {:ok, socket}
        {:ok, frames, _} -> {:error, {:no_hello_ok, frames}}
        {:error, reason} -> {:error, reason}
      end
    end
  end
end
