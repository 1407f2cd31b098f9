defmodule Ringbus.Resp.Errors do
  @moduledoc false
  # The Redis-style reply to every error reason of the channel API
  # (`t:Ringbus.reason/0`), in one function that every command uses, so
  # that no channel error can crash a connection. A command deep in its
  # helpers ends itself with `fail!/2`; `Ringbus.Resp.Session` catches it
  # and answers the reply.

  alias Ringbus.Channel
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
    do:
      Encoder.error([
        "TRYAGAIN the node that holds stream '",
        key,
        "' is busy; the command was not carried out"
      ])

  # Not TRYAGAIN: a retry may apply the command twice.
  def reply(:timeout, key),
    do:
      Encoder.error([
        "TIMEOUT no answer in time for stream '",
        key,
        "' from its node or replicas; the command may or may not have been carried out"
      ])

  # XADD PRODUCER: the tag may have been stored and forgotten, so it is neither stored nor answered.
  def reply(:stale_tag, key),
    do:
      Encoder.error([
        "ERR the PRODUCER tag is older than the last 64 stream '",
        key,
        "' remembers of its producer; it may have been stored, and is not stored again"
      ])

  def reply(:new_incarnation, key),
    do: Encoder.error(["ERR stream '", key, "' was created again since that incarnation"])

  # Redis's words for an ID refused (`Ringbus.Channel.Ids`).
  def reply(:not_greater, _key),
    do:
      Encoder.error(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
      )

  def reply(:zero, _key),
    do: Encoder.error("ERR The ID specified in XADD must be greater than 0-0")

  def reply(reason, _key) when reason in [:exhausted, :ids_exhausted],
    do:
      Encoder.error("ERR The stream has exhausted the last possible ID, unable to add more items")

  # A subscription that dies while it starts exits with a reason of its own.
  def reply(other, key),
    do: Encoder.error(["ERR stream '", key, "': ", inspect(other)])

  @doc "Ends the running command with the reply to `reason` (see `Ringbus.Resp.Session`)."
  @spec fail!(term(), binary()) :: no_return()
  def fail!(reason, key), do: throw({__MODULE__, reply(reason, key)})

  @doc "Ends the running command with `reply`, an error reply made already."
  @spec answer!(term()) :: no_return()
  def answer!(reply), do: throw({__MODULE__, reply})

  @doc """
  `result` of a read of stream `key` (`info`, `len`, `read`), for a caller
  that handles `:no_channel`: any other error ends the command.
  """
  @spec check!(result, binary()) :: result when result: term()
  def check!({:error, reason}, key) when reason != :no_channel, do: fail!(reason, key)
  def check!(result, _key), do: result

  ## Redis's wording of common errors

  @doc "The reply to a key that cannot name a stream."
  def bad_name,
    do: Encoder.error("ERR Ringbus stream names are 1 to #{Channel.max_name_bytes()} bytes")

  @doc "Redis's answer to an XREADGROUP BLOCK whose group was destroyed while it waited."
  def group_gone,
    do: Encoder.error("NOGROUP the consumer group this client was blocked on no longer exists")

  @doc "Redis's reply to a command on keys the user may not touch."
  def no_permission,
    do:
      Encoder.error(
        "NOPERM this user has no permissions to access one of the keys used as arguments"
      )

  @doc "Redis's reply to an unknown subcommand."
  def unknown_subcommand(sub, command),
    do:
      Encoder.error([
        "ERR unknown subcommand '",
        binary_part(sub, 0, min(byte_size(sub), 128)),
        "'. Try ",
        command,
        " HELP."
      ])

  @doc "Redis's reply to a subcommand with the wrong number of arguments."
  def wrong_arity(name),
    do: Encoder.error(["ERR wrong number of arguments for '", name, "' command"])

  @doc "Redis's reply to a malformed command."
  def syntax_error, do: Encoder.error("ERR syntax error")

  @doc "Redis's reply to an argument that is not a valid integer."
  def not_integer, do: Encoder.error("ERR value is not an integer or out of range")

  @doc "Redis's reply to a group that stream `key` has not (XGROUP, XREADGROUP, XINFO)."
  def no_group(key, group),
    do: Encoder.error(["NOGROUP No such consumer group '", group, "' for key name '", key, "'"])

  @doc "The reply to a key that names no stream, when the server creates none."
  def no_create(key),
    do:
      Encoder.error([
        "ERR no such stream '",
        key,
        "', and this server creates none (auto_create: false)"
      ])
end
