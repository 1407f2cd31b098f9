defmodule Ringbus.Wire.ErrorCode do
  @errors [
    {:bad_frame, 1,
     "malformed frame: a zero length, a body shorter or longer than its fields, " <>
       "a field value the encoding does not allow, or a second HELLO"},
    {:unknown_opcode, 2, "the opcode is not a request opcode of the protocol"},
    {:frame_too_large, 3, "the length prefix is larger than the server's max frame size"},
    {:not_hello_first, 4, "the first frame of the connection was not HELLO"},
    {:bad_version, 5, "the server does not speak the protocol version of HELLO"},
    {:auth_failed, 6, "the HELLO token is missing or not accepted"},
    {:handshake_timeout, 7, "no HELLO arrived in time"},
    {:idle_timeout, 8, "no frame arrived within the idle timeout"},
    {:server_busy, 9, "the server has too many connections"},
    {:shutting_down, 10, "the server is stopping"},
    {:forbidden, 100, "the token does not allow this operation on this channel"},
    {:no_channel, 101, "no channel of that name (in SUB_CLOSED: the channel was deleted)"},
    {:exists, 102,
     "a channel of that name exists already (GROUP_CREATE: a group of that name, on that channel)"},
    {:full, 103, "the channel rejects pushes and is full"},
    {:too_large, 104,
     "a payload is larger than the server's max_payload_size, " <>
       "or a push's payloads together than the channel's max_bytes"},
    {:no_subscription, 105, "no subscription with that id on this connection"},
    {:too_many_subscriptions, 106, "the connection holds the server's max subscriptions"},
    {:bad_argument, 107, "a field value is out of range (capacity 0, max_batch 0, credit 0)"},
    {:internal, 108, "the server failed to handle the request"},
    {:node_down, 109, "the channel's home node (in a cluster) is not connected"},
    {:node_busy, 110,
     "the channel's home node (in a cluster) is slow to answer, or its link is full: " <>
       "the request did not leave for it and was not carried out"},
    {:timeout, 111,
     "unknown outcome: the request went to the channel's home node (in a cluster) or " <>
       "its replicas and no answer came in time; it may or may not have been carried out"},
    {:stale_tag, 112,
     "the producer tag is older than the replicated channel remembers: not stored again"},
    {:new_incarnation, 113,
     "the channel was created again (deleted and created, or its node restarted) " <>
       "since the incarnation the request names"},
    {:no_group, 114, "the channel has no consumer group of that name"},
    {:too_many_groups, 115,
     "the channel holds its most consumer groups, or the group its most consumers"},
    {:too_many_fetches, 116,
     "the connection has its most fetches waiting (max_waiting_fetches) already"}
  ]

  @codes for {reason, code, _text} <- @errors, do: {reason, code}

  @moduledoc """
  The error codes of the Ringbus protocol and the atoms that name them.

  An `ERROR` frame, a `PUSH_ACKS` entry and a `SUB_CLOSED` frame carry a `u16`
  code on the wire; `Ringbus.Wire.Frame` turns known codes into these atoms
  and leaves unknown ones as integers, so a client keeps working when a newer
  server sends a code it has never seen.

  Codes below 100 are connection errors: the server sends the `ERROR` frame
  and closes the connection. Codes from 100 on are request errors: the request
  failed and the connection stays open.

  | Code | Reason | Closes | Meaning |
  |-----:|--------|:------:|---------|
  #{for {reason, code, text} <- @errors, into: "" do
    "| #{code} | `#{inspect(reason)}` | #{if code < 100, do: "yes", else: "no"} | #{text} |\n"
  end}
  """

  @typedoc "A known error, by name."
  @type reason ::
          :bad_frame
          | :unknown_opcode
          | :frame_too_large
          | :not_hello_first
          | :bad_version
          | :auth_failed
          | :handshake_timeout
          | :idle_timeout
          | :server_busy
          | :shutting_down
          | :forbidden
          | :no_channel
          | :exists
          | :full
          | :too_large
          | :no_subscription
          | :too_many_subscriptions
          | :bad_argument
          | :internal
          | :node_down
          | :node_busy
          | :timeout
          | :stale_tag
          | :new_incarnation
          | :no_group
          | :too_many_groups
          | :too_many_fetches

  @typedoc "An error as frames carry it: a known name, or the bare code of an unknown one."
  @type t :: reason() | 1..0xFFFF

  @doc """
  The wire code of an error.

      iex> Ringbus.Wire.ErrorCode.code(:no_channel)
      101
      iex> Ringbus.Wire.ErrorCode.code(4242)
      4242
  """
  @spec code(t()) :: 1..0xFFFF
  for {reason, code} <- @codes do
    def code(unquote(reason)), do: unquote(code)
  end

  def code(code) when is_integer(code) and code in 1..0xFFFF, do: code

  def code(other) do
    raise ArgumentError,
          "expected a Ringbus error reason or a code in 1..65535, got: #{inspect(other)}"
  end

  @doc """
  The error a wire code stands for; unknown codes come back as integers.

      iex> Ringbus.Wire.ErrorCode.reason(103)
      :full
      iex> Ringbus.Wire.ErrorCode.reason(4242)
      4242
  """
  @spec reason(1..0xFFFF) :: t()
  for {reason, code} <- @codes do
    def reason(unquote(code)), do: unquote(reason)
  end

  def reason(code) when is_integer(code) and code in 1..0xFFFF, do: code

  @doc """
  Whether the server closes the connection after sending this error.

  True for codes below 100, including unknown ones.
  """
  @spec closes_connection?(t()) :: boolean()
  def closes_connection?(error), do: code(error) < 100

  @doc """
  What an error means, in words: the meaning of a known one, the code of an
  unknown one.

      iex> Ringbus.Wire.ErrorCode.describe(:full)
      "the channel rejects pushes and is full"
  """
  @spec describe(t()) :: String.t()
  for {reason, _code, text} <- @errors do
    def describe(unquote(reason)), do: unquote(text)
  end

  def describe(code) when is_integer(code), do: "error code #{code}"

  @doc "Whether `reason` names an error of the protocol."
  @spec known?(term()) :: boolean()
  def known?(reason), do: List.keymember?(@codes, reason, 0)

  @doc "Every known error as `{reason, code, meaning}`, in code order."
  @spec all() :: [{reason(), 1..0xFFFF, String.t()}]
  def all, do: @errors
end
