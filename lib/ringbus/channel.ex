defmodule Ringbus.Channel do
  @moduledoc """
  The handle of one channel: its ETS ring, its `:atomics` cursors and counters,
  the process its subscriptions monitor, and its configuration.

  Handles are created by `Ringbus.Store` and read straight from ETS by the
  calling process; every operation on a channel (`Ringbus.Channel.Ring`) works
  on a handle without a process hop.

  ## Options

    * `:capacity` - the number of messages the ring keeps, a positive integer.
      Required.
    * `:overflow` - what a push does when the ring is full. `:drop_oldest`
      (the default) overwrites the oldest message and counts it as
      `overwritten`; `:reject` returns `{:error, :full}` and counts it as
      `rejected`.
    * `:max_bytes` - the most payload bytes the channel holds, a positive
      integer, or `nil` (the default) for no bound but the capacity. A push
      that would pass it overwrites the oldest messages until it fits
      (`:drop_oldest`) or is refused with `{:error, :full}` (`:reject`),
      as RabbitMQ's `x-max-length-bytes` and JetStream's `max_bytes` do. A
      payload larger than `max_bytes` itself, or a batch whose payloads
      together are, is refused with `{:error, :too_large}` under either
      policy, and counted as `rejected`.
      Under `:drop_oldest` such a channel stores batches message by message,
      so that its bytes are freed one message at a time.
    * `:max_age` - the most milliseconds a message stays, a positive
      integer, or `nil` (the default) for no bound by age. Older messages
      leave the channel, counted as `expired`: a memory channel removes
      them when it is next pushed to, pulled, read, measured or
      subscribed to (one look at the oldest message's time each, no scan),
      and the node's sweep those of a channel nobody uses (see "Time" in
      `Ringbus`);
      a replicated channel when its log applies its next command, at the
      leader's stamp.

  A replicated channel's handle carries `:replica`, what its writes go
  through (`Ringbus.Replica`), set by that layer; its ring takes writes
  only from its Ra machine. Every other handle has `nil`, and `:producers`
  instead: the table of its producer tags (`Ringbus.push/3`).

  `:incarnation` names this creation of the channel: a random 64-bit
  integer drawn when the store creates it, so a channel created again
  under the same name (deleted and created, or its node restarted) has
  another (see "Incarnations" in `Ringbus`). A replicated channel's is
  drawn once at create and kept with its log.

  A channel's memory is bounded by its capacity times the largest payload
  pushed to it, and by `:max_bytes` when it has one; the network server also
  bounds payloads by its maximum frame size.
  """

  alias Ringbus.Options

  @enforce_keys [:table, :waiters, :atomics, :anchor, :capacity, :overflow, :incarnation]
  defstruct @enforce_keys ++
              [max_bytes: nil, max_age: nil, replica: nil, producers: nil, ids: nil]

  @type name :: term()

  # The longest name a channel reached over the network protocols may have.
  @max_name_bytes 255

  @type options :: [
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject,
          max_bytes: pos_integer() | nil,
          max_age: pos_integer() | nil
        ]

  @type t :: %__MODULE__{
          table: :ets.tid(),
          waiters: :ets.tid(),
          atomics: :atomics.atomics_ref(),
          anchor: pid(),
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject,
          max_bytes: pos_integer() | nil,
          max_age: pos_integer() | nil,
          replica: map() | nil,
          producers: :ets.tid() | nil,
          incarnation: pos_integer(),
          ids: :atomics.atomics_ref() | nil
        }

  @doc """
  The longest binary channel name, in bytes, that the network protocols
  carry: `255`. Embedded callers may name a channel with any term; the
  binary protocol (`docs/PROTOCOL.md`) and the RESP front end
  (`docs/RESP.md`) name channels with 1 to this many bytes.
  """
  @spec max_name_bytes() :: pos_integer()
  def max_name_bytes, do: @max_name_bytes

  @doc """
  Validates channel options and returns them as a keyword list with defaults.

  Raises `ArgumentError` on an unknown key or a bad value.
  """
  @spec validate_options!(keyword()) :: options()
  def validate_options!(opts) do
    defaults = [:capacity, overflow: :drop_oldest, max_bytes: nil, max_age: nil]
    opts = Options.validate!(opts, defaults, "channel")

    if opts[:capacity] == nil, do: raise(ArgumentError, "expected :capacity to be given")
    Options.check!(:capacity, opts[:capacity], &Options.positive?/1, "a positive integer")

    Options.check!(
      :overflow,
      opts[:overflow],
      &(&1 in [:drop_oldest, :reject]),
      ":drop_oldest or :reject"
    )

    Options.check!(
      :max_bytes,
      opts[:max_bytes],
      &(&1 == nil or Options.positive?(&1)),
      "a positive integer or nil"
    )

    Options.check!(
      :max_age,
      opts[:max_age],
      &(&1 == nil or Options.positive?(&1)),
      "a positive integer (ms) or nil"
    )

    opts
  end
end
