defmodule Ringbus.Client.Counters do
  @moduledoc false
  # The `:atomics` array a client shares between its callers and its
  # connection process: the next correlation id, the async messages in
  # flight (the `:max_pending` bound, checked by callers before they send
  # anything), a closed flag, and the async pushes being sent this instant.
  # Callers take ids and room here without a message to the process.
  #
  # The last two make sure no async push is sent into a connection that has
  # gone: a caller counts itself as sending, then checks the flag, then
  # sends; the connection sets the flag, then waits until nobody is sending,
  # then takes what is in its mailbox. Atomics are sequentially consistent,
  # so either the caller sees the flag, or the connection sees the caller
  # and waits for its message, which a local send has queued before it
  # returns.

  @next_corr 1
  @pending 2
  @closed 3
  @sending 4

  @max_corr 0xFFFF_FFFF

  @type t :: :atomics.atomics_ref()

  @doc "Counters whose next correlation id is 2: HELLO went out with 1."
  @spec new() :: t()
  def new do
    counters = :atomics.new(4, signed: true)
    :atomics.put(counters, @next_corr, 1)
    counters
  end

  @doc "Takes a correlation id, 1 to 2^32 - 1 and round again: 0 is kept for errors."
  @spec next_corr(t()) :: 1..0xFFFF_FFFF
  def next_corr(counters), do: rem(:atomics.add_get(counters, @next_corr, 1) - 1, @max_corr) + 1

  @doc """
  Takes room for `count` messages in flight; false past `max`, unless
  nothing else is in flight (so a batch larger than the bound goes alone).
  """
  @spec reserve(t(), pos_integer(), pos_integer()) :: boolean()
  def reserve(counters, count, max) do
    pending = :atomics.add_get(counters, @pending, count)

    if pending > max and pending != count do
      :atomics.sub(counters, @pending, count)
      false
    else
      true
    end
  end

  @doc "Gives back room for `count` messages: acked, written in no-ack mode, or never sent."
  @spec release(t(), non_neg_integer()) :: :ok
  def release(_counters, 0), do: :ok
  def release(counters, count), do: :atomics.sub(counters, @pending, count)

  @doc "The messages in flight."
  @spec pending(t()) :: integer()
  def pending(counters), do: :atomics.get(counters, @pending)

  @doc "Marks the client closed: callers stop sending. Returns once no caller is sending."
  @spec close(t()) :: :ok
  def close(counters) do
    :atomics.put(counters, @closed, 1)
    await_senders(counters)
  end

  # Callers within `send_open/2` run a flag check and a local send.
  defp await_senders(counters) do
    if :atomics.get(counters, @sending) > 0 do
      :erlang.yield()
      await_senders(counters)
    else
      :ok
    end
  end

  @doc "Sends `message` to `pid` unless the client is closed; false if it is."
  @spec send_open(t(), pid(), term()) :: boolean()
  def send_open(counters, pid, message) do
    :atomics.add(counters, @sending, 1)

    if closed?(counters) do
      :atomics.sub(counters, @sending, 1)
      false
    else
      send(pid, message)
      :atomics.sub(counters, @sending, 1)
      true
    end
  end

  @spec closed?(t()) :: boolean()
  def closed?(counters), do: :atomics.get(counters, @closed) == 1
end
