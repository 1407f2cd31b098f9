defmodule Ringbus.Client.Counters do
  @moduledoc false
  # The `:atomics` array a client shares between its callers and its
  # connection process: the next correlation id, and the async messages in
  # flight (the `:max_pending` bound, checked by callers before they send
  # anything) with the closed flag as a high bit of the same number.
  # Callers take ids and room here without a message to the process.
  #
  # Every async push reserves its room before it is sent, and the reservation
  # lasts until the connection releases it (acked, or written in no-ack
  # mode) or the caller gives it back (never sent). That makes sure no async
  # push is sent into a connection that has gone: a caller's reservation
  # also reads the flag, and a caller that saw it clear sends; the
  # connection sets the flag, then takes pushes from its mailbox until the
  # reservations number no more than the messages it holds. Atomics are
  # sequentially consistent, so a reservation made before the flag was set
  # is seen by the connection, which waits for its message (a local send
  # has queued it before it returns) or its release.

  import Bitwise

  @next_corr 1
  @pending 2

  @max_corr 0xFFFF_FFFF
  # Above any reservation: `:max_pending` is at most 250,000 and a batch at
  # most 2^32 messages.
  @closed 1 <<< 40

  @type t :: :atomics.atomics_ref()

  @doc "Counters whose next correlation id is 2: HELLO went out with 1."
  @spec new() :: t()
  def new do
    counters = :atomics.new(2, signed: true)
    :atomics.put(counters, @next_corr, 1)
    counters
  end

  @doc "Takes a correlation id, 1 to 2^32 - 1 and round again: 0 is kept for errors."
  @spec next_corr(t()) :: 1..0xFFFF_FFFF
  def next_corr(counters), do: rem(:atomics.add_get(counters, @next_corr, 1) - 1, @max_corr) + 1

  @doc """
  Takes room for `count` messages in flight: `:full` past `max`, unless
  nothing else is in flight (so a batch larger than the bound goes alone),
  and `:closed` once the client is closed; either way nothing is kept.
  With `:ok`, the caller sends its message or gives the room back.
  """
  @spec reserve(t(), pos_integer(), pos_integer()) :: :ok | :full | :closed
  def reserve(counters, count, max) do
    pending = :atomics.add_get(counters, @pending, count)

    cond do
      pending <= max or pending == count ->
        :ok

      pending >= @closed ->
        :atomics.sub(counters, @pending, count)
        :closed

      true ->
        :atomics.sub(counters, @pending, count)
        :full
    end
  end

  @doc "Gives back room for `count` messages: acked, written in no-ack mode, or never sent."
  @spec release(t(), non_neg_integer()) :: :ok
  def release(_counters, 0), do: :ok
  def release(counters, count), do: :atomics.sub(counters, @pending, count)

  @doc "The messages in flight, reserved and not released."
  @spec pending(t()) :: non_neg_integer()
  def pending(counters), do: :atomics.get(counters, @pending) &&& @closed - 1

  @doc """
  Marks the client closed: no reservation succeeds from now on. The
  connection then takes the pushes of the reservations made before, until
  `pending/1` is no more than the messages it holds.
  """
  @spec close(t()) :: :ok
  def close(counters) do
    if not closed?(counters), do: :atomics.add(counters, @pending, @closed)
    :ok
  end

  @spec closed?(t()) :: boolean()
  def closed?(counters), do: :atomics.get(counters, @pending) >= @closed
end
