defmodule Ringbus.Channel.Delivery do
  @moduledoc false
  # How long messages wait between their push and their delivery: one
  # `Ringbus.Histogram` per way a subscriber gets its messages (`protocols/0`:
  # an embedded process, a binary-protocol connection, a RESP connection),
  # in one `:counters` array for the node, so the series stay three whatever
  # the number of subscriptions.
  #
  # The array belongs to `Ringbus.Store`, which makes it when it starts and
  # erases its `:persistent_term` key when it stops (its subscriptions end
  # with it). A subscription looks it up once, when it starts, and adds to it
  # once per batch it sends: the ring keeps one push time per push or batch
  # (`Ring.read_timed/3`), so a batch costs a clock read and a counter add
  # per bucket its messages fall in, plus the sum and the count.
  #
  # Delivery is the subscription's send: to an embedded subscriber, its
  # mailbox; to a server connection, the connection's mailbox, before the
  # connection encodes the batch and writes it to its socket.

  alias Ringbus.Histogram

  @protocols [:embedded, :binary, :resp]
  @key {__MODULE__, :counters}

  @typedoc "Where a subscription adds its batches: the array and its protocol's first slot."
  @type t :: {:counters.counters_ref(), pos_integer()} | nil

  @doc "The ways a subscriber gets its messages, as the histograms are labelled."
  @spec protocols() :: [atom()]
  def protocols, do: @protocols

  @doc "Makes the node's array, all zero. Called by the store as it starts."
  @spec start() :: :ok
  def start do
    :persistent_term.put(@key, :counters.new(length(@protocols) * Histogram.slots(), []))
  end

  @doc "Forgets the node's array. Called by the store as it stops."
  @spec stop() :: :ok
  def stop do
    :persistent_term.erase(@key)
    :ok
  end

  @doc "Where a subscription delivering by `protocol` adds; nil without a store."
  @spec for_protocol(atom()) :: t()
  def for_protocol(protocol) do
    case :persistent_term.get(@key, nil) do
      nil -> nil
      counters -> {counters, base(protocol)}
    end
  end

  defp base(protocol) do
    index = Enum.find_index(@protocols, &(&1 == protocol))
    1 + index * Histogram.slots()
  end

  @doc "A batch of messages stored at the times of `runs` (`Ring.read_timed/3`) was sent now."
  @spec delivered(t(), [{integer(), pos_integer()}]) :: :ok
  def delivered(nil, _runs), do: :ok

  def delivered({counters, base}, runs),
    do: Histogram.observe_ages(counters, base, :erlang.monotonic_time(:microsecond), runs)

  @doc "Each protocol's histogram (`Ringbus.Histogram.read/2`); empty without a store."
  @spec histograms() :: %{atom() => Histogram.t()}
  def histograms do
    case :persistent_term.get(@key, nil) do
      nil -> %{}
      counters -> Map.new(@protocols, &{&1, Histogram.read(counters, base(&1))})
    end
  end
end
