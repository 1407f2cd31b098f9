defmodule Ringbus.Test.RingModel do
  @moduledoc """
  A reference model of a channel (a plain list of `{seq, payload}`) and PropEr
  generators of command sequences, for model-based tests of the ring.
  """

  defstruct [
    :capacity,
    :overflow,
    head: 0,
    items: [],
    pushed: 0,
    pulled: 0,
    overwritten: 0,
    rejected: 0
  ]

  @doc "A PropEr generator of `{capacity, commands}`."
  def scenario do
    :proper_types.tuple([:proper_types.integer(1, 5), :proper_types.list(command())])
  end

  defp command do
    :proper_types.oneof([
      {:push, payload()},
      {:push, payload()},
      {:push_many, :proper_types.list(payload())},
      :pull,
      {:read, :proper_types.integer(0, 40), :proper_types.integer(0, 8)},
      :len,
      :info
    ])
  end

  defp payload, do: :proper_types.binary(2)

  def new(capacity, overflow), do: %__MODULE__{capacity: capacity, overflow: overflow}

  @doc """
  Runs `commands` against the channel `name` and the model. Returns true when
  every result agrees, or prints the first disagreement and returns false.
  """
  def run(_name, _model, []), do: true

  def run(name, model, [command | rest]) do
    actual = apply_real(name, command)
    {expected, model} = apply_model(model, command)

    if actual == expected do
      run(name, model, rest)
    else
      IO.puts(
        "\n#{inspect(command)} returned #{inspect(actual)}, model says #{inspect(expected)}"
      )

      false
    end
  end

  defp apply_real(name, {:push, p}), do: Ringbus.push(name, p)
  defp apply_real(name, {:push_many, ps}), do: Ringbus.push_many(name, ps)
  defp apply_real(name, :pull), do: Ringbus.pull(name)
  defp apply_real(name, {:read, from, max}), do: Ringbus.read(name, from, max)
  defp apply_real(name, :len), do: Ringbus.len(name)

  defp apply_real(name, :info) do
    {:ok, info} = Ringbus.info(name)
    Map.take(info, [:len, :first_seq, :next_seq, :pushed, :pulled, :overwritten, :rejected])
  end

  defp apply_model(m, {:push, p}), do: append(m, [p])
  defp apply_model(m, {:push_many, []}), do: {{:ok, m.head}, m}
  defp apply_model(m, {:push_many, ps}), do: append(m, ps)

  defp apply_model(%{items: []} = m, :pull), do: {:empty, m}

  defp apply_model(%{items: [{seq, p} | rest]} = m, :pull),
    do: {{:ok, seq, p}, %{m | items: rest, pulled: m.pulled + 1}}

  defp apply_model(m, {:read, from, max}) do
    tail = m.head - length(m.items)
    start = max(from, tail)
    found = m.items |> Enum.filter(fn {seq, _} -> seq >= start end) |> Enum.take(max)
    {{:ok, found, start - from}, m}
  end

  defp apply_model(m, :len), do: {length(m.items), m}

  defp apply_model(m, :info) do
    len = length(m.items)

    info = %{
      len: len,
      first_seq: m.head - len,
      next_seq: m.head,
      pushed: m.pushed,
      pulled: m.pulled,
      overwritten: m.overwritten,
      rejected: m.rejected
    }

    {info, m}
  end

  defp append(m, payloads) do
    count = length(payloads)

    if m.overflow == :reject and length(m.items) + count > m.capacity do
      {{:error, :full}, %{m | rejected: m.rejected + count}}
    else
      new = Enum.with_index(payloads, fn p, i -> {m.head + i, p} end)
      items = m.items ++ new
      drop = max(length(items) - m.capacity, 0)
      m = %{m | head: m.head + count, items: Enum.drop(items, drop), pushed: m.pushed + count}
      {{:ok, m.head - count}, %{m | overwritten: m.overwritten + drop}}
    end
  end
end
