defmodule Ringbus.Bench.Ingest.Encoded do
  @moduledoc false
  # The `encoded` load of `Ringbus.Bench.Ingest`, run in the generator's BEAM:
  # the least work a producer can do per message, so that the server is what
  # is measured. Frames are encoded once, before the clock starts, and written
  # from raw `:gen_tcp` sockets in chunks of many frames; acks are cut out of
  # the byte stream by a hand-written matcher, not decoded into terms.
  #
  # Every message is one PUSH frame, acked (one PUSH_ACKS entry each), with a
  # correlation id of its own among those in flight on its connection:
  # connection frames cycle through a pre-encoded set of ids larger than the
  # window, and every ack entry must carry the id of the oldest push in flight
  # (PROTOCOL.md section 8: entries come in the order pushes were sent) and
  # status 0, or the run stops or counts the error.
  #
  # `connections` sockets each keep at most `window` messages in flight,
  # writing `chunk` frames at a time once `chunk` more fit in the window. With
  # `chunk == window` a connection writes `window` pushes, waits for all their
  # acks, and writes again: redis-benchmark's `-P window` on each of its `-c
  # connections` clients.

  alias Ringbus.Bench.{CPU, Stats}
  alias Ringbus.Wire.{Decoder, Frame}

  @push_acks Keyword.fetch!(Frame.opcodes(), :push_acks)
  # Pre-encoded frames kept at once, shared by every connection (binaries off
  # the heap); the cycle of ids is as long as this allows, and at least two
  # windows.
  @encoded_budget 16 * 1024 * 1024
  @socket_buffer 1024 * 1024
  @no_ack_timeout 30_000

  @type config :: %{
          port: :inet.port_number(),
          channel: String.t(),
          payload: binary(),
          n: pos_integer(),
          connections: pos_integer(),
          window: pos_integer(),
          chunk: pos_integer(),
          timeout_ms: pos_integer()
        }

  @doc """
  Connects, encodes, calls `ready` just before the clock starts, pushes and
  waits for every ack. Returns the figures or why it stopped.
  """
  @spec run(config(), (() -> any())) :: {:ok, map()} | {:error, term()}
  def run(config, ready) do
    :ok = check_matcher!()
    parent = self()
    go = make_ref()
    hz = CPU.ticks_per_second()
    {chunks, frame_bytes} = encode(config)

    workers =
      for share <- Stats.shares(config.n, config.connections), share > 0 do
        spawn_link(fn -> connection(config, share, {chunks, frame_bytes}, {parent, go}) end)
      end

    with :ok <- await_ready(workers, go, config.timeout_ms) do
      ready.()
      cpu0 = CPU.sample()
      started = System.monotonic_time()
      Enum.each(workers, &send(&1, go))
      deadline = System.monotonic_time(:millisecond) + config.timeout_ms
      outcome = await_done(workers, go, deadline, %{acks: 0, ack_frames: 0, errors: 0})
      elapsed = System.monotonic_time() - started
      cpu = CPU.used(cpu0, CPU.sample(), hz)

      with {:ok, totals} <- outcome do
        {:ok,
         Map.merge(totals, %{
           messages: config.n,
           elapsed_us: System.convert_time_unit(elapsed, :native, :microsecond),
           cpu: cpu
         })}
      end
    end
  end

  # A tuple of chunks of `chunk` frames; frame `j` of chunk `c` has the
  # correlation id `c * chunk + j + 1`.
  defp encode(config) do
    frame = fn corr -> Frame.encode({:push, corr, :ack, config.channel, config.payload}) end
    frame_bytes = IO.iodata_length(frame.(1))
    k = config.chunk
    at_least = div(config.window + k - 1, k) + 1
    fits = div(@encoded_budget, k * frame_bytes)
    needed = div(div(config.n, config.connections) + k, k)
    count = max(at_least, min(fits, needed))

    chunks =
      for c <- 0..(count - 1) do
        IO.iodata_to_binary(for j <- 1..k, do: frame.(c * k + j))
      end

    {List.to_tuple(chunks), frame_bytes}
  end

  defp await_ready([], _go, _timeout), do: :ok

  defp await_ready([pid | rest], go, timeout) do
    receive do
      {^go, :ready, ^pid} -> await_ready(rest, go, timeout)
      {^go, :error, _pid, reason} -> {:error, reason}
    after
      timeout -> {:error, :connect_timeout}
    end
  end

  defp await_done([], _go, _deadline, totals), do: {:ok, totals}

  defp await_done(workers, go, deadline, totals) do
    left = max(deadline - System.monotonic_time(:millisecond), 0)

    receive do
      {^go, :done, pid, figures} ->
        totals = Map.merge(totals, figures, fn _key, a, b -> a + b end)
        await_done(List.delete(workers, pid), go, deadline, totals)

      {^go, :error, _pid, reason} ->
        {:error, reason}
    after
      left -> {:error, :timeout}
    end
  end

  ## One connection

  defp connection(config, n, {chunks, frame_bytes}, {parent, go}) do
    case connect(config) do
      {:ok, socket} ->
        send(parent, {go, :ready, self()})

        receive do
          ^go -> :ok
        end

        state = %{
          socket: socket,
          n: n,
          window: config.window,
          chunk: config.chunk,
          chunks: chunks,
          frame_bytes: frame_bytes,
          cycle: tuple_size(chunks) * config.chunk,
          sent: 0,
          acked: 0,
          next_corr: 1,
          errors: 0,
          ack_frames: 0,
          buffer: <<>>
        }

        result =
          try do
            state = push(state)
            {:done, %{acks: state.acked, ack_frames: state.ack_frames, errors: state.errors}}
          catch
            :throw, {:bench_error, reason} -> {:error, reason}
          end

        :gen_tcp.close(socket)

        case result do
          {:done, figures} -> send(parent, {go, :done, self(), figures})
          {:error, reason} -> send(parent, {go, :error, self(), reason})
        end

      {:error, reason} ->
        send(parent, {go, :error, self(), reason})
    end
  end

  # HELLO in passive mode; then the socket sends its data as messages, so
  # that acks keep arriving while a write waits for the kernel.
  defp connect(config) do
    opts = [
      :binary,
      active: false,
      nodelay: true,
      sndbuf: @socket_buffer,
      recbuf: @socket_buffer,
      buffer: 256 * 1024
    ]

    decoder = Decoder.new(Frame.max_error_frame_size(), accept: :responses)

    with {:ok, socket} <- :gen_tcp.connect(~c"127.0.0.1", config.port, opts, config.timeout_ms),
         :ok <- :gen_tcp.send(socket, Frame.encode({:hello, 1, Frame.version(), 0, nil})),
         {:ok, [{:hello_ok, 1, _version, _limits}]} <- first_frame(socket, decoder, config),
         :ok <- :inet.setopts(socket, active: true) do
      {:ok, socket}
    else
      {:ok, frames} -> {:error, {:no_hello_ok, frames}}
      {:error, reason} -> {:error, reason}
    end
  end

  defp first_frame(socket, decoder, config) do
    with {:ok, data} <- :gen_tcp.recv(socket, 0, config.timeout_ms),
         {:ok, frames, decoder} <- Decoder.feed(decoder, data) do
      if frames == [], do: first_frame(socket, decoder, config), else: {:ok, frames}
    else
      {:error, reason, _frames} -> {:error, reason}
      {:error, reason} -> {:error, reason}
    end
  end

  defp push(%{sent: n, acked: n, n: n} = state), do: state

  defp push(%{sent: sent, acked: acked, n: n, chunk: k} = state) do
    count = min(k, n - sent)

    if count > 0 and sent - acked + count <= state.window do
      chunk = elem(state.chunks, rem(div(sent, k), tuple_size(state.chunks)))
      bytes = if count == k, do: chunk, else: binary_part(chunk, 0, count * state.frame_bytes)

      case :gen_tcp.send(state.socket, bytes) do
        :ok -> push(take_acks(%{state | sent: sent + count}, 0))
        {:error, reason} -> throw({:bench_error, {:send, reason}})
      end
    else
      push(take_acks(state, @no_ack_timeout))
    end
  end

  # Takes what the socket has sent; with a timeout, waits for something first.
  defp take_acks(%{socket: socket} = state, timeout) do
    receive do
      {:tcp, ^socket, data} -> take_acks(acks(state, data), 0)
      {:tcp_closed, ^socket} -> throw({:bench_error, :closed})
      {:tcp_error, ^socket, reason} -> throw({:bench_error, reason})
    after
      timeout ->
        if timeout > 0, do: throw({:bench_error, {:no_acks_for_ms, timeout}}), else: state
    end
  end

  defp acks(%{buffer: <<>>} = state, data), do: frames(data, state)
  defp acks(state, data), do: frames(state.buffer <> data, state)

  defp frames(<<length::32, rest::binary>>, state) when byte_size(rest) >= length do
    <<frame::binary-size(length), rest::binary>> = rest
    frames(rest, frame(frame, state))
  end

  defp frames(bytes, state), do: %{state | buffer: bytes}

  defp frame(<<@push_acks, count::32, entries::binary>> = frame, state) do
    {next_corr, acked, errors} =
      entries(entries, state.next_corr, state.cycle, state.acked, state.errors)

    if acked - state.acked != count, do: throw({:bench_error, {:bad_push_acks, frame}})

    %{
      state
      | next_corr: next_corr,
        acked: acked,
        errors: errors,
        ack_frames: state.ack_frames + 1
    }
  end

  defp frame(other, _state) do
    throw({:bench_error, {:unexpected_frame, Frame.decode_body(other)}})
  end

  # Each entry must answer the oldest push in flight: `corr` appears twice in
  # the heads below, so a mismatch falls through to the last clause.
  defp entries(<<corr::32, 0::16, _seq::64, rest::binary>>, corr, cycle, acked, errors),
    do: entries(rest, next(corr, cycle), cycle, acked + 1, errors)

  defp entries(<<corr::32, _status::16, _seq::64, rest::binary>>, corr, cycle, acked, errors),
    do: entries(rest, next(corr, cycle), cycle, acked + 1, errors + 1)

  defp entries(<<>>, corr, _cycle, acked, errors), do: {corr, acked, errors}

  defp entries(<<got::32, _::binary>>, expected, _cycle, _acked, _errors),
    do: throw({:bench_error, {:ack_for_corr, got, :expected, expected}})

  defp entries(other, _expected, _cycle, _acked, _errors),
    do: throw({:bench_error, {:bad_push_acks_entries, other}})

  defp next(cycle, cycle), do: 1
  defp next(corr, _cycle), do: corr + 1

  # The matcher above reads PUSH_ACKS entries by hand; check it against the
  # codec once, so that a change of the wire stops the bench instead of
  # misreading acks.
  defp check_matcher! do
    bytes =
      IO.iodata_to_binary(Frame.encode({:push_acks, 2, [{1, {:ok, 41}}, {2, {:error, :full}}]}))

    state = %{next_corr: 1, cycle: 3, acked: 0, errors: 0, ack_frames: 0, buffer: <<>>}

    case frames(bytes, state) do
      %{next_corr: 3, acked: 2, errors: 1, ack_frames: 1, buffer: <<>>} -> :ok
      other -> raise "the PUSH_ACKS matcher disagrees with Ringbus.Wire.Frame: #{inspect(other)}"
    end
  end
end
