defmodule Ringbus.Server.Auth do
  @moduledoc false
  # Tokens and what they grant. Pure: the connection asks, nothing is stored.
  #
  # Read grants cover PULL, READ, LEN, INFO and SUBSCRIBE; write grants cover
  # CREATE, DELETE, PUSH and PUSH_BATCH. A grant is `:all` or a list of channel
  # name prefixes.

  @type grants :: %{read: :all | [binary()], write: :all | [binary()]}

  @all %{read: :all, write: :all}

  @doc "The grants of `token`, or `:error`. With no tokens configured, all is granted."
  @spec authenticate(%{binary() => grants()} | nil, binary() | nil) :: {:ok, grants()} | :error
  def authenticate(nil, _token), do: {:ok, @all}
  def authenticate(_tokens, nil), do: :error

  def authenticate(tokens, token) do
    # Compare against every token in constant time, so timing says nothing.
    Enum.reduce(tokens, :error, fn {candidate, grants}, found ->
      if secure_equal?(candidate, token), do: {:ok, grants}, else: found
    end)
  end

  @doc "Whether `grants` allow `access` to the channel `name`."
  @spec allowed?(grants(), :read | :write, binary()) :: boolean()
  def allowed?(grants, access, name) do
    case Map.fetch!(grants, access) do
      :all -> true
      prefixes -> Enum.any?(prefixes, &String.starts_with?(name, &1))
    end
  end

  defp secure_equal?(a, b) when byte_size(a) == byte_size(b), do: :crypto.hash_equals(a, b)
  defp secure_equal?(_a, _b), do: false
end
