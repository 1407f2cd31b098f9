defmodule Ringbus.Client.Request do
  @moduledoc false
  # Checks of `Ringbus.Client`'s arguments that several of its calls share
  # or that take many lines: each raises `ArgumentError` as
  # `Ringbus.Options` words it.

  alias Ringbus.Options
  alias Ringbus.Wire.Frame

  @u64 0xFFFF_FFFF_FFFF_FFFF

  @doc "`create/3`'s options, checked: `{capacity, overflow, max_bytes, replicas, max_age}`."
  @spec create_options!(keyword()) :: tuple()
  def create_options!(opts) do
    defaults = [:capacity, overflow: :drop_oldest, max_bytes: nil, replicas: nil, max_age: nil]
    opts = Options.validate!(opts, defaults, "create")
    capacity = opts[:capacity]
    capacity? = &(is_integer(&1) and &1 in 1..Frame.max_capacity())
    Options.check!(:capacity, capacity, capacity?, "a positive integer below 2^32")
    overflow? = &(&1 in [:drop_oldest, :reject])
    Options.check!(:overflow, opts[:overflow], overflow?, ":drop_oldest or :reject")

    for key <- [:max_bytes, :max_age] do
      valid? = &(&1 == nil or (is_integer(&1) and &1 in 1..@u64))
      Options.check!(key, opts[key], valid?, "a positive integer below 2^64, or nil")
    end

    replicas? = &(&1 == nil or (is_integer(&1) and &1 in 1..Frame.max_replicas()))
    expected = "an integer in 1..#{Frame.max_replicas()}, or nil"
    Options.check!(:replicas, opts[:replicas], replicas?, expected)
    {capacity, opts[:overflow], opts[:max_bytes], opts[:replicas], opts[:max_age]}
  end

  @doc "Checks a start: a seq or `{:time, ms}`, each below 2^64."
  @spec from!(term(), String.t()) :: :ok
  def from!(from, expected), do: Options.check!(:from, from, &from?/1, expected)

  defp from?({:time, ms}), do: from?(ms)
  defp from?(seq), do: is_integer(seq) and seq in 0..@u64

  @doc "A subscription's `:credit`, `:max_batch` and `:times`, checked."
  @spec delivery_options!(keyword()) :: :ok
  def delivery_options!(opts) do
    for key <- [:credit, :max_batch] do
      valid? = &(is_integer(&1) and &1 in 1..0xFFFF_FFFF)
      Options.check!(key, opts[key], valid?, "a positive integer below 2^32")
    end

    Options.check!(:times, opts[:times], &is_boolean/1, "a boolean")
  end

  @doc "An incarnation to state: nil for `:any`."
  @spec any(pos_integer() | :any) :: pos_integer() | nil
  def any(:any), do: nil
  def any(inc), do: inc
end
