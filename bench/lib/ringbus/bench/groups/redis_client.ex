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

  @impl true
  def producer(target, _index), do: Map.put(target, :client, RespClient.connect!(target.port))

  @impl true
  def consumer(target, name),
    do: Map.merge(target, %{client: RespClient.connect!(target.port), consumer: name})

  @impl true
  def push(conn, payloads) do
    maxlen = Integer.to_string(conn.maxlen)
    commands = for p <- payloads, do: ["XADD", conn.stream, "MAXLEN", "~", maxlen, "*", "f", p]
    {replies, client} = RespClient.calls(conn.client, commands)
    conn = %{conn | client: client}

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

    case RespClient.call(conn.client, command) do
      {[nil], client} -> {:ok, [], %{conn | client: client}}
      {[[[_stream, entries]]], client} -> {:ok, messages(entries, 1), %{conn | client: client}}
      {[{:error, text}], client} -> {:error, text, %{conn | client: client}}
    end
  end

  # Redis counts a claim as a delivery; XAUTOCLAIM does not say how many.
  defp messages(entries, deliveries),
    do: for([id, [_field, payload]] <- entries, do: {id, payload, deliveries})

  @impl true
  def ack(conn, ids) do
    case RespClient.call(conn.client, ["XACK", conn.stream, conn.group | ids]) do
      {[n], client} when is_integer(n) -> {:ok, n, %{conn | client: client}}
      {[{:error, text}], client} -> {:error, text, %{conn | client: client}}
    end
  end

  @impl true
  def reclaim(conn, max, _wait_ms) do
    command =
      ["XAUTOCLAIM", conn.stream, conn.group, conn.consumer, "#{conn.ack_wait}", "0-0"] ++
        ["COUNT", "#{max}"]

    case RespClient.call(conn.client, command) do
      {[[_next, [], _deleted]], client} ->
        receive after: (@poll_ms -> :ok)
        {:ok, [], %{conn | client: client}}

      {[[_next, entries, _deleted]], client} ->
        {:ok, messages(entries, 2), %{conn | client: client}}

      {[{:error, text}], client} ->
        {:error, text, %{conn | client: client}}
    end
  end

  @impl true
  def close(conn), do: RespClient.close(conn.client)
end
