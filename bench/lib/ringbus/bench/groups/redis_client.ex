defmodule Ringbus.Bench.Groups.RedisClient do
  @moduledoc false
  # The groups bench's Redis side, one connection per producer or consumer
  # (`Ringbus.Test.RespClient`): a batch of `XADD`s pipelined in one write,
  # `XREADGROUP ... COUNT n BLOCK ms ... >` and one `XACK` of the batch it
  # read. Redis does not see a consumer die: its messages stay pending
  # until another consumer claims them, here with `XAUTOCLAIM` once they
  # are `ack_wait` ms idle, polled every `@poll_ms`. `target` is
  # `%{port:, stream:, group:, maxlen:, ack_wait:}`.

  @behaviour Ringbus.Bench.Groups.Client

  alias Ringbus.Test.RespClient

  @poll_ms 10
  # A reply later than this is an error (the bench's rows are seconds long).
  @reply_ms 10_000

  @impl true
  def producer(target, _index), do: Map.put(target, :client, connect!(target.port))

  @impl true
  def consumer(target, name),
    do: Map.merge(target, %{client: connect!(target.port), consumer: name})

  # Without Nagle's algorithm, as the other systems' clients: a small
  # command after a reply would otherwise wait for the server's delayed ack.
  defp connect!(port) do
    client = RespClient.connect!(port)
    :ok = :inet.setopts(client.socket, nodelay: true)
    client
  end

  @impl true
  def push(conn, payloads) do
    maxlen = Integer.to_string(conn.maxlen)
    commands = for p <- payloads, do: ["XADD", conn.stream, "MAXLEN", "~", maxlen, "*", "f", p]
    {replies, conn} = call(conn, commands)

    case Enum.find(replies, &match?({:error, _}, &1)) do
      nil -> {:ok, conn}
      {:error, text} -> {:error, text, conn}
    end
  end

  @impl true
  def fetch(conn, max, wait_ms) do
    command =
      ["XREADGROUP", "GROUP", conn.group, conn.consumer, "COUNT", "#{max}", "BLOCK", "#{wait_ms}"] ++
        ["STREAMS", conn.stream, ">"]

    case call(conn, [command]) do
      {[nil], conn} -> {:ok, [], conn}
      {[[[_stream, entries]]], conn} -> {:ok, messages(entries, 1), conn}
      {[{:error, text}], conn} -> {:error, text, conn}
    end
  end

  # Redis counts a claim as a delivery; XAUTOCLAIM does not say how many.
  defp messages(entries, deliveries),
    do: for([id, [_field, payload]] <- entries, do: {id, payload, deliveries})

  @impl true
  def ack(conn, ids) do
    case call(conn, [["XACK", conn.stream, conn.group | ids]]) do
      {[n], conn} when is_integer(n) -> {:ok, n, conn}
      {[{:error, text}], conn} -> {:error, text, conn}
    end
  end

  @impl true
  def reclaim(conn, max, _wait_ms) do
    command =
      ["XAUTOCLAIM", conn.stream, conn.group, conn.consumer, "#{conn.ack_wait}", "0-0"] ++
        ["COUNT", "#{max}"]

    case call(conn, [command]) do
      {[[_next, [], _deleted]], conn} ->
        receive after: (@poll_ms -> :ok)
        {:ok, [], conn}

      {[[_next, entries, _deleted]], conn} ->
        {:ok, messages(entries, 2), conn}

      {[{:error, text}], conn} ->
        {:error, text, conn}
    end
  end

  @impl true
  def close(conn), do: RespClient.close(conn.client)

  # Sends `commands` in one write and reads a reply for each. A reply is
  # read once all its bytes are in (`RespClient.read/1` starts from the
  # front each time): every chunk the socket holds is taken before the
  # next try, so a batch of 1 KB entries is not parsed once per chunk.
  defp call(conn, commands) do
    :ok = RespClient.send_commands(conn.client, commands)
    replies(conn, Enum.count(commands), [])
  end

  defp replies(conn, 0, acc), do: {Enum.reverse(acc), conn}

  defp replies(%{client: client} = conn, n, acc) do
    case RespClient.read(client.buffer) do
      {:ok, reply, rest} ->
        replies(%{conn | client: %{client | buffer: rest}}, n - 1, [reply | acc])

      :more ->
        {:ok, data} = :gen_tcp.recv(client.socket, 0, @reply_ms)
        buffer = IO.iodata_to_binary([client.buffer, data | drain(client.socket)])
        replies(%{conn | client: %{client | buffer: buffer}}, n, acc)
    end
  end

  # What the socket holds now, without waiting.
  defp drain(socket) do
    case :gen_tcp.recv(socket, 0, 0) do
      {:ok, data} -> [data | drain(socket)]
      {:error, :timeout} -> []
    end
  end
end
