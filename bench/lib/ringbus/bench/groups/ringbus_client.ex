defmodule Ringbus.Bench.Groups.RingbusClient do
  @moduledoc false
  # The groups bench's Ringbus side: the embedded API (`Ringbus.push_many/2`,
  # `Ringbus.Groups`) on the node it runs on. `target` is
  # `%{channel: name, group: name}`. A consumer's process is its owner, so
  # killing it makes its messages due at once.

  @behaviour Ringbus.Bench.Groups.Client

  @impl true
  def producer(target, _index), do: target

  @impl true
  def consumer(target, name), do: Map.put(target, :consumer, name)

  @impl true
  def push(conn, payloads) do
    case Ringbus.push_many(conn.channel, payloads) do
      {:ok, _} -> {:ok, conn}
      {:error, reason} -> {:error, reason, conn}
    end
  end

  @impl true
  def fetch(conn, max, wait_ms) do
    case Ringbus.Groups.fetch(conn.channel, conn.group, conn.consumer, max, timeout: wait_ms) do
      {:ok, messages} -> {:ok, messages, conn}
      {:error, reason} -> {:error, reason, conn}
    end
  end

  @impl true
  def ack(conn, seqs) do
    case Ringbus.Groups.ack(conn.channel, conn.group, seqs) do
      {:ok, n} -> {:ok, n, conn}
      {:error, reason} -> {:error, reason, conn}
    end
  end

  # The acks of a batch ride with the next fetch (`Ringbus.Groups.ack_fetch/6`).
  @impl true
  def ack_fetch(conn, keys, max, wait_ms) do
    case Ringbus.Groups.ack_fetch(conn.channel, conn.group, conn.consumer, keys, max,
           timeout: wait_ms
         ) do
      {:ok, acked, messages} -> {:ok, acked, messages, conn}
      {:error, reason} -> {:error, reason, conn}
    end
  end

  @impl true
  def reclaim(conn, max, wait_ms), do: fetch(conn, max, wait_ms)

  @impl true
  def close(_conn), do: :ok
end
