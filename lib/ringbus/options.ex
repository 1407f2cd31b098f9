defmodule Ringbus.Options do
  @moduledoc false
  # Checks option values and raises `ArgumentError` in one shape everywhere:
  # "expected :capacity to be a positive integer, got: 0".

  @doc "Raises unless `valid?.(value)`; `expected` says what a valid value is."
  @spec check!(atom(), term(), (term() -> boolean()), String.t()) :: :ok
  def check!(key, value, valid?, expected) do
    if valid?.(value) do
      :ok
    else
      raise ArgumentError, "expected #{inspect(key)} to be #{expected}, got: #{inspect(value)}"
    end
  end

  @doc "`Keyword.validate!/2` whose error names what the options are for."
  @spec validate!(term(), keyword() | [atom()], String.t()) :: keyword()
  def validate!(opts, defaults, what) when is_list(opts) do
    Keyword.validate!(opts, defaults)
  rescue
    e in ArgumentError ->
      reraise ArgumentError, "invalid #{what} options: " <> Exception.message(e), __STACKTRACE__
  end

  def validate!(other, _defaults, what) do
    raise ArgumentError, "expected #{what} options to be a keyword list, got: #{inspect(other)}"
  end

  @doc "Whether `value` is a positive integer."
  @spec positive?(term()) :: boolean()
  def positive?(value), do: is_integer(value) and value > 0
end
