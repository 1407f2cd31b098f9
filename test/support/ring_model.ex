defmodule Ringbus.Test.RingModel do
  @moduledoc """
  A reference model of a channel (a plain list of `{seq, payload}`) and PropEr
  generators of command sequences, for model-based tests of the ring.

  The model keeps what `Ringbus.info/1` promises: the counts, and the bytes
  the channel holds. A push or batch of more bytes than `:max_bytes` is
  refused whole with `:too_large`, under either overflow policy. A drop-oldest batch on a channel without `:max_bytes`
  is stored as one unit and freed whole once none of its messages is left;
  every other message is a unit of its own.

  Times are not modelled; `{:read_time, k, shift}` checks the channel
  against itself: the messages held are the model's, their times never
  decrease, and a read from a time finds what a scan of them finds.
  """

  defstruct [
    :capacity,
    :overflow,
    :max_bytes,
    head: 0,
    # {seq, payload, unit}: the messages held, oldest first
    items: [],
    # unit => bytes, for units with a message held
    units: %{},
    pushed: 0,
    pulled: 0,
    overwritten: 0,
    rejected: 0,
    bytes_pushed: 0
  ]

  @doc "A PropEr generator of `{capacity, max_bytes, commands}`."
  def scenario do
    :proper_types.tuple([
      :proper_types.integer(1, 5),
      :proper_types.elements([nil, 4, 10, 70_000]),
      :proper_types.list(command())
    ])
  end

  defp command do
    :proper_types.frequency([
      {4, {:push, payload()}},
      {2, {:push_many, :proper_types.list(payload())}},
      {3, :pull},
      {2, {:read, :proper_types.integer(0, 40), :proper_types.integer(0, 8)}},
      {2, {:read_time, :proper_types.integer(0, 8), :proper_types.integer(-1, 1)}},
      {1, :len},
      {2, :info},
      {1, :recreate}
    ])
  end

  # Small payloads, and the sizes at the edges: empty, two bytes, 64 KiB
  # (made from one byte: PropEr would build a random binary that long byte by
  # byte).
  defp payload do
    :proper_types.frequency([
      {6, :proper_types.binary(2)},
      {3, :proper_types.binary()},
      {1, :proper_types.elements([<<>>, <<0, 255>>])},
      {1, :proper_types.bind(:proper_types.byte(), &:binary.copy(<<&1>>, 65_536), false)}
    ])
  end

  def new(capacity, overflow, max_bytes),
    do: %__MODULE__{capacity: capacity, overflow: overflow, max_bytes: max_bytes}

  @doc """
  Runs `commands` against the channel `name` and the model. Returns true when
  every result agrees, or prints the first disagreement and returns false.
  """
  def run(_name, _model, []), do: true

  def run(name, model, [command | rest]) do
    actual = apply_real(name, model, command)
    {expected, model} = apply_model(model, command)

    if actual == expected do
      run(name, model, rest)
    else
      IO.puts(
        "\n#{inspect(command, limit: 8, printable_limit: 16)} returned " <>
          "#{inspect(actual, limit: 8, printable_limit: 16)}, model says " <>
          "#{inspect(expected, limit: 8, printable_limit: 16)}"
      )

      false
    end
  end

  defp apply_real(name, _m, {:push, p}), do: Ringbus.push(name, p)
  defp apply_real(name, _m, {:push_many, ps}), do: Ringbus.push_many(name, ps)
  defp apply_real(name, _m, :pull), do: Ringbus.pull(name)
  defp apply_real(name, _m, {:read, from, max}), do: Ringbus.read(name, from, max)
  defp apply_real(name, _m, :len), do: Ringbus.len(name)

  # The messages held with their times, which never decrease; and a read
  # from the time of the k-th of them (shifted by `shift` ms) starts at the
  # first held at or after that time: the binary search agrees with a scan.
  defp apply_real(name, _m, {:read_time, k, shift}) do
    {:ok, timed, _lost} = Ringbus.read(name, 0, 100, times: true)
    times = Enum.map(timed, &elem(&1, 2))

    t =
      case timed do
        [] -> System.system_time(:millisecond) + shift
        _ -> elem(Enum.at(timed, rem(k, length(timed))), 2) + shift
      end

    found = for {seq, p, at} <- timed, at >= t, do: {seq, p}
    agrees? = Ringbus.read(name, {:time, t}, 100) == {:ok, found, 0}
    {for({seq, p, _} <- timed, do: {seq, p}), times == Enum.sort(times) and agrees?}
  end

  defp apply_real(name, m, :recreate) do
    :ok = Ringbus.delete(name)
    Ringbus.create(name, capacity: m.capacity, overflow: m.overflow, max_bytes: m.max_bytes)
  end

  defp apply_real(name, _m, :info) do
    {:ok, info} = Ringbus.info(name)

    Map.take(info, [
      :len,
      :first_seq,
      :next_seq,
      :pushed,
      :pulled,
      :overwritten,
      :rejected,
      :bytes,
      :bytes_pushed,
      :max_bytes
    ])
  end

  defp apply_model(m, {:push, p}), do: append(m, [p])
  defp apply_model(m, {:push_many, []}), do: {{:ok, m.head}, m}
  defp apply_model(m, {:push_many, ps}), do: append(m, ps)
  defp apply_model(%{items: []} = m, :pull), do: {:empty, m}

  defp apply_model(m, :pull) do
    [{seq, p, _unit} | _] = m.items
    {{:ok, seq, p}, %{remove_oldest(m) | pulled: m.pulled + 1}}
  end

  defp apply_model(m, {:read, from, max}) do
    tail = m.head - length(m.items)
    start = max(from, tail)

    found =
      for({seq, p, _} <- m.items, seq >= start, do: {seq, p})
      |> Enum.take(max)

    {{:ok, found, start - from}, m}
  end

  defp apply_model(m, :len), do: {length(m.items), m}

  defp apply_model(m, {:read_time, _k, _shift}),
    do: {{for({seq, p, _} <- m.items, do: {seq, p}), true}, m}

  defp apply_model(m, :recreate), do: {:ok, new(m.capacity, m.overflow, m.max_bytes)}

  defp apply_model(m, :info) do
    len = length(m.items)

    info = %{
      len: len,
      first_seq: m.head - len,
      next_seq: m.head,
      pushed: m.pushed,
      pulled: m.pulled,
      overwritten: m.overwritten,
      rejected: m.rejected,
      bytes: m.units |> Map.values() |> Enum.sum(),
      bytes_pushed: m.bytes_pushed,
      max_bytes: m.max_bytes
    }

    {info, m}
  end

  defp append(m, payloads) do
    count = length(payloads)
    bytes = payloads |> Enum.map(&byte_size/1) |> Enum.sum()

    cond do
      # A push of more bytes than the channel holds, one payload or a batch.
      m.max_bytes && bytes > m.max_bytes ->
        {{:error, :too_large}, %{m | rejected: m.rejected + count}}

      m.overflow == :reject and
          (length(m.items) + count > m.capacity or
             (m.max_bytes && held(m) + bytes > m.max_bytes)) ->
        {{:error, :full}, %{m | rejected: m.rejected + count}}

      true ->
        first = m.head
        m = store(m, payloads, first)

        m = %{
          m
          | head: first + count,
            pushed: m.pushed + count,
            bytes_pushed: m.bytes_pushed + bytes
        }

        m = drop_while(m, &(length(&1.items) > &1.capacity))
        m = drop_while(m, &(&1.max_bytes != nil and held(&1) > &1.max_bytes))
        {{:ok, first}, m}
    end
  end

  # A drop-oldest batch without max_bytes is one unit (named by its first
  # seq); anything else, a unit a message.
  defp store(%{overflow: :drop_oldest, max_bytes: nil} = m, [_, _ | _] = payloads, first) do
    items = Enum.with_index(payloads, fn p, i -> {first + i, p, first} end)
    bytes = payloads |> Enum.map(&byte_size/1) |> Enum.sum()
    %{m | items: m.items ++ items, units: Map.put(m.units, first, bytes)}
  end

  defp store(m, payloads, first) do
    items = Enum.with_index(payloads, fn p, i -> {first + i, p, first + i} end)

    units =
      Enum.reduce(items, m.units, fn {_, p, unit}, units -> Map.put(units, unit, byte_size(p)) end)

    %{m | items: m.items ++ items, units: units}
  end

  defp drop_while(m, condition) do
    if m.items != [] and condition.(m),
      do: drop_while(%{remove_oldest(m) | overwritten: m.overwritten + 1}, condition),
      else: m
  end

  # Removes the oldest message; its unit is freed once none of its messages
  # is left.
  defp remove_oldest(%{items: [{_, _, unit} | rest]} = m) do
    units =
      if Enum.any?(rest, &(elem(&1, 2) == unit)), do: m.units, else: Map.delete(m.units, unit)

    %{m | items: rest, units: units}
  end

  defp held(m), do: m.units |> Map.values() |> Enum.sum()
end
