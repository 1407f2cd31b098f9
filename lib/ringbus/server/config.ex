defmodule Ringbus.Server.Config do
  @moduledoc false
  # The validated options of one server, shared read-only by its listener,
  # acceptors and connections.

  alias Ringbus.Options
  alias Ringbus.Server.Auth
  alias Ringbus.Wire.Frame

  @default_buffer_size 256 * 1024

  @defaults [
    host: {127, 0, 0, 1},
    port: Frame.default_port(),
    resp_port: nil,
    tls: nil,
    tokens: nil,
    auto_create: [capacity: 100_000, overflow: :drop_oldest],
    resp_stream_max_bytes: 64 * 1024 * 1024,
    resp_stream_replicas: nil,
    max_frame_size: 16 * 1024 * 1024,
    handshake_timeout: 5_000,
    idle_timeout: 300_000,
    resp_idle_timeout: :infinity,
    send_timeout: 30_000,
    shutdown_timeout: 5_000,
    max_connections: 1_024,
    max_subscriptions: 64,
    max_credit: 10_000,
    max_out_bytes: 4 * 1024 * 1024,
    acceptors: 4,
    buffer_size: @default_buffer_size,
    # nil: the :ringbus application's `:protocols` environment (mix.exs).
    protocols: nil,
    name: nil
  ]

  # `:counters` is the server's `Ringbus.Server.Stats` array, set by `Ringbus.Server`.
  defstruct Keyword.keys(@defaults) ++ [:max_payload_size, :counters]

  @type t :: %__MODULE__{}

  @doc "The socket buffer size when none is given."
  def default_buffer_size, do: @default_buffer_size

  @doc "Validates server options; raises `ArgumentError` on a bad one."
  @spec new!(keyword()) :: t()
  def new!(opts) when is_list(opts) do
    opts = Options.validate!(opts, @defaults, "server")
    config = struct!(__MODULE__, opts)

    config = %{
      config
      | host: host!(config.host),
        tls: tls!(config.tls),
        tokens: tokens!(config.tokens),
        auto_create: auto_create!(config.auto_create),
        protocols: protocols!(config.protocols)
    }

    Options.check!(
      :port,
      config.port,
      &(is_integer(&1) and &1 in 0..65_535),
      "an integer in 0..65535"
    )

    Options.check!(
      :resp_port,
      config.resp_port,
      &(&1 == nil or (is_integer(&1) and &1 in 0..65_535)),
      "nil or an integer in 0..65535"
    )

    for key <-
          [:max_frame_size, :max_connections, :max_subscriptions, :max_credit] ++
            [:max_out_bytes, :acceptors, :buffer_size, :handshake_timeout, :shutdown_timeout] ++
            [:resp_stream_max_bytes] do
      Options.check!(key, Map.fetch!(config, key), &Options.positive?/1, "a positive integer")
    end

    Options.check!(
      :resp_stream_replicas,
      config.resp_stream_replicas,
      &(&1 == nil or Options.positive?(&1)),
      "nil or a positive integer"
    )

    for key <- [:idle_timeout, :resp_idle_timeout, :send_timeout] do
      Options.check!(
        key,
        Map.fetch!(config, key),
        &(&1 == :infinity or (is_integer(&1) and &1 > 0)),
        "a positive integer or :infinity"
      )
    end

    Options.check!(:max_frame_size, config.max_frame_size, &(&1 >= 1024), "at least 1024")
    %{config | max_payload_size: Frame.max_payload_size(config.max_frame_size)}
  end

  defp host!(host), do: Options.ip!(:host, host)

  defp protocols!(nil), do: protocols!(Application.get_env(:ringbus, :protocols, []))

  defp protocols!(modules) when is_list(modules) do
    for module <- modules do
      unless is_atom(module) and Code.ensure_loaded?(module) and
               function_exported?(module, :listener, 1) do
        raise ArgumentError,
              "expected :protocols to be a list of Ringbus.Server.Protocol modules, got: " <>
                inspect(module)
      end

      module
    end
  end

  defp protocols!(other),
    do:
      raise(
        ArgumentError,
        "expected :protocols to be a list of Ringbus.Server.Protocol modules, got: #{inspect(other)}"
      )

  defp tls!(nil), do: nil

  defp tls!(opts) when is_list(opts) do
    has_cert? = Keyword.has_key?(opts, :certfile) or Keyword.has_key?(opts, :cert)
    has_key? = Keyword.has_key?(opts, :keyfile) or Keyword.has_key?(opts, :key)

    unless has_cert? and has_key? do
      raise ArgumentError,
            "expected :tls to hold :certfile (or :cert) and :keyfile (or :key), got: #{inspect(Keyword.keys(opts))}"
    end

    opts
  end

  defp tls!(other),
    do:
      raise(
        ArgumentError,
        "expected :tls to be a keyword list of ssl options, got: #{inspect(other)}"
      )

  defp tokens!(nil), do: nil

  defp tokens!(tokens) when is_map(tokens) do
    tokens
    |> Map.new(fn
      {token, :all} when is_binary(token) ->
        {token, Auth.all()}

      {token, grants} when is_binary(token) and is_list(grants) ->
        grants = Keyword.validate!(grants, read: [], write: [], manage: [])

        {token,
         %{
           read: prefixes!(grants[:read]),
           write: prefixes!(grants[:write]),
           manage: prefixes!(grants[:manage])
         }}

      other ->
        raise ArgumentError,
              "expected each token to map to :all or [read: prefixes, write: prefixes, " <>
                "manage: prefixes], got: #{inspect(other)}"
    end)
    |> Auth.tokens()
  end

  defp tokens!(other),
    do:
      raise(
        ArgumentError,
        "expected :tokens to be a map of token => grants, got: #{inspect(other)}"
      )

  defp prefixes!(:all), do: :all

  defp prefixes!(prefixes) when is_list(prefixes) do
    if Enum.all?(prefixes, &is_binary/1),
      do: prefixes,
      else:
        raise(
          ArgumentError,
          "expected channel prefixes to be binaries, got: #{inspect(prefixes)}"
        )
  end

  defp prefixes!(other),
    do:
      raise(
        ArgumentError,
        "expected channel prefixes to be :all or a list, got: #{inspect(other)}"
      )

  defp auto_create!(false), do: false
  defp auto_create!(opts) when is_list(opts), do: Ringbus.Channel.validate_options!(opts)

  defp auto_create!(other),
    do:
      raise(
        ArgumentError,
        "expected :auto_create to be false or channel options, got: #{inspect(other)}"
      )
end
