defmodule Ringbus.Groups.Args do
  @moduledoc false
  # `Ringbus.Groups`' checks of its arguments: a bad one raises
  # `ArgumentError` (`Ringbus.Options.check!/4`) naming it.

  alias Ringbus.Options

  def names!(group, consumer) do
    name!(:group, group)
    name!(:consumer, consumer)
  end

  def name!(key, name) do
    Options.check!(
      key,
      name,
      &(is_binary(&1) and byte_size(&1) in 1..65_535),
      "a binary of 1 to 65535 bytes"
    )
  end

  @doc "`Ringbus.Groups.create/3`'s options, with their defaults."
  def create_options!(opts) do
    defaults = [from: :latest, ack_wait: 30_000, max_deliver: :infinity, dead_letter: nil]
    opts = Options.validate!(opts, defaults ++ [max_pending: 10_000, hold: false], "group")
    Options.check!(:hold, opts[:hold], &is_boolean/1, "a boolean")
    Options.check!(:from, opts[:from], &from?/1, ":earliest, :latest, a seq or {:time, ms}")
    Options.check!(:ack_wait, opts[:ack_wait], &Options.positive?/1, "a positive integer")

    Options.check!(
      :max_deliver,
      opts[:max_deliver],
      &(&1 == :infinity or Options.positive?(&1)),
      "a positive integer or :infinity"
    )

    Options.check!(
      :max_pending,
      opts[:max_pending],
      &(is_integer(&1) and &1 in 1..1_000_000),
      "an integer from 1 to 1000000"
    )

    opts
  end

  defp from?({:time, t}), do: is_integer(t) and t >= 0
  defp from?(from), do: from in [:earliest, :latest] or (is_integer(from) and from >= 0)

  @doc "Where a group made `from:` this starts, as the group layer takes it."
  def position(:earliest), do: :first
  def position(:latest), do: :last
  def position({:time, _} = time), do: time
  def position(seq), do: seq - 1

  def positive!(key, value),
    do: Options.check!(key, value, &Options.positive?/1, "a positive integer")

  def seqs!(seqs) do
    Options.check!(
      :seqs,
      seqs,
      &(is_list(&1) and Enum.all?(&1, fn s -> is_integer(s) and s >= 0 end)),
      "a list of non-negative integers"
    )

    seqs
  end
end
