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

  @doc "An IP address, given as a tuple or a string; raises unless it is one."
  @spec ip!(atom(), term()) :: :inet.ip_address()
  def ip!(key, host) when is_binary(host) do
    case :inet.parse_address(String.to_charlist(host)) do
      {:ok, ip} ->
        ip

      {:error, _} ->
        raise ArgumentError, "expected #{inspect(key)} to be an IP address, got: #{inspect(host)}"
    end
  end

  def ip!(_key, ip) when is_tuple(ip) and tuple_size(ip) in [4, 8], do: ip

  def ip!(key, other),
    do:
      raise(ArgumentError, "expected #{inspect(key)} to be an IP address, got: #{inspect(other)}")

  @doc "Whether `value` is a positive integer."
  @spec positive?(term()) :: boolean()
  def positive?(value), do: is_integer(value) and value > 0
end
