defmodule Ringbus.Bench.Replication.RedisLoad do
  @moduledoc false
  # XADD over one connection, pipelined with a window of unanswered
  # commands: the replication bench's Redis rows. Redis answers in order,
  # so the send times wait in a queue as long as the window.

  alias Ringbus.Bench.Replication.Samples

  @doc """
  `XADD stream MAXLEN ~ maxlen * f <size bytes>` with at most `window`
  unanswered, for `ms` or until `max` are sent; latency is send to reply.
  """
  @spec xadd(
          :inet.port_number(),
          binary(),
          pos_integer(),
          pos_integer(),
          pos_integer(),
          pos_integer(),
          pos_integer()
        ) ::
          Samples.summary()
  def xadd(port, stream, maxlen, size, window, ms, max) do
    {:ok, socket} =
      :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false, nodelay: true], 2_000)

    payload = :binary.copy("x", size)

    command =
      encode(["XADD", stream, "MAXLEN", "~", Integer.to_string(maxlen), "*", "f", payload])

    samples = Samples.new(max)
    start = Samples.now()
    run = %{socket: socket, command: command, samples: samples, window: window, max: max}

    try do
      pump(Map.put(run, :deadline, start + ms * 1_000), :queue.new(), 0, 0, "")
      Samples.summary(samples, (Samples.now() - start) / 1_000_000, size)
    after
      :gen_tcp.close(socket)
    end
  end

  defp pump(run, pending, outstanding, sent, buffer) do
    now = Samples.now()
    open? = now < run.deadline and sent < run.max

    {pending, outstanding, sent} =
      if open? and outstanding < run.window do
        n = min(run.window - outstanding, run.max - sent)
        :ok = :gen_tcp.send(run.socket, List.duplicate(run.command, n))
        pending = Enum.reduce(1..n, pending, fn _, q -> :queue.in(now, q) end)
        {pending, outstanding + n, sent + n}
      else
        {pending, outstanding, sent}
      end

    if outstanding == 0 and not open? do
      :ok
    else
      case :gen_tcp.recv(run.socket, 0, 10_000) do
        {:ok, data} ->
          {pending, outstanding, buffer} = replies(run, buffer <> data, pending, outstanding)
          pump(run, pending, outstanding, sent, buffer)

        {:error, reason} ->
          raise "redis-server stopped answering: #{inspect(reason)}"
      end
    end
  end

  # Takes every complete reply: a bulk string (the entry's id) or an error.
  defp replies(run, buffer, pending, outstanding) do
    case reply(buffer) do
      {ok?, rest} ->
        {{:value, sent_at}, pending} = :queue.out(pending)

        if ok?,
          do: Samples.add(run.samples, Samples.now() - sent_at),
          else: Samples.error(run.samples)

        replies(run, rest, pending, outstanding - 1)

      :more ->
        {pending, outstanding, buffer}
    end
  end

  defp reply(<<?$, _::binary>> = buffer) do
    with [len, rest] <- :binary.split(buffer, "\r\n"),
         {n, ""} <- Integer.parse(binary_part(len, 1, byte_size(len) - 1)),
         <<_id::binary-size(n), "\r\n", rest::binary>> <- rest do
      {true, rest}
    else
      _ -> :more
    end
  end

  defp reply(buffer) do
    case :binary.split(buffer, "\r\n") do
      [_line, rest] -> {false, rest}
      [_] -> :more
    end
  end

  defp encode(parts),
    do: ["*#{length(parts)}\r\n" | Enum.map(parts, &["$#{byte_size(&1)}\r\n", &1, "\r\n"])]
end
