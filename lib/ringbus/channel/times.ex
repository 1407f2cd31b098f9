defmodule Ringbus.Channel.Times do
  @moduledoc false
  # A channel's messages in time. Each message carries `at`, the monotonic
  # µs its push read inside its seq reservation (`Ringbus.Channel.Ring`), so
  # times never decrease in seq order; its time is `at` plus the VM's time
  # offset, in system ms. A replicated channel's `at` is its leader's stamp
  # (`at_of/1`), so every member gives a message the same time.
  #
  # Nothing here copies a payload: a time is probed with `Ring.stored_at/2`,
  # and the first message at or after a time is found by binary search over
  # the seqs the ring holds, O(log n) probes. A seq with no time (a mark, a
  # seq whose producer has not stored it, one pulled meanwhile) is stepped
  # over to the next that has one. A message's Redis stream ID
  # (`Ringbus.Channel.Ids`), stored with its time and increasing in seq
  # order, is probed (`Ring.stored_id/2`) and searched the same way.

  alias Ringbus.Channel
  alias Ringbus.Channel.{Ids, Ring}

  # Probes at most, from either end, for the oldest and newest times.
  @edge_probes 64

  @typedoc "System time in milliseconds."
  @type ms :: integer()

  @doc "A message's time in system ms, from its `at`."
  @spec ms(integer()) :: ms()
  def ms(at), do: div(at + :erlang.time_offset(:microsecond), 1000)

  @doc "The time (system ms) of the message at `seq`, nil if the ring holds none there."
  @spec at_seq(Channel.t(), non_neg_integer()) :: ms() | nil
  def at_seq(ch, seq) do
    case Ring.stored_at(ch, seq) do
      nil -> nil
      at -> ms(at)
    end
  end

  @doc "The `at` on this node's clock of system time `ms`: `ms(at_of(t)) == t`."
  @spec at_of(ms()) :: integer()
  def at_of(ms), do: ms * 1000 - :erlang.time_offset(:microsecond)

  @doc "Whether `from` names a time: `{:time, ms}` with ms a non-negative integer."
  defguard is_time(from)
           when is_tuple(from) and tuple_size(from) == 2 and
                  elem(from, 0) == :time and is_integer(elem(from, 1)) and
                  elem(from, 1) >= 0

  @doc """
  The seq of the first message at or after system time `t` (ms), by binary
  search: the channel's next seq when every message held is older.
  """
  @spec seek(Channel.t(), ms()) :: non_neg_integer()
  def seek(ch, t) do
    at = at_of(t)
    search(ch, &Ring.stored_at/2, &(&1 < at), Ring.first_seq(ch), Ring.next_seq(ch))
  end

  @doc """
  The seq of the first message whose ID is `id` or above, by binary
  search: the channel's next seq when every message held is below.
  """
  @spec seek_id(Channel.t(), Ids.id()) :: non_neg_integer()
  def seek_id(ch, id),
    do: search(ch, &Ring.stored_id/2, &Ids.above?(id, &1), Ring.first_seq(ch), Ring.next_seq(ch))

  # Every probed seq below `lo` is `below?`; the answer is at most `hi`.
  defp search(_ch, _probe, _below?, lo, hi) when lo >= hi, do: lo

  defp search(ch, probe, below?, lo, hi) do
    mid = lo + div(hi - lo, 2)

    case probed_from(ch, probe, mid, hi) do
      {seq, stored} ->
        if below?.(stored),
          do: search(ch, probe, below?, seq + 1, hi),
          else: search(ch, probe, below?, lo, mid)

      # No value in mid..hi - 1: the seqs before the probed one have none,
      # so the answer is at most mid.
      nil ->
        search(ch, probe, below?, lo, mid)
    end
  end

  # The first seq in seq..hi - 1 that has a value, with it; nil if none.
  defp probed_from(_ch, _probe, seq, hi) when seq >= hi, do: nil

  defp probed_from(ch, probe, seq, hi) do
    case probe.(ch, seq) do
      nil ->
        # Claimed meanwhile (pulled, overwritten): go on from the oldest held.
        probed_from(ch, probe, max(seq + 1, Ring.first_seq(ch)), hi)

      value ->
        {seq, value}
    end
  end

  @doc """
  `info` (a channel's figures) with `:oldest_time` and `:newest_time`:
  the times (system ms) of the oldest and newest messages it holds, nil
  when it holds none.
  """
  @spec put_info(map(), Channel.t()) :: map()
  def put_info(info, ch) do
    {first, next} = {Ring.first_seq(ch), Ring.next_seq(ch)}
    oldest = edge(ch, first, min(next, first + @edge_probes), 1)
    newest = edge(ch, next - 1, max(first, next - @edge_probes) - 1, -1)
    Map.merge(info, %{oldest_time: oldest, newest_time: newest})
  end

  defp edge(_ch, seq, stop, _step) when seq == stop, do: nil

  defp edge(ch, seq, stop, step) do
    case Ring.stored_at(ch, seq) do
      nil -> edge(ch, seq + step, stop, step)
      at -> ms(at)
    end
  end

  @doc """
  `Ring.read/3`, each message with its time: `{seq, payload, ms}`.
  """
  @spec read(Channel.t(), non_neg_integer(), non_neg_integer()) ::
          {[{non_neg_integer(), binary(), ms()}], non_neg_integer(), non_neg_integer(),
           non_neg_integer()}
  def read(ch, from, max) do
    {messages, n, lost, next, runs} = Ring.read_timed(ch, from, max)
    {attach(messages, runs), n, lost, next}
  end

  @doc """
  Messages `[{seq, payload}]` with their times, from the runs
  (`Ring.read_timed/3`, newest first) they were read with.
  """
  @spec attach([{non_neg_integer(), binary()}], [{integer(), pos_integer()}]) ::
          [{non_neg_integer(), binary(), ms()}]
  def attach(messages, runs) do
    offset = :erlang.time_offset(:microsecond)
    attach(messages, :lists.reverse(runs), offset, [])
  end

  defp attach([{seq, payload} | rest], [{at, n} | runs], offset, acc) do
    runs = if n == 1, do: runs, else: [{at, n - 1} | runs]
    attach(rest, runs, offset, [{seq, payload, div(at + offset, 1000)} | acc])
  end

  defp attach([], _runs, _offset, acc), do: :lists.reverse(acc)
end
