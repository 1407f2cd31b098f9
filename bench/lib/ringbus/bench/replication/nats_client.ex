defmodule Ringbus.Bench.Replication.NatsClient do
  @moduledoc false
  # Just enough of the NATS text protocol over `:gen_tcp` for the bench:
  # CONNECT, SUB, PUB with a reply subject, MSG, PING/PONG. JetStream's API
  # is requests on `$JS.API.>` subjects; a publish to a stream's subject
  # with a reply subject gets the stream's ack, `{"stream":..,"seq":..}`,
  # on it. `parse/1` is pure: it takes the bytes received and returns one
  # frame and the rest.

  alias Ringbus.Bench.Replication.{Samples, Window}

  @type t :: %{socket: :gen_tcp.socket(), buffer: binary(), inbox: binary()}
  @type frame ::
          {:msg, subject :: binary(), payload :: binary()}
          | :ping
          | {:line, binary()}

  @doc """
  Connects to a server on 127.0.0.1 and completes the handshake. The
  connection's replies come on subjects under its own inbox (`inbox.*`,
  unique to it). With `headers: true` the server may send `HMSG`s (a
  JetStream pull request ends with one, a status), which `parse/1` does
  not read: that caller parses the frames itself.
  """
  @spec connect(:inet.port_number(), headers: boolean()) :: {:ok, t()} | {:error, term()}
  def connect(port, opts \\ []) do
    headers = Keyword.get(opts, :headers, false)
    inbox = "_INBOX.ringbus_bench.#{System.unique_integer([:positive])}"
    opts = [:binary, active: false, nodelay: true, sndbuf: 1_048_576, recbuf: 1_048_576]

    with {:ok, socket} <- :gen_tcp.connect({127, 0, 0, 1}, port, opts, 1_000),
         :ok <-
           :gen_tcp.send(socket, [
             ~s(CONNECT {"verbose":false,"pedantic":false,"headers":#{headers}}\r\n),
             "SUB #{inbox}.* 1\r\nPING\r\n"
           ]),
         {:ok, client} <- await_pong(%{socket: socket, buffer: "", inbox: inbox}, 2_000) do
      {:ok, client}
    else
      {:error, _} = error -> error
    end
  end

  defp await_pong(client, timeout) do
    case next(client, timeout) do
      {:ok, {:line, "PONG"}, client} -> {:ok, client}
      {:ok, {:line, "-ERR" <> _ = line}, _client} -> {:error, {:nats, line}}
      {:ok, _other, client} -> await_pong(client, timeout)
      {:error, _} = error -> error
    end
  end

  @spec close(t()) :: :ok
  def close(%{socket: socket}), do: :gen_tcp.close(socket)

  @doc "Publishes `payload` to `subject` and waits `timeout` ms for the reply's payload."
  @spec request(t(), binary(), iodata(), timeout()) :: {:ok, binary()} | {:error, term()}
  def request(client, subject, payload, timeout) do
    id = System.unique_integer([:positive])
    :ok = :gen_tcp.send(client.socket, pub(subject, "#{client.inbox}.r#{id}", payload))
    await_reply(client, "#{client.inbox}.r#{id}", Samples.now() + timeout * 1_000)
  end

  defp await_reply(client, reply_to, deadline) do
    left = max(div(deadline - Samples.now(), 1_000), 0)

    case next(client, left) do
      {:ok, {:msg, ^reply_to, payload}, _client} -> {:ok, payload}
      {:ok, _other, client} -> await_reply(client, reply_to, deadline)
      {:error, _} = error -> error
    end
  end

  @doc """
  Publishes `size`-byte messages to `subject` with at most `window` acks
  outstanding, for `ms` or until `max` are sent; latency is PUB to the
  stream's ack. A reply that is not an ack (an error) counts as an error;
  acks still missing 5 s after the last send are counted as errors too.
  """
  @spec publish(t(), binary(), pos_integer(), pos_integer(), pos_integer(), pos_integer()) ::
          Samples.summary()
  def publish(client, subject, size, window, ms, max) do
    payload = :binary.copy("x", size)
    samples = Samples.new(max)
    start = Samples.now()
    run = %{subject: subject, payload: payload, samples: samples, window: window}
    run = Map.merge(run, %{deadline: start + ms * 1_000, max: max})
    _client = pump(client, run, %{}, 0)
    Samples.summary(samples, (Samples.now() - start) / 1_000_000, size)
  end

  # `pending` maps the id of each outstanding PUB to its send time.
  defp pump(client, run, pending, sent) do
    send = fn ids ->
      :gen_tcp.send(
        client.socket,
        Enum.map(ids, &pub(run.subject, "#{client.inbox}.#{&1}", run.payload))
      )
    end

    case Window.fill(run, pending, sent, send) do
      {pending, _sent, false, _timeout} when map_size(pending) == 0 ->
        client

      # A drained window waits on its acks at most 5 s past the end.
      {pending, sent, _open?, timeout} ->
        case receive_acks(client, run, pending, timeout) do
          {:ok, client, pending} ->
            pump(client, run, pending, sent)

          {:error, _} ->
            for _ <- Map.keys(pending), do: Samples.error(run.samples)
            client
        end
    end
  end

  # Waits for some bytes, then takes every complete frame they hold.
  defp receive_acks(client, run, pending, timeout) do
    case :gen_tcp.recv(client.socket, 0, timeout) do
      {:ok, data} ->
        {client, pending} = take_frames(%{client | buffer: client.buffer <> data}, run, pending)
        {:ok, client, pending}

      {:error, _} = error ->
        error
    end
  end

  defp take_frames(client, run, pending) do
    case parse(client.buffer) do
      {:ok, {:msg, subject, reply}, rest} ->
        client = %{client | buffer: rest}

        case Integer.parse(reply_id(subject, client.inbox)) do
          {id, ""} ->
            {sent_at, pending} = Map.pop(pending, id)

            cond do
              sent_at == nil ->
                :ok

              reply =~ ~s("seq") and not (reply =~ ~s("error")) ->
                Samples.add(run.samples, Samples.now() - sent_at)

              true ->
                Samples.error(run.samples)
            end

            take_frames(client, run, pending)

          _ ->
            take_frames(client, run, pending)
        end

      {:ok, :ping, rest} ->
        :ok = :gen_tcp.send(client.socket, "PONG\r\n")
        take_frames(%{client | buffer: rest}, run, pending)

      {:ok, _other, rest} ->
        take_frames(%{client | buffer: rest}, run, pending)

      :more ->
        {client, pending}
    end
  end

  # What follows `inbox.` in a reply's subject ("" for another subject).
  defp reply_id(subject, inbox) do
    size = byte_size(inbox)

    case subject do
      <<^inbox::binary-size(size), ".", id::binary>> -> id
      _ -> ""
    end
  end

  # One frame, answering PINGs on the way; waits `timeout` ms for bytes.
  defp next(client, timeout) do
    case parse(client.buffer) do
      {:ok, :ping, rest} ->
        :ok = :gen_tcp.send(client.socket, "PONG\r\n")
        next(%{client | buffer: rest}, timeout)

      {:ok, frame, rest} ->
        {:ok, frame, %{client | buffer: rest}}

      :more ->
        case :gen_tcp.recv(client.socket, 0, timeout) do
          {:ok, data} -> next(%{client | buffer: client.buffer <> data}, timeout)
          {:error, _} = error -> error
        end
    end
  end

  defp pub(subject, reply_to, payload),
    do: [
      "PUB ",
      subject,
      " ",
      reply_to,
      " ",
      Integer.to_string(IO.iodata_length(payload)),
      "\r\n",
      payload,
      "\r\n"
    ]

  @doc """
  The first frame of `buffer` and the rest, or `:more`.

      iex> Ringbus.Bench.Replication.NatsClient.parse("MSG a.b 1 3\\r\\nabc\\r\\nPI")
      {:ok, {:msg, "a.b", "abc"}, "PI"}
      iex> Ringbus.Bench.Replication.NatsClient.parse("MSG a.b 1 3\\r\\nab")
      :more
  """
  @spec parse(binary()) :: {:ok, frame(), binary()} | :more
  def parse(buffer) do
    case :binary.split(buffer, "\r\n") do
      [line, rest] ->
        case String.split(line, " ") do
          ["MSG", subject, _sid | more] -> payload(subject, List.last(more), rest)
          ["PING"] -> {:ok, :ping, rest}
          _ -> {:ok, {:line, line}, rest}
        end

      [_partial] ->
        :more
    end
  end

  defp payload(subject, size, rest) do
    size = String.to_integer(size)

    case rest do
      <<payload::binary-size(size), "\r\n", rest::binary>> ->
        {:ok, {:msg, subject, payload}, rest}

      _ ->
        :more
    end
  end
end
