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

  A channel's memory is bounded by its capacity times the largest payload
  pushed to it; the network server also bounds payloads by its maximum frame
  size.
  """

  alias Ringbus.Options

  @enforce_keys [:table, :waiters, :atomics, :anchor, :capacity, :overflow]
  defstruct @enforce_keys

  @type name :: term()

  @type options :: [
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject
        ]

  @type t :: %__MODULE__{
          table: :ets.tid(),
          waiters: :ets.tid(),
          atomics: :atomics.atomics_ref(),
          anchor: pid(),
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject
        }

  @doc """
  Validates channel options and returns them as a keyword list with defaults.

  Raises `ArgumentError` on an unknown key or a bad value.
  """
  @spec validate_options!(keyword()) :: options()
  def validate_options!(opts) do
    opts = Options.validate!(opts, [:capacity, overflow: :drop_oldest], "channel")

    if opts[:capacity] == nil, do: raise(ArgumentError, "expected :capacity to be given")
    Options.check!(:capacity, opts[:capacity], &Options.positive?/1, "a positive integer")

    Options.check!(
      :overflow,
      opts[:overflow],
      &(&1 in [:drop_oldest, :reject]),
      ":drop_oldest or :reject"
    )

    opts
  end
end
