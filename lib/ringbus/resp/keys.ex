defmodule Ringbus.Resp.Keys do
  @moduledoc false
  # The keys of RESP commands: whether one can name a stream, whether the
  # session may touch it, and the stream made for it when it is missing.
  # Every command handler checks its keys here.

  alias Ringbus.Channel
  alias Ringbus.Resp.{Encoder, Errors}
  alias Ringbus.Server.Auth
  alias Ringbus.Wire.Frame

  @doc "Whether the session has authenticated, or needs not."
  @spec authenticated?(%{grants: term()}) :: boolean()
  def authenticated?(%{grants: grants}), do: grants != nil

  @doc "Whether the session's grants allow `access` on `key`."
  @spec allowed?(%{grants: map()}, :read | :write | :manage, binary()) :: boolean()
  def allowed?(%{grants: grants}, access, key), do: Auth.allowed?(grants, access, key)

  @doc """
  Runs `fun` for its reply if `key` is a valid stream name the session may
  `access`; else the reply that says why not.
  """
  @spec keyed(map(), :read | :write | :manage, binary(), (() -> term())) ::
          {Encoder.reply(), map()}
  def keyed(s, access, key, fun) do
    cond do
      not name?(key) ->
        {Errors.bad_name(), s}

      not allowed?(s, access, key) ->
        {Errors.no_permission(), s}

      true ->
        {fun.(), s}
    end
  end

  @doc "Whether `key` can name a stream: the network protocols' channel names."
  @spec name?(binary()) :: boolean()
  def name?(key), do: byte_size(key) >= 1 and byte_size(key) <= Channel.max_name_bytes()

  # A stream is bounded by bytes. Its capacity only backs that bound for
  # entries under 16 bytes: every XADD of field/value pairs stores at least 17.
  @min_entry_bytes 16

  @doc """
  The channel options of a stream created over RESP: the server's
  `auto_create` overflow, `:resp_stream_max_bytes` as `max_bytes`, and a
  capacity of `max_bytes / 16` (at most 2^32 - 1, the binary protocol's
  largest), so that the byte bound is the one an XADD meets first; with
  `:resp_stream_replicas`, `replicas:` (a replicated, durable stream).
  """
  @spec stream_options(Ringbus.Server.Config.t()) :: keyword() | false
  def stream_options(%{auto_create: false}), do: false

  def stream_options(%{auto_create: opts, resp_stream_max_bytes: max_bytes} = config) do
    # At most what the binary protocol's INFO_OK carries.
    capacity = max_bytes |> div(@min_entry_bytes) |> max(1) |> min(Frame.max_capacity())
    opts = Keyword.merge(opts, capacity: capacity, max_bytes: max_bytes)

    case config do
      %{resp_stream_replicas: n} when is_integer(n) -> opts ++ [replicas: n]
      _ -> opts
    end
  end

  @doc false
  # Creates a stream with `stream_options/1`; one that exists already is fine.
  def create(key, s) do
    case stream_options(s.config) do
      false ->
        {:error, :no_create}

      opts ->
        case Ringbus.create(key, opts) do
          :ok -> :ok
          {:error, :exists} -> :ok
          {:error, reason} -> {:error, reason}
        end
    end
  end
end
