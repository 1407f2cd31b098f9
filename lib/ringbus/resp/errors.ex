defmodule Ringbus.Resp.Errors do
  @moduledoc false
  # The Redis-style reply to every error reason of the channel API
  # (`t:Ringbus.reason/0`), in one function that every command uses, so
  # that no channel error can crash a connection. A command deep in its
  # helpers ends itself with `fail!/2`; `Ringbus.Resp.Session` catches it
  # and answers the reply.

  alias Ringbus.Resp.Encoder

  @doc "The error reply to `reason`, from an operation on stream `key`."
  @spec reply(Ringbus.reason(), binary()) :: {:error, binary()}
  def reply(:no_channel, key), do: Encoder.error(["ERR no such stream '", key, "'"])

  def reply(:exists, key), do: Encoder.error(["ERR stream '", key, "' exists already"])

  def reply(:full, key),
    do: Encoder.error(["ERR stream '", key, "' is full and its overflow is reject"])

  def reply(:too_large, key),
    do: Encoder.error(["ERR the entry is larger than the max_bytes of stream '", key, "'"])

  def reply(:no_subscription, key),
    do: Encoder.error(["ERR the subscription to stream '", key, "' has ended"])

  # Redis Cluster's codes: a client may retry TRYAGAIN, and CLUSTERDOWN later.
  def reply(:node_down, key),
    do: Encoder.error(["CLUSTERDOWN the node that holds stream '", key, "' is not connected"])

  def reply(:node_busy, key),
    do: Encoder.error(["TRYAGAIN the node that holds stream '", key, "' did not answer in time"])

  def reply(:timeout, key),
    do:
      Encoder.error([
        "TRYAGAIN stream '",
        key,
        "' did not answer in time; the entry may be stored"
      ])

  def reply(:stale_tag, key),
    do: Encoder.error(["ERR the producer tag is older than stream '", key, "' remembers"])

  # A subscription that dies while it starts exits with a reason of its own.
  def reply(other, key),
    do: Encoder.error(["ERR stream '", key, "': ", inspect(other)])

  @doc "Ends the running command with the reply to `reason` (see `Ringbus.Resp.Session`)."
  @spec fail!(term(), binary()) :: no_return()
  def fail!(reason, key), do: throw({__MODULE__, reply(reason, key)})

  @doc """
  `result` of a read of stream `key` (`info`, `len`, `read`), for a caller
  that handles `:no_channel`: any other error ends the command.
  """
  @spec check!(result, binary()) :: result when result: term()
  def check!({:error, reason}, key) when reason != :no_channel, do: fail!(reason, key)
  def check!(result, _key), do: result
end
