defmodule Ringbus.Release.Config do
  @moduledoc false
  # The runtime configuration of a release and of `mix ringbus.server`, as a
  # function of data: the environment (and the file `RINGBUS_CONFIG` names,
  # and the task's flags) in, the boot configuration or the one line that
  # says which variable is wrong out. `config/runtime.exs` calls `load/1` at
  # boot and stops the boot on an error; `Ringbus.Release` starts what the
  # result declares. `mix ringbus.server` calls `load/2` with its flags,
  # each standing for a variable, and reports an error under both names
  # (`RINGBUS_PORT (--port)`).
  #
  # Every variable is in `@variables`, whose descriptions become the table
  # in `Ringbus.Release`'s docs. Values are parsed here; the server's and the
  # channels' own option checks then run on the result, so a value that
  # parses but the server refuses (a `max_frame_size` under 1024) is still
  # reported under the variable's name.

  alias Ringbus.Release.{ChannelSpec, Files}
  alias Ringbus.Server.Config, as: ServerConfig

  # {variable, where the value goes, its type, its default in words, what it is}
  @variables [
    {"RINGBUS_CONFIG", :config, :file, "none",
     "A file of `NAME=value` lines setting any variable below; the environment wins over it."},
    {"RINGBUS_HOST", {:server, :host}, :ip, "`127.0.0.1`",
     "The address the binary protocol (and RESP) binds."},
    {"RINGBUS_PORT", {:server, :port}, :port, "`7171`", "The binary protocol's port."},
    {"RINGBUS_RESP_PORT", {:server, :resp_port}, :port, "none (no RESP)",
     "The port of the RESP front end."},
    {"RINGBUS_CERTFILE", :certfile, :file, "none",
     "PEM certificate: with `RINGBUS_KEYFILE`, the server speaks TLS."},
    {"RINGBUS_KEYFILE", :keyfile, :file, "none", "PEM private key of `RINGBUS_CERTFILE`."},
    {"RINGBUS_TOKENS", :tokens, :tokens, "none (no auth)",
     "Comma-separated tokens, each granting every channel."},
    {"RINGBUS_TOKENS_FILE", :tokens_file, :file, "none",
     "A file of tokens, one a line: `TOKEN` (every right on every channel) or " <>
       "`TOKEN read=PREFIX,... write=PREFIX,... manage=PREFIX,...` (`*` for every channel; " <>
       "a right left out is none); `#` starts a comment."},
    {"RINGBUS_AUTO_CREATE", {:server, :auto_create}, :auto_create, "`100000:drop_oldest`",
     "`CAPACITY[:OVERFLOW[:MAX_BYTES]]` of channels created by their first push, or `off`."},
    {"RINGBUS_RESP_STREAM_MAX_BYTES", {:server, :resp_stream_max_bytes}, :positive, "64 MiB",
     "The payload bytes a stream created over RESP holds before its oldest entries are overwritten."},
    {"RINGBUS_RESP_STREAM_REPLICAS", {:server, :resp_stream_replicas}, :positive, "none (memory)",
     "N: a stream created over RESP is replicated and durable, on this node and N - 1 " <>
       "connected ones (`Ringbus.create/2`'s `replicas:`)."},
    {"RINGBUS_MAX_FRAME_SIZE", {:server, :max_frame_size}, :positive, "16 MiB",
     "The largest frame accepted, in bytes."},
    {"RINGBUS_MAX_CONNECTIONS", {:server, :max_connections}, :positive, "`1024`",
     "Connections at once."},
    {"RINGBUS_MAX_SUBSCRIPTIONS", {:server, :max_subscriptions}, :positive, "`64`",
     "Subscriptions per connection."},
    {"RINGBUS_MAX_CREDIT", {:server, :max_credit}, :positive, "`10000`",
     "The most credit a subscription may hold, in messages."},
    {"RINGBUS_MAX_OUT_BYTES", {:server, :max_out_bytes}, :positive, "4 MiB",
     "Bytes queued for one client before its connection waits for it."},
    {"RINGBUS_HANDSHAKE_TIMEOUT", {:server, :handshake_timeout}, :positive, "`5000`",
     "ms for the TLS handshake and HELLO."},
    {"RINGBUS_IDLE_TIMEOUT", {:server, :idle_timeout}, :timeout, "`300000`",
     "ms within which each frame must follow the one before, or `infinity`."},
    {"RINGBUS_RESP_IDLE_TIMEOUT", {:server, :resp_idle_timeout}, :timeout, "`infinity`",
     "The same for RESP commands; by default RESP clients may idle, as with Redis's `timeout 0`."},
    {"RINGBUS_SEND_TIMEOUT", {:server, :send_timeout}, :timeout, "`30000`",
     "ms a write may wait on a client that does not read, or `infinity`."},
    {"RINGBUS_SHUTDOWN_TIMEOUT", {:server, :shutdown_timeout}, :positive, "`5000`",
     "ms each connection has, at shutdown, to answer what it has read and close."},
    {"RINGBUS_ACCEPTORS", {:server, :acceptors}, :positive, "`4`", "Accepting processes."},
    {"RINGBUS_BUFFER_SIZE", {:server, :buffer_size}, :positive, "256 KiB",
     "Socket buffer sizes and the size of one read, in bytes."},
    {"RINGBUS_CHANNELS", :channels, :channels, "none",
     "Channels created at boot, comma-separated: " <>
       "`NAME:CAPACITY[:OVERFLOW[:MAX_BYTES]][@replicas=N][@max_age=MS]`, OVERFLOW " <>
       "`drop_oldest` or `reject`; `@replicas=N` makes it replicated and durable " <>
       "(`Ringbus.create/2`'s `replicas:`), on this node and N - 1 connected ones; " <>
       "`@max_age=MS` lets messages older than MS ms go (`max_age:`)."},
    {"RINGBUS_HTTP_HOST", {:http, :host}, :ip, "`127.0.0.1`",
     "The address the HTTP endpoint (`/metrics`, `/status`) binds."},
    {"RINGBUS_HTTP_PORT", {:http, :port}, :port_or_off, "`9171`",
     "The HTTP endpoint's port, or `off`."},
    {"RINGBUS_JOIN", :join, :nodes, "none (no cluster)",
     "Comma-separated node names (`name@host`) of the cluster's members to join."},
    {"RINGBUS_NAME", :name, :node, "`RELEASE_NODE`",
     "This node's name, `NAME@HOST`: long names when HOST has a dot. The release's " <>
       "`rel/env.sh` makes it `RELEASE_NODE` (for `start`, `rpc`, `remote` and `stop` alike)."},
    {"RINGBUS_COOKIE", :cookie, :cookie, "`RELEASE_COOKIE`",
     "The cluster's cookie, the same on every node; the release's `rel/env.sh` makes it " <>
       "`RELEASE_COOKIE`."},
    {"RINGBUS_NET_TICKTIME", :net_ticktime, :positive, "`60`",
     "Seconds after which a silent node is declared down, ± 25%; the same on every node. " <>
       "The release's `rel/env.sh` gives it to the VM (`-kernel net_ticktime`)."},
    {"RINGBUS_DATA_DIR", :data_dir, :dir, "`ringbus_data/NODE` under the current directory",
     "Where replicated channels (`replicas:`) keep their Raft logs; made if missing."},
    {"RINGBUS_WAL_MAX_BYTES", :wal_max_bytes, :positive, "32000000",
     "Bytes at which the Raft WAL rolls over; Ra holds its entries in ETS too until then."},
    {"RINGBUS_LOG_LEVEL", :log_level, :log_level, "`info`",
     "`debug`, `info`, `notice`, `warning` or `error`: `info` logs each connection " <>
       "opened and closed, `warning` only limits hit."}
  ]

  @names for {name, _, _, _, _} <- @variables, do: name

  @typedoc "What a release starts: see `Ringbus.Release.children/1`."
  @type boot :: %{
          server: keyword(),
          channels: [{String.t(), keyword()}],
          http: keyword() | nil,
          join: [node()],
          name: node() | nil,
          cookie: atom() | nil,
          net_ticktime: pos_integer() | nil,
          data_dir: Path.t() | nil,
          wal_max_bytes: pos_integer() | nil,
          log_level: Logger.level(),
          given: %{atom() => String.t()}
        }

  @doc "The variables, as `{name, type, default, description}`, for the docs."
  @spec variables() :: [{String.t(), atom(), String.t(), String.t()}]
  def variables,
    do: for({name, _, type, default, text} <- @variables, do: {name, type, default, text})

  @doc """
  Reads the configuration from `env` (a map of environment variables), from
  the file `RINGBUS_CONFIG` names, if any, and from `flags`: variable names
  to `{value, flag}`, which win over both (`mix ringbus.server`'s).

  `given` in the result maps each option that was set to the name an error
  about it gives (`RINGBUS_PORT`, `RINGBUS_PORT (--port)`).
  """
  @spec load(%{String.t() => String.t()}, %{String.t() => {String.t(), String.t()}}) ::
          {:ok, boot()} | {:error, String.t()}
  def load(env, flags \\ %{}) when is_map(env) and is_map(flags) do
    env =
      for {name, value} <- env,
          String.starts_with?(name, "RINGBUS_"),
          into: %{},
          do: {name, {value, ""}}

    flags = Map.new(flags, fn {name, {value, flag}} -> {name, {value, " (#{flag})"}} end)

    with :ok <- known(env),
         {:ok, file} <- config_file(env),
         vars = file |> Map.merge(Map.delete(env, "RINGBUS_CONFIG")) |> Map.merge(flags),
         {:ok, values} <- parse(vars),
         {:ok, boot} <- build(values) do
      {:ok,
       Map.put(
         boot,
         :given,
         for({t, {_, name, origin}} <- values, into: %{}, do: {t, name <> origin})
       )}
    end
  end

  @doc """
  The line that stops the boot when a listener of `boot` cannot bind:
  `listener` is `:binary`, `:resp` or `:http`, `reason` what the socket said.
  """
  @spec listen_error(boot(), :binary | :resp | :http, term()) :: String.t()
  def listen_error(boot, listener, reason) do
    {host_target, port_target, opts} =
      case listener do
        :binary -> {{:server, :host}, {:server, :port}, boot.server}
        :resp -> {{:server, :host}, {:server, :resp_port}, boot.server}
        :http -> {{:http, :host}, {:http, :port}, boot.http}
      end

    host = :inet.ntoa(Keyword.get(opts, :host, {127, 0, 0, 1}))
    port = Keyword.get(opts, elem(port_target, 1), default_port(listener))
    target = if reason == :eaddrnotavail, do: host_target, else: port_target
    name = Map.get(boot.given, target) || default_name(target)

    "ringbus: #{name} cannot listen on #{host}:#{port}: " <>
      "#{:inet.format_error(reason)} (#{inspect(reason)})"
  end

  defp default_port(:binary), do: Ringbus.Wire.Frame.default_port()
  defp default_port(:http), do: 9171
  defp default_port(:resp), do: nil

  defp default_name(target),
    do: Enum.find_value(@variables, fn {name, t, _, _, _} -> if t == target, do: name end)

  defp known(env) do
    case Enum.find(Map.keys(env), &(&1 not in @names)) do
      nil -> :ok
      name -> {:error, line(name, "", "is not a Ringbus variable (see Ringbus.Release)")}
    end
  end

  ## The file

  defp config_file(%{"RINGBUS_CONFIG" => {path, _}}) do
    case File.read(path) do
      {:ok, text} ->
        text
        |> String.split(["\r\n", "\n"])
        |> Enum.with_index(1)
        |> Enum.reduce_while({:ok, %{}}, fn {text, n}, {:ok, acc} ->
          case file_line(String.trim(text)) do
            :skip ->
              {:cont, {:ok, acc}}

            {name, value} when name in @names and name != "RINGBUS_CONFIG" ->
              {:cont, {:ok, Map.put(acc, name, {value, " (#{path} line #{n})"})}}

            # The line itself is not shown: it may hold a token.
            {name, _value} ->
              message = "#{path} line #{n}: #{inspect(name)} is not a variable the file may set"
              {:halt, {:error, line("RINGBUS_CONFIG", "", message)}}

            :error ->
              message = "#{path} line #{n}: expected NAME=value"
              {:halt, {:error, line("RINGBUS_CONFIG", "", message)}}
          end
        end)

      {:error, reason} ->
        {:error, line("RINGBUS_CONFIG", "", "cannot read #{path}: #{:file.format_error(reason)}")}
    end
  end

  defp config_file(_env), do: {:ok, %{}}

  defp file_line(""), do: :skip
  defp file_line("#" <> _), do: :skip

  defp file_line(text) do
    case String.split(text, "=", parts: 2) do
      [name, value] -> {String.trim(name), unquote_value(String.trim(value))}
      _ -> :error
    end
  end

  defp unquote_value(<<q, rest::binary>> = value) when q in [?", ?'] do
    if String.ends_with?(rest, <<q>>), do: String.slice(rest, 0..-2//1), else: value
  end

  defp unquote_value(value), do: value

  ## Values

  defp parse(vars) do
    Enum.reduce_while(@variables, {:ok, %{}}, fn {name, target, type, _, _}, {:ok, acc} ->
      case vars do
        %{^name => {raw, origin}} ->
          case value(type, raw) do
            {:ok, value} -> {:cont, {:ok, Map.put(acc, target, {value, name, origin})}}
            {:error, message} -> {:halt, {:error, line(name, origin, message)}}
          end

        _ ->
          {:cont, {:ok, acc}}
      end
    end)
  end

  defp value(:dir, path) do
    case File.mkdir_p(path) do
      :ok ->
        {:ok, Path.expand(path)}

      {:error, reason} ->
        {:error, "cannot be made a directory: #{inspect(path)}: #{:file.format_error(reason)}"}
    end
  end

  defp value(:file, path) do
    case File.stat(path) do
      {:ok, %{type: :regular, access: access}} when access in [:read, :read_write] ->
        {:ok, path}

      {:ok, _} ->
        {:error, "must name a readable file, got: #{inspect(path)}"}

      {:error, reason} ->
        {:error, "must name a readable file: #{inspect(path)}: #{:file.format_error(reason)}"}
    end
  end

  defp value(:ip, text) do
    case :inet.parse_address(String.to_charlist(text)) do
      {:ok, ip} -> {:ok, ip}
      {:error, _} -> {:error, "must be an IP address, got: #{inspect(text)}"}
    end
  end

  defp value(:port, text), do: integer(text, 0..65_535, "an integer in 0..65535")
  defp value(:port_or_off, "off"), do: {:ok, :off}
  defp value(:port_or_off, text), do: integer(text, 0..65_535, "an integer in 0..65535 or off")
  defp value(:positive, text), do: integer(text, 1..(2 ** 62), "a positive integer")
  defp value(:timeout, "infinity"), do: {:ok, :infinity}
  defp value(:timeout, text), do: integer(text, 1..(2 ** 62), "a positive integer or infinity")

  # Tokens are secrets: an error never shows them.
  defp value(:tokens, text) do
    tokens = String.split(text, ",", trim: true) |> Enum.map(&String.trim/1)

    if tokens != [] and Enum.all?(tokens, &(&1 != "")),
      do: {:ok, Map.new(tokens, &{&1, :all})},
      else: {:error, "must be comma-separated tokens"}
  end

  defp value(:auto_create, "off"), do: {:ok, false}

  defp value(:auto_create, text), do: ChannelSpec.options(String.split(text, ":"))

  defp value(:channels, text), do: ChannelSpec.parse(text)

  defp value(:nodes, text) do
    names = text |> String.split([",", " "], trim: true)

    case Enum.find(names, &(not Regex.match?(~r/^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+$/, &1))) do
      nil -> {:ok, Enum.map(names, &String.to_atom/1)}
      bad -> {:error, "must be comma-separated node names (name@host), got: #{inspect(bad)}"}
    end
  end

  defp value(:node, text) do
    if Regex.match?(~r/^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+$/, text),
      do: {:ok, String.to_atom(text)},
      else: {:error, "must be a node name, NAME@HOST, got: #{inspect(text)}"}
  end

  # A cookie is a secret: an error never shows it.
  defp value(:cookie, text) do
    if text != "" and Regex.match?(~r/^[\x21-\x7e]+$/, text),
      do: {:ok, String.to_atom(text)},
      else: {:error, "must be printable ASCII without spaces"}
  end

  defp value(:log_level, text) do
    levels = ~w(debug info notice warning error critical alert emergency)

    if text in levels,
      do: {:ok, String.to_existing_atom(text)},
      else: {:error, "must be one of #{Enum.join(levels, ", ")}, got: #{inspect(text)}"}
  end

  defp integer(text, range, expected), do: ChannelSpec.integer(text, range, expected)

  defp build(values) do
    with {:ok, server} <- server(values),
         {:ok, channels} <- channels(values),
         {:ok, http} <- http(values),
         {:ok, join} <- join(values) do
      {:ok,
       %{
         server: server,
         channels: channels,
         http: http,
         join: join,
         name: fetch(values, :name, nil),
         cookie: fetch(values, :cookie, nil),
         net_ticktime: fetch(values, :net_ticktime, nil),
         data_dir: fetch(values, :data_dir, nil),
         wal_max_bytes: fetch(values, :wal_max_bytes, nil),
         log_level: fetch(values, :log_level, :info)
       }}
    end
  end

  defp join(values) do
    case values[:join] do
      nil -> {:ok, []}
      {members, _name, _origin} -> {:ok, members}
    end
  end

  defp fetch(values, target, default) do
    case values do
      %{^target => {value, _name, _origin}} -> value
      _ -> default
    end
  end

  defp server(values) do
    opts = for {{:server, key}, {value, _, _}} <- values, do: {key, value}

    with {:ok, tls} <- tls(values),
         {:ok, tokens} <- tokens(values) do
      opts = opts |> put(:tls, tls) |> put(:tokens, tokens) |> Enum.sort()
      check(values, fn -> ServerConfig.new!(opts) end, opts)
    end
  end

  defp put(opts, _key, nil), do: opts
  defp put(opts, key, value), do: Keyword.put(opts, key, value)

  defp tls(values) do
    case {values[:certfile], values[:keyfile]} do
      {nil, nil} ->
        {:ok, nil}

      {{cert, _, _} = certfile, {key, _, _} = keyfile} ->
        with :ok <- pem(certfile, :certificate),
             :ok <- pem(keyfile, :private_key) do
          {:ok, [certfile: cert, keyfile: key]}
        end

      {{_, name, origin}, nil} ->
        {:error, line(name, origin, "needs RINGBUS_KEYFILE too")}

      {nil, {_, name, origin}} ->
        {:error, line(name, origin, "needs RINGBUS_CERTFILE too")}
    end
  end

  defp pem({path, name, origin}, what) do
    with {:error, message} <- Files.pem(path, what), do: {:error, line(name, origin, message)}
  end

  defp tokens(values) do
    listed = fetch(values, :tokens, %{})

    with {:ok, filed} <- tokens_file(values[:tokens_file]) do
      tokens = Map.merge(listed, filed)
      {:ok, if(tokens == %{}, do: nil, else: tokens)}
    end
  end

  defp tokens_file(nil), do: {:ok, %{}}

  defp tokens_file({path, name, origin}) do
    with {:error, message} <- Files.tokens(path), do: {:error, line(name, origin, message)}
  end

  defp channels(values) do
    case values[:channels] do
      nil ->
        {:ok, []}

      {channels, name, origin} ->
        Enum.reduce_while(channels, {:ok, []}, fn {channel, opts}, {:ok, acc} ->
          # `:replicas` is `Ringbus.create/2`'s, not the ring's.
          case checked(fn ->
                 Ringbus.Channel.validate_options!(Keyword.delete(opts, :replicas))
               end) do
            {:ok, _checked} ->
              {:cont, {:ok, [{channel, opts} | acc]}}

            {:error, message} ->
              {:halt,
               {:error, line(name, origin, "#{inspect(channel)}: #{unsupported(message)}")}}
          end
        end)
        |> case do
          {:ok, channels} -> {:ok, Enum.reverse(channels)}
          error -> error
        end
    end
  end

  defp http(values) do
    case fetch(values, {:http, :port}, 9171) do
      :off ->
        {:ok, nil}

      port ->
        opts = [host: fetch(values, {:http, :host}, {127, 0, 0, 1}), port: port]
        check(values, fn -> Ringbus.HTTP.validate_options!(opts) end, opts)
    end
  end

  # Runs an option check; an ArgumentError is reported under the variable
  # that set the option it names.
  defp check(values, fun, opts) do
    case checked(fun) do
      {:ok, _checked} ->
        {:ok, opts}

      {:error, message} ->
        {name, origin} = culprit(values, message)
        {:error, line(name, origin, unsupported(message))}
    end
  end

  defp checked(fun) do
    {:ok, fun.()}
  rescue
    e in ArgumentError -> {:error, Exception.message(e)}
  end

  defp culprit(values, message) do
    found =
      Enum.find_value(values, fn {target, {_value, name, origin}} ->
        if String.contains?(message, inspect(option(target))), do: {name, origin}
      end)

    found || {"RINGBUS_CONFIG", ""}
  end

  # The option a variable sets.
  defp option({_section, key}), do: key
  defp option(target) when target in [:certfile, :keyfile], do: :tls
  defp option(target) when target in [:tokens, :tokens_file], do: :tokens
  defp option(target), do: target

  # An option this build does not know (a front end or channel option of a
  # later version) reads better as such.
  defp unsupported(message) do
    case Regex.run(~r/unknown keys \[(.*?)\]/, message) do
      [_, keys] -> "is not supported by this build (unknown option #{keys})"
      nil -> message
    end
  end

  defp line(name, origin, message), do: "ringbus: #{name}#{origin} #{message}"
end
