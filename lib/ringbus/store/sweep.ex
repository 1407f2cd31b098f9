defmodule Ringbus.Store.Sweep do
  @moduledoc false
  # Lets the old messages of idle memory channels under `max_age` go. A
  # memory channel expires what is older than `max_age` as it is used
  # (`Ringbus.Channel.Ring.expire/2` before each operation), so one nobody
  # uses would go on holding them, and their memory. Every `:interval` ms
  # this process takes the next `:channels` of them from the store's
  # directory and expires at most `:messages` of each: the work of one
  # sweep is bounded, and each channel costs one look at its oldest
  # message's time when nothing there is old enough. A channel with more to
  # expire gets the rest at the next round (or at its next operation, which
  # expires it all); a round over N such channels takes N / `:channels`
  # sweeps. Replicated channels are their leader's timer's work
  # (`Ringbus.Replica.Retention`).
  #
  # It holds nothing but where the round is, so a crash loses nothing; it
  # restarts with the store (`Ringbus.Application`, rest_for_one).

  use GenServer

  alias Ringbus.Channel.Ring
  alias Ringbus.Store

  @defaults [interval: 1_000, channels: 100, messages: 1_000]

  @typedoc """
  * `:interval` - ms between two sweeps, default 1000
  * `:channels` - channels looked at per sweep, default 100
  * `:messages` - messages expired per channel per sweep at most, default 1000
  """
  @type options :: [interval: pos_integer(), channels: pos_integer(), messages: pos_integer()]

  @spec start_link(options()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @impl true
  def init(opts) do
    opts = Ringbus.Options.validate!(opts, @defaults, "expiry sweep")

    for key <- Keyword.keys(@defaults),
        do:
          Ringbus.Options.check!(
            key,
            opts[key],
            &(is_integer(&1) and &1 > 0),
            "a positive integer"
          )

    state = %{opts: Map.new(opts), round: nil}
    {:ok, schedule(state)}
  end

  @impl true
  def handle_info(:sweep, %{opts: opts} = state) do
    round = sweep(state.round, opts.channels, opts.messages)
    {:noreply, schedule(%{state | round: round})}
  end

  defp schedule(state) do
    Process.send_after(self(), :sweep, state.opts.interval)
    state
  end

  @doc """
  One sweep: the next `channels` memory channels under `max_age` from
  `round` (nil: a new round), each expired of at most `messages` messages.
  Answers where the round goes on, nil when it is over.
  """
  @spec sweep(:ets.continuation() | nil, pos_integer(), pos_integer()) ::
          :ets.continuation() | nil
  def sweep(round, channels, messages) do
    case Store.aging(round || channels) do
      {found, round} ->
        Enum.each(found, fn {_name, channel} -> expire(channel, messages) end)
        round

      :"$end_of_table" ->
        nil
    end
  rescue
    # The store's directory went with its process; this one follows it.
    ArgumentError -> nil
  end

  defp expire(channel, messages) do
    Ring.expire(channel, messages)
  rescue
    # Deleted meanwhile: its tables are gone.
    ArgumentError -> :ok
  end
end
