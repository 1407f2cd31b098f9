defmodule Ringbus.Bench.Groups.Client do
  @moduledoc false
  # What the groups bench asks of a system (`Ringbus.Bench.Groups.Load` runs
  # them all the same way): a producer pushes a batch and waits for its
  # confirms; a consumer fetches a batch, waiting up to `wait_ms` when there
  # is none, then acks the batch in one request. A message is
  # `{key, payload, deliveries}`: `key` is what `ack/2` takes. `reclaim/3`
  # is how another consumer gets a crashed consumer's messages: a plain
  # fetch where the system delivers them again by itself. A system that
  # can ack a batch with the fetch of the next (`ack_fetch/4`) is run so:
  # its consumer waits for one answer a batch.

  @type conn :: term()
  @type message :: {term(), binary(), pos_integer()}

  @callback producer(target :: map(), index :: non_neg_integer()) :: conn()
  @callback consumer(target :: map(), name :: String.t()) :: conn()
  @callback push(conn(), payloads :: [binary()]) :: {:ok, conn()} | {:error, term(), conn()}
  @callback fetch(conn(), max :: pos_integer(), wait_ms :: pos_integer()) ::
              {:ok, [message()], conn()} | {:error, term(), conn()}
  @callback ack(conn(), keys :: [term()]) ::
              {:ok, non_neg_integer(), conn()} | {:error, term(), conn()}
  @callback reclaim(conn(), max :: pos_integer(), wait_ms :: pos_integer()) ::
              {:ok, [message()], conn()} | {:error, term(), conn()}
  @callback ack_fetch(conn(), keys :: [term()], max :: pos_integer(), wait_ms :: pos_integer()) ::
              {:ok, non_neg_integer(), [message()], conn()} | {:error, term(), conn()}
  @callback close(conn()) :: :ok
  @optional_callbacks ack_fetch: 4
end
