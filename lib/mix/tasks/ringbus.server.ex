defmodule Mix.Tasks.Ringbus.Server do
  @shortdoc "Runs a Ringbus server with embedded defaults"

  @moduledoc """
  Runs a Ringbus server until interrupted: channels in memory, protocol v1 on
  `127.0.0.1:#{Ringbus.Wire.Frame.default_port()}`, channels created on their
  first push.

      mix ringbus.server
      mix ringbus.server --port 7000 --token s3cret
      mix ringbus.server --certfile cert.pem --keyfile key.pem
      mix ringbus.server --resp-port 6380     # Redis clients too (docs/RESP.md)

  ## Command line options

    * `--host ADDR` - the address to bind (`RINGBUS_HOST`). Default `127.0.0.1`.
    * `--port N` - the port (`RINGBUS_PORT`). Default `#{Ringbus.Wire.Frame.default_port()}`.
    * `--resp-port N` - also listen for Redis clients (RESP2/RESP3) on this
      port (`RINGBUS_RESP_PORT`); `--resp` does on Redis's port, 6379. Off
      by default. See `Ringbus.Resp`.
    * `--certfile FILE`, `--keyfile FILE` - serve TLS with this certificate and
      key (`RINGBUS_CERTFILE`, `RINGBUS_KEYFILE`).
    * `--token T` - accept HELLO only with this token, granting all channels;
      repeat for more tokens (`RINGBUS_TOKENS`, comma-separated). Tokens
      limited to channel prefixes are set when embedding `Ringbus.Server`.
    * `--max-frame-size BYTES`, `--max-connections N`, `--max-subscriptions N`,
      `--idle-timeout MS`, `--handshake-timeout MS` - limits; see `Ringbus.Server`.
    * `--capacity N` - the capacity of channels created by a push. Default 100000.
    * `--no-auto-create` - answer pushes to unknown channels with `no_channel`.

  Flags win over environment variables.
  """

  use Mix.Task

  @switches [
    host: :string,
    port: :integer,
    resp_port: :integer,
    resp: :boolean,
    certfile: :string,
    keyfile: :string,
    token: :keep,
    max_frame_size: :integer,
    max_connections: :integer,
    max_subscriptions: :integer,
    idle_timeout: :integer,
    handshake_timeout: :integer,
    capacity: :integer,
    auto_create: :boolean
  ]

  @impl Mix.Task
  def run(args) do
    {flags, _rest} = OptionParser.parse!(args, strict: @switches)
    Mix.Task.run("app.start")

    opts = options(flags)
    {:ok, server} = Ringbus.Server.start_link(opts)
    kind = if opts[:tls], do: "tls", else: "tcp"
    auth = if opts[:tokens], do: "tokens required", else: "no auth"
    host = opts[:host] || "127.0.0.1"

    Mix.shell().info(
      "Ringbus #{Application.spec(:ringbus, :vsn)} listening on #{host}:#{Ringbus.Server.port(server)} (#{kind}, #{auth}); Ctrl-C to stop"
    )

    if opts[:resp_port] do
      Mix.shell().info(
        "RESP (Redis clients) on #{host}:#{Ringbus.Server.port(server, :resp)}: redis-cli -p #{Ringbus.Server.port(server, :resp)}"
      )
    end

    Mix.shell().info("VM memory: #{Ringbus.Server.Memory.describe()}")

    Process.sleep(:infinity)
  end

  @doc false
  def options(flags) do
    env = &System.get_env/1
    certfile = flags[:certfile] || env.("RINGBUS_CERTFILE")
    keyfile = flags[:keyfile] || env.("RINGBUS_KEYFILE")

    tokens =
      case Keyword.get_values(flags, :token) do
        [] -> (env.("RINGBUS_TOKENS") || "") |> String.split(",", trim: true)
        tokens -> tokens
      end

    auto_create =
      if Keyword.get(flags, :auto_create, true),
        do: [capacity: flags[:capacity] || 100_000, overflow: :drop_oldest],
        else: false

    [
      host: flags[:host] || env.("RINGBUS_HOST"),
      port: flags[:port] || (env.("RINGBUS_PORT") && String.to_integer(env.("RINGBUS_PORT"))),
      resp_port: resp_port(flags, env.("RINGBUS_RESP_PORT")),
      tls: tls!(certfile, keyfile),
      tokens: if(tokens != [], do: Map.new(tokens, &{&1, :all})),
      auto_create: auto_create,
      max_frame_size: flags[:max_frame_size],
      max_connections: flags[:max_connections],
      max_subscriptions: flags[:max_subscriptions],
      idle_timeout: flags[:idle_timeout],
      handshake_timeout: flags[:handshake_timeout]
    ]
    |> Enum.reject(fn {_key, value} -> is_nil(value) end)
  end

  # TLS takes both files; one without the other must not serve plain TCP.
  defp tls!(nil, nil), do: nil

  defp tls!(certfile, keyfile) when certfile != nil and keyfile != nil,
    do: [certfile: certfile, keyfile: keyfile]

  defp tls!(certfile, _keyfile) do
    {given, missing} =
      if certfile, do: {"--certfile", "--keyfile"}, else: {"--keyfile", "--certfile"}

    Mix.raise(
      "#{given} was given without #{missing} (or RINGBUS_CERTFILE/RINGBUS_KEYFILE): " <>
        "TLS needs both, and the server will not fall back to plain TCP"
    )
  end

  defp resp_port(flags, env) do
    cond do
      flags[:resp_port] -> flags[:resp_port]
      flags[:resp] -> Ringbus.Resp.default_port()
      env -> String.to_integer(env)
      true -> nil
    end
  end
end
