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
