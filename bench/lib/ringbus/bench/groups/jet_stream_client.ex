defmodule Ringbus.Bench.Groups.JetStreamClient do
  @moduledoc false
  # The groups bench's JetStream side, one connection per producer or
  # consumer (`Replication.NatsClient`, with headers, so that a pull request
  # that expires ends with a status message). A producer publishes a batch
  # with a reply subject each and waits for the stream's acks. A consumer
  # pulls from a durable pull consumer with explicit acks:
  # `$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>` with `{"batch":n,
  # "expires":ns}`, taking messages until the batch is full or a status
  # (408, the request expired) ends it; then one write acks each message
  # (an empty PUB to its `$JS.ACK...` subject). Not AckAll: it acks every
  # message delivered to the durable before it, other consumers' included,
  # so a crashed consumer's messages would be acked, not delivered again.
  # `target` is `%{port:, stream:, subject:, durable:}`.

  @behaviour Ringbus.Bench.Groups.Client

  alias Ringbus.Bench.Replication.NatsClient

  # How long past a request's own expiry a reply may take before it is an error.
  @slack_ms 2_000

  @impl true
  def producer(target, _index), do: connect(target)

  @impl true
  def consumer(target, _name), do: connect(target)

  defp connect(target) do
    {:ok, client} = NatsClient.connect(target.port, headers: true)
    Map.merge(target, %{client: client, acks: %{}, id: 0})
  end

  @impl true
  def push(conn, payloads) do
    pubs = for {p, i} <- Enum.with_index(payloads), do: pub(conn.subject, reply(conn, i), p)
    :ok = :gen_tcp.send(conn.client.socket, pubs)
    deadline = now_ms() + @slack_ms * 5
    await_acks(conn, Enum.count(payloads), 0, deadline)
  end

  defp reply(conn, i), do: "#{conn.client.inbox}.p#{i}"

  defp await_acks(conn, 0, 0, _deadline), do: {:ok, conn}
  defp await_acks(conn, 0, errors, _deadline), do: {:error, {:publish_errors, errors}, conn}

  defp await_acks(conn, left, errors, deadline) do
    case next(conn, deadline) do
      {:ok, {:msg, _subject, _reply, ack}, conn} ->
        ok? = ack =~ ~s("seq") and not (ack =~ ~s("error"))
        await_acks(conn, left - 1, if(ok?, do: errors, else: errors + 1), deadline)

      {:ok, _other, conn} ->
        await_acks(conn, left, errors, deadline)

      {:error, reason, conn} ->
        {:error, reason, conn}
    end
  end

  @impl true
  def fetch(conn, max, wait_ms) do
    inbox = "#{conn.client.inbox}.pull#{conn.id}"
    request = ~s({"batch":#{max},"expires":#{wait_ms * 1_000_000}})
    api = "$JS.API.CONSUMER.MSG.NEXT.#{conn.stream}.#{conn.durable}"
    :ok = :gen_tcp.send(conn.client.socket, pub(api, inbox, request))
    pull(%{conn | id: conn.id + 1}, inbox, max, [], now_ms() + wait_ms + @slack_ms)
  end

  defp pull(conn, _inbox, 0, acc, _deadline), do: {:ok, Enum.reverse(acc), conn}

  defp pull(conn, inbox, left, acc, deadline) do
    case next(conn, deadline) do
      # A message keeps its own subject; its reply subject is where it is acked.
      {:ok, {:msg, _subject, "$JS.ACK." <> _ = ack, payload}, conn} ->
        {seq, deliveries} = ack_fields(ack)
        conn = %{conn | acks: Map.put(conn.acks, seq, ack)}
        pull(conn, inbox, left - 1, [{seq, payload, deliveries} | acc], deadline)

      # A status (408: the request expired) ends the request.
      {:ok, {:hmsg, ^inbox, _reply, _headers, _payload}, conn} ->
        {:ok, Enum.reverse(acc), conn}

      {:ok, _other, conn} ->
        pull(conn, inbox, left, acc, deadline)

      {:error, reason, conn} ->
        {:error, reason, conn}
    end
  end

  # `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`
  defp ack_fields(ack) do
    [_js, _ack, _stream, _consumer, delivered, seq | _] = String.split(ack, ".")
    {String.to_integer(seq), String.to_integer(delivered)}
  end

  @impl true
  def ack(conn, seqs) do
    {subjects, acks} = Map.split(conn.acks, seqs)
    :ok = :gen_tcp.send(conn.client.socket, for({_, s} <- subjects, do: pub(s, nil, "")))
    {:ok, map_size(subjects), %{conn | acks: acks}}
  end

  @impl true
  def reclaim(conn, max, wait_ms), do: fetch(conn, max, wait_ms)

  @impl true
  def close(conn), do: NatsClient.close(conn.client)

  defp pub(subject, nil, payload),
    do: ["PUB ", subject, " ", Integer.to_string(byte_size(payload)), "\r\n", payload, "\r\n"]

  defp pub(subject, reply, payload),
    do: [
      "PUB ",
      subject,
      " ",
      reply,
      " ",
      Integer.to_string(byte_size(payload)),
      "\r\n",
      payload,
      "\r\n"
    ]

  # One frame; PINGs answered on the way. `deadline` in monotonic ms.
  defp next(conn, deadline) do
    client = conn.client

    case parse(client.buffer) do
      {:ok, :ping, rest} ->
        :ok = :gen_tcp.send(client.socket, "PONG\r\n")
        next(%{conn | client: %{client | buffer: rest}}, deadline)

      {:ok, frame, rest} ->
        {:ok, frame, %{conn | client: %{client | buffer: rest}}}

      :more ->
        case :gen_tcp.recv(client.socket, 0, max(deadline - now_ms(), 0)) do
          {:ok, data} ->
            next(%{conn | client: %{client | buffer: client.buffer <> data}}, deadline)

          {:error, reason} ->
            {:error, reason, conn}
        end
    end
  end

  @doc """
  The first frame of `buffer` and the rest, or `:more`: `MSG` and `HMSG`
  with their reply subjects (nil when none), `PING`, or another line.

      iex> Ringbus.Bench.Groups.JetStreamClient.parse("MSG in 1 $JS.ACK.x 2\\r\\nhi\\r\\n")
      {:ok, {:msg, "in", "$JS.ACK.x", "hi"}, ""}
      iex> Ringbus.Bench.Groups.JetStreamClient.parse("HMSG in 1 32 32\\r\\nNATS/1.0 408 Request Timeout\\r\\n\\r\\n\\r\\n")
      {:ok, {:hmsg, "in", nil, "NATS/1.0 408 Request Timeout\\r\\n\\r\\n", ""}, ""}
      iex> Ringbus.Bench.Groups.JetStreamClient.parse("MSG in 1 5\\r\\nhi")
      :more
  """
  @spec parse(binary()) ::
          {:ok,
           {:msg, binary(), binary() | nil, binary()}
           | {:hmsg, binary(), binary() | nil, binary(), binary()}
           | :ping
           | {:line, binary()}, binary()}
          | :more
  def parse(buffer) do
    case :binary.split(buffer, "\r\n") do
      [line, rest] ->
        case String.split(line, " ") do
          ["MSG", subject, _sid, size] ->
            body(rest, 0, size, fn _, p -> {:msg, subject, nil, p} end)

          ["MSG", subject, _sid, reply, size] ->
            body(rest, 0, size, fn _, p -> {:msg, subject, reply, p} end)

          ["HMSG", subject, _sid, h, size] ->
            body(rest, h, size, &{:hmsg, subject, nil, &1, &2})

          ["HMSG", subject, _sid, reply, h, size] ->
            body(rest, h, size, &{:hmsg, subject, reply, &1, &2})

          ["PING"] ->
            {:ok, :ping, rest}

          _ ->
            {:ok, {:line, line}, rest}
        end

      [_partial] ->
        :more
    end
  end

  defp body(rest, headers, total, frame) do
    headers = if is_binary(headers), do: String.to_integer(headers), else: headers
    payload = String.to_integer(total) - headers

    case rest do
      <<h::binary-size(headers), p::binary-size(payload), "\r\n", rest::binary>> ->
        {:ok, frame.(h, p), rest}

      _ ->
        :more
    end
  end

  defp now_ms, do: System.monotonic_time(:millisecond)
end
