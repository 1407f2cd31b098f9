defmodule Ringbus.Replica.Retention do
  @moduledoc false
  # What a replicated channel's machine (`Ringbus.Replica.Machine`) keeps
  # to let messages go by age and by bytes, as pure functions of its state:
  #
  #   times   under max_age, {first_seq, stamp} per stamp that stored
  #           messages still live, oldest first; each command first claims
  #           what its stamp makes older than max_age (`expire/1`), and the
  #           leader's timer (`expiry_timer/1`) brings a command when none
  #           comes
  #   sizes   under max_bytes, the bytes live and each live batch's sizes
  #
  # Stamps never decrease in log order, so what expires is always a prefix
  # of the live seqs, and the runs are at most the live messages.

  ## Times, under max_age

  @doc "Under max_age, the seqs from `first` were stored at the state's stamp."
  def keep_time(%{max_age: nil} = state, _first), do: state

  def keep_time(%{stamp: stamp, times: times} = state, first) do
    case :queue.peek_r(times) do
      {:value, {_, ^stamp}} -> state
      _ -> %{state | times: :queue.in({first, stamp}, times)}
    end
  end

  @doc """
  Under max_age, at the state's stamp: the live messages stored longer
  ago than it are claimed (the tail passes them) and the ring is told to
  count them `expired`. Pure, and decided in log order, so alike on every
  member.
  """
  @spec expire(map()) :: {map(), [Ringbus.Replica.Machine.op()]}
  def expire(%{max_age: nil} = state), do: {state, []}

  def expire(state) do
    {bound, times} = expired_below(state.times, state.stamp - state.max_age, state.head)
    times = drop_dead(times, state.tail)

    if bound > state.tail do
      count = bound - state.tail
      state = %{state | tail: bound, times: times} |> forget_sizes(count)
      {state, [{:expire, bound}]}
    else
      {%{state | times: times}, []}
    end
  end

  @doc """
  Under max_age, with messages live: Ra's timer effect (run on the
  leader), which appends `{:timeout, :expire}` once the oldest of them is
  older than max_age, so that they expire with no other command.
  """
  def expiry_timer(%{max_age: nil}), do: []
  def expiry_timer(%{tail: tail, head: head}) when tail >= head, do: []

  def expiry_timer(state) do
    case :queue.peek(state.times) do
      {:value, {_first, stamp}} ->
        [{:timer, :expire, max(stamp + state.max_age - state.stamp + 1, 1)}]

      :empty ->
        []
    end
  end

  # The first seq stored at `cutoff` or later (or `head`), and the runs from it.
  defp expired_below(times, cutoff, head) do
    case :queue.peek(times) do
      {:value, {_first, stamp}} when stamp < cutoff ->
        times = :queue.drop(times)

        case :queue.peek(times) do
          {:value, _} -> expired_below(times, cutoff, head)
          :empty -> {head, times}
        end

      {:value, {first, _stamp}} ->
        {first, times}

      :empty ->
        {0, times}
    end
  end

  # Runs all of whose seqs are below the tail (pulled, overwritten) go.
  defp drop_dead(times, tail) do
    with {:value, _} <- :queue.peek(times),
         rest = :queue.drop(times),
         {:value, {next, _}} when next <= tail <- :queue.peek(rest) do
      drop_dead(rest, tail)
    else
      _ -> times
    end
  end

  ## Sizes, under max_bytes

  @doc """
  A batch went in at `first`: under max_bytes its sizes are kept; then,
  under drop-oldest, the tail passes what the capacity and bytes no
  longer hold.
  """
  def keep_sizes(%{max_bytes: nil} = state, _first, _payloads, _bytes),
    do: overflow(state)

  def keep_sizes(state, first, payloads, bytes) do
    sizes = for p <- payloads, into: <<>>, do: <<byte_size(p)::32>>
    overflow(%{state | bytes: state.bytes + bytes, sizes: :queue.in({first, sizes}, state.sizes)})
  end

  # Under drop-oldest: the tail moves past what the capacity, then the bytes,
  # no longer hold.
  defp overflow(%{overflow: :drop_oldest} = state) do
    over = state.head - state.capacity - state.tail
    state = if over > 0, do: %{state | tail: state.tail + over} |> forget_sizes(over), else: state
    drop_bytes(state)
  end

  defp overflow(state), do: state

  defp drop_bytes(%{max_bytes: max, bytes: bytes} = state)
       when max != nil and bytes > max and state.tail < state.head,
       do: %{state | tail: state.tail + 1} |> forget_sizes(1) |> drop_bytes()

  defp drop_bytes(state), do: state

  @doc "The oldest `count` live messages are gone: their bytes go with them."
  def forget_sizes(%{max_bytes: nil} = state, _count), do: state
  def forget_sizes(state, 0), do: state

  def forget_sizes(state, count) do
    {{:value, {first, sizes}}, rest} = :queue.out(state.sizes)
    n = div(byte_size(sizes), 4)
    take = min(n, count)
    <<gone::binary-size(4 * take), left::binary>> = sizes
    freed = for <<s::32 <- gone>>, reduce: 0, do: (acc -> acc + s)
    rest = if left == <<>>, do: rest, else: :queue.in_r({first + take, left}, rest)
    forget_sizes(%{state | bytes: state.bytes - freed, sizes: rest}, count - take)
  end
end
