defmodule Ringbus.Server.Auth do
  @moduledoc false
  # Tokens and what they grant. Pure: the connection asks, nothing is stored.
  #
  # Three grants, each `:all` or a list of channel name prefixes (the table
  # in docs/PROTOCOL.md section 3):
  #
  #   read    READ, LEN, INFO, SUBSCRIBE: looking, never changing
  #   write   PUSH, PUSH_BATCH and PULL: what adds or removes messages (a
  #           push to a missing channel creates it when the server
  #           auto-creates channels)
  #   manage  CREATE and DELETE
  #
  # Tokens are kept as SHA-256 digests and a HELLO's token is compared with
  # every one of them in constant time, so timing tells neither which token
  # came closest nor how long any token is.

  @type prefixes :: :all | [binary()]
  @type grants :: %{read: prefixes(), write: prefixes(), manage: prefixes()}
  @type access :: :read | :write | :manage
  @typedoc "Configured tokens: their digests and grants."
  @type tokens :: [{binary(), grants()}]

  @all %{read: :all, write: :all, manage: :all}

  @doc "The grants of `:all`."
  @spec all() :: grants()
  def all, do: @all

  @doc "Configured tokens from `%{token => grants}`."
  @spec tokens(%{binary() => grants()}) :: tokens()
  def tokens(map), do: Enum.map(map, fn {token, grants} -> {digest(token), grants} end)

  @doc "The grants of `token`, or `:error`. With no tokens configured, all is granted."
  @spec authenticate(tokens() | nil, binary() | nil) :: {:ok, grants()} | :error
  def authenticate(nil, _token), do: {:ok, @all}
  def authenticate(_tokens, nil), do: :error

  def authenticate(tokens, token) do
    given = digest(token)

    Enum.reduce(tokens, :error, fn {candidate, grants}, found ->
      if :crypto.hash_equals(candidate, given), do: {:ok, grants}, else: found
    end)
  end

  @doc "Whether `grants` allow `access` to the channel `name`."
  @spec allowed?(grants(), access(), binary()) :: boolean()
  def allowed?(grants, access, name) do
    case Map.fetch!(grants, access) do
      :all -> true
      prefixes -> Enum.any?(prefixes, &String.starts_with?(name, &1))
    end
  end

  defp digest(token), do: :crypto.hash(:sha256, token)
end
