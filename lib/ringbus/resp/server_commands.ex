defmodule Ringbus.Resp.ServerCommands do
  @moduledoc false
  # The connection and server commands of `Ringbus.Resp.Session`: PING,
  # ECHO, QUIT, HELLO, AUTH, SELECT, CLIENT and INFO. Each takes the
  # command's arguments (its name aside) and the session, and returns
  # `{reply, session}` (QUIT: `{:close, reply, session}`).

  alias Ringbus.Resp.{ClientCommands, Counters, Encoder, KeyCommands}
  alias Ringbus.Server.Auth

  import Ringbus.Resp.Args, only: [upcase: 1]

  import Ringbus.Resp.Errors,
    only: [wrong_arity: 1, syntax_error: 0, not_integer: 0, unknown_subcommand: 2]

  def ping([], s), do: {{:simple, "PONG"}, s}
  def ping([message], s), do: {message, s}
  def ping(_args, s), do: {wrong_arity("ping"), s}
  def echo([message], s), do: {message, s}
  def quit(_args, s), do: {:close, {:simple, "OK"}, s}

  ## Connection

  def hello([], s), do: hello_reply(s)

  def hello([version | opts], s) do
    case Integer.parse(version) do
      {v, ""} when v in [2, 3] ->
        with {:ok, s} <- hello_options(opts, s) do
          hello_reply(%{s | proto: v})
        end

      {_v, ""} ->
        {Encoder.error("NOPROTO unsupported protocol version"), s}

      _ ->
        {Encoder.error("ERR Protocol version is not an integer or out of range"), s}
    end
  end

  defp hello_options([], s), do: {:ok, s}

  defp hello_options([opt | rest] = opts, s) do
    case {upcase(opt), rest} do
      {"AUTH", [user, token | rest]} ->
        case authenticate(user, token, s) do
          {:ok, s} -> hello_options(rest, s)
          {:error, reply} -> {reply, s}
        end

      {"SETNAME", [name | rest]} ->
        case client_name(name) do
          :ok -> hello_options(rest, %{s | name: name})
          error -> {error, s}
        end

      _ ->
        {Encoder.error(["ERR Syntax error in HELLO option '", hd(opts), "'"]), s}
    end
  end

  defp hello_reply(%{grants: nil} = s) do
    {Encoder.error(
       "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
     ), s}
  end

  defp hello_reply(s) do
    {{:map,
      [
        {"server", "ringbus"},
        {"version", redis_version()},
        {"proto", s.proto},
        {"id", ClientCommands.id(s)},
        {"mode", "standalone"},
        {"role", "master"},
        {"modules", []}
      ]}, s}
  end

  def auth([_token], %{config: %{tokens: nil}} = s) do
    {Encoder.error(
       "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
     ), s}
  end

  def auth([token], s), do: auth(["default", token], s)

  def auth([user, token], s) do
    case authenticate(user, token, s) do
      {:ok, s} -> {{:simple, "OK"}, s}
      {:error, reply} -> {reply, s}
    end
  end

  def auth(_args, s), do: {syntax_error(), s}

  # Without tokens the default user has no password, and Redis takes any.
  defp authenticate("default", _token, %{config: %{tokens: nil}} = s), do: {:ok, s}
  defp authenticate(_user, _token, %{config: %{tokens: nil}}), do: {:error, wrong_pass()}

  defp authenticate("default", token, s) do
    case Auth.authenticate(s.config.tokens, token) do
      {:ok, grants} -> {:ok, %{s | grants: grants}}
      :error -> {:error, wrong_pass()}
    end
  end

  defp authenticate(_user, _token, _s), do: {:error, wrong_pass()}

  defp wrong_pass,
    do: Encoder.error("WRONGPASS invalid username-password pair or user is disabled.")

  def select([db], s) do
    case Integer.parse(db) do
      {0, ""} -> {{:simple, "OK"}, s}
      {_, ""} -> {Encoder.error("ERR DB index is out of range"), s}
      _ -> {not_integer(), s}
    end
  end

  def client([sub | args], s), do: client(upcase(sub), sub, args, s)

  defp client("ID", _, [], s), do: {ClientCommands.id(s), s}
  defp client("LIST", _, args, s), do: ClientCommands.list(args, s)
  defp client("INFO", _, [], s), do: ClientCommands.info(s)
  defp client("KILL", _, [_ | _] = args, s), do: ClientCommands.kill(args, s)
  defp client("GETNAME", _, [], s), do: {s.name, s}

  defp client("SETNAME", _, [name], s) do
    case client_name(name) do
      :ok ->
        name = if name == "", do: nil, else: name
        :ok = ClientCommands.named(name)
        {{:simple, "OK"}, %{s | name: name}}

      error ->
        {error, s}
    end
  end

  # Newer clients announce their library; Redis 7.2 takes it, so do we.
  defp client("SETINFO", _, [_attr, _value], s), do: {{:simple, "OK"}, s}

  defp client(upper, _, _args, s)
       when upper in ["ID", "GETNAME", "SETNAME", "SETINFO", "INFO", "KILL"],
       do: {wrong_arity("client|" <> String.downcase(upper)), s}

  defp client(_upper, sub, _args, s), do: {unknown_subcommand(sub, "CLIENT"), s}

  defp client_name(name) do
    if Enum.all?(:binary.bin_to_list(name), &(&1 > 32 and &1 < 127)),
      do: :ok,
      else:
        Encoder.error("ERR Client names cannot contain spaces, newlines or special characters.")
  end

  ## Server

  # The Redis version whose commands this front end follows.
  defp redis_version, do: "7.0.0"

  @sections ["server", "clients", "memory", "stats", "cluster", "keyspace"]

  def info(args, s), do: {{:verbatim, info_text(args, s)}, s}

  defp info_text(args, s) do
    wanted = Enum.map(args, &String.downcase/1)

    sections =
      cond do
        wanted == [] or Enum.any?(wanted, &(&1 in ["all", "default", "everything"])) -> @sections
        true -> Enum.filter(@sections, &(&1 in wanted))
      end

    sections |> Enum.map(&info_section(&1, s)) |> Enum.join("\r\n")
  end

  defp info_section("server", _s) do
    lines([
      "# Server",
      "redis_version:#{redis_version()}",
      "ringbus_version:#{Application.spec(:ringbus, :vsn)}",
      "redis_mode:standalone",
      "os:#{:erlang.system_info(:system_architecture)}",
      "arch_bits:#{:erlang.system_info(:wordsize) * 8}",
      "process_id:#{System.pid()}",
      "uptime_in_seconds:#{div(:erlang.statistics(:wall_clock) |> elem(0), 1000)}"
    ])
  end

  defp info_section("clients", s) do
    lines([
      "# Clients",
      "connected_clients:#{Counters.get(s.context.stats, :connections)}",
      "blocked_clients:#{Counters.get(s.context.stats, :blocked_clients)}"
    ])
  end

  # The VM's memory, the payload bytes the streams hold, and their bound.
  defp info_section("memory", s) do
    total = :erlang.memory(:total)

    held =
      for name <- Ringbus.channels(),
          is_binary(name),
          {:ok, info} <- [Ringbus.info(name)],
          reduce: 0 do
        acc -> acc + info.bytes
      end

    lines([
      "# Memory",
      "used_memory:#{total}",
      "used_memory_human:#{Float.round(total / 1_048_576, 2)}M",
      "ringbus_stream_bytes:#{held}",
      "resp_stream_max_bytes:#{s.config.resp_stream_max_bytes}",
      "maxmemory:0",
      "maxmemory_policy:noeviction"
    ])
  end

  defp info_section("stats", s) do
    lines([
      "# Stats",
      "total_connections_received:#{Counters.get(s.context.stats, :connections_received)}",
      "total_commands_processed:#{Counters.get(s.context.stats, :commands_processed)}"
    ])
  end

  # Redis Cluster's slots are not Ringbus's cluster: clients see one server.
  defp info_section("cluster", _s), do: lines(["# Cluster", "cluster_enabled:0"])

  defp info_section("keyspace", _s) do
    case KeyCommands.count_streams() do
      0 -> lines(["# Keyspace"])
      n -> lines(["# Keyspace", "db0:keys=#{n},expires=0,avg_ttl=0"])
    end
  end

  defp lines(lines), do: Enum.map_join(lines, &(&1 <> "\r\n"))
end
