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

  @enforce_keys [:name, :table, :waiters, :atomics, :anchor, :capacity, :overflow]
  defstruct @enforce_keys

  @type name :: term()

  @type options :: [
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject
        ]

  @type t :: %__MODULE__{
          name: name(),
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
  def validate_options!(opts) when is_list(opts) do
    opts =
      try do
        Keyword.validate!(opts, [:capacity, overflow: :drop_oldest])
      rescue
        e in ArgumentError ->
          reraise ArgumentError,
                  "invalid channel options: " <> Exception.message(e),
                  __STACKTRACE__
      end

    case opts[:capacity] do
      c when is_integer(c) and c > 0 ->
        :ok

      nil ->
        raise ArgumentError, "expected :capacity to be given"

      other ->
        raise ArgumentError,
              "expected :capacity to be a positive integer, got: #{inspect(other)}"
    end

    case opts[:overflow] do
      o when o in [:drop_oldest, :reject] ->
        :ok

      other ->
        raise ArgumentError,
              "expected :overflow to be :drop_oldest or :reject, got: #{inspect(other)}"
    end

    opts
  end

  def validate_options!(other) do
    raise ArgumentError, "expected channel options to be a keyword list, got: #{inspect(other)}"
  end
end
