defmodule Ringbus.Resp.ConfigCommands do
  @moduledoc false
  # CONFIG GET, SET and RESETSTAT, and FUNCTION, for `Ringbus.Resp.Session`.
  # The server's own settings are read-only over RESP. Redis's stream tuning
  # parameters (the size of its radix tree's nodes) are taken and kept, per
  # listener, so that a client or test suite that sets and restores them
  # works; a ring has no such nodes, so they change nothing.

  alias Ringbus.Resp.{Counters, Encoder, KeyCommands}
  alias Ringbus.Server.Auth

  import Ringbus.Resp.Args, only: [upcase: 1]
  import Ringbus.Resp.Errors, only: [wrong_arity: 1, unknown_subcommand: 2, no_permission: 0]

  # name => {counter, kind}: Redis 7.0's stream tuning parameters.
  @stream_params %{
    "stream-node-max-entries" => {:stream_node_max_entries, :integer},
    "stream-node-max-bytes" => {:stream_node_max_bytes, :memory}
  }

  @long_max 9_223_372_036_854_775_807

  # SET and RESETSTAT change what every client of the listener sees, so,
  # as CLIENT KILL, they need a token with every grant.
  def config([sub | args], s) do
    upper = upcase(sub)

    if upper in ["SET", "RESETSTAT"] and s.grants != Auth.all(),
      do: {no_permission(), s},
      else: config(upper, sub, args, s)
  end

  defp config("GET", _, [], s), do: {wrong_arity("config|get"), s}

  defp config("GET", _, patterns, s) do
    patterns = Enum.map(patterns, &String.downcase/1)

    pairs =
      for {key, value} <- params(s),
          Enum.any?(patterns, &KeyCommands.glob?(&1, key)),
          do: {key, value}

    {{:map, pairs}, s}
  end

  defp config("SET", _, args, s) do
    with {:ok, pairs} <- pairs(args, []),
         {:ok, settings} <- parse_settings(pairs, []) do
      for {counter, value} <- settings, do: Counters.put(s.context.stats, counter, value)
      {{:simple, "OK"}, s}
    else
      {:error, reply} -> {reply, s}
    end
  end

  defp config("RESETSTAT", _, [], s) do
    :ok = Counters.reset_stats(s.context.stats)
    {{:simple, "OK"}, s}
  end

  defp config("RESETSTAT", _, _args, s), do: {wrong_arity("config|resetstat"), s}

  defp config("REWRITE", sub, _args, s),
    do:
      {Encoder.error([
         "ERR Ringbus does not change its configuration over RESP (CONFIG ",
         sub,
         ")"
       ]), s}

  defp config(_upper, sub, _args, s), do: {unknown_subcommand(sub, "CONFIG"), s}

  defp pairs([key, value | rest], acc), do: pairs(rest, [{String.downcase(key), value} | acc])
  defp pairs([], [_ | _] = acc), do: {:ok, Enum.reverse(acc)}
  defp pairs(_args, _acc), do: {:error, wrong_arity("config|set")}

  # All or nothing, as Redis: every pair is checked before any is kept.
  defp parse_settings([], acc), do: {:ok, Enum.reverse(acc)}

  defp parse_settings([{key, value} | rest], acc) do
    cond do
      List.keymember?(rest, key, 0) ->
        {:error, set_failed(key, "duplicate parameter")}

      Map.has_key?(@stream_params, key) ->
        {counter, kind} = @stream_params[key]

        case parse_value(kind, value) do
          {:ok, n} -> parse_settings(rest, [{counter, n} | acc])
          {:error, why} -> {:error, set_failed(key, why)}
        end

      true ->
        {:error,
         Encoder.error([
           "ERR Ringbus does not change its configuration over RESP (CONFIG SET ",
           key,
           ")"
         ])}
    end
  end

  defp parse_value(:integer, value) do
    case Integer.parse(value) do
      {n, ""} when n in 0..@long_max -> {:ok, n}
      {_n, ""} -> {:error, "argument must be between 0 and #{@long_max} inclusive"}
      _ -> {:error, "argument couldn't be parsed into an integer"}
    end
  end

  defp parse_value(:memory, value) do
    with {n, unit} when n >= 0 <- Integer.parse(value),
         {:ok, scale} <- memory_unit(String.downcase(unit)),
         bytes when bytes <= @long_max <- n * scale do
      {:ok, bytes}
    else
      _ -> {:error, "argument must be a memory value"}
    end
  end

  # Redis's memory units: k, m and g are powers of 1000, kb, mb and gb of 1024.
  defp memory_unit(""), do: {:ok, 1}
  defp memory_unit("b"), do: {:ok, 1}
  defp memory_unit("k"), do: {:ok, 1000}
  defp memory_unit("kb"), do: {:ok, 1024}
  defp memory_unit("m"), do: {:ok, 1000 * 1000}
  defp memory_unit("mb"), do: {:ok, 1024 * 1024}
  defp memory_unit("g"), do: {:ok, 1000 * 1000 * 1000}
  defp memory_unit("gb"), do: {:ok, 1024 * 1024 * 1024}
  defp memory_unit(_), do: :error

  defp set_failed(key, why),
    do:
      Encoder.error(["ERR CONFIG SET failed (possibly related to argument '", key, "') - ", why])

  defp params(s) do
    config = s.config
    idle = if config.idle_timeout == :infinity, do: 0, else: div(config.idle_timeout, 1000)

    stream =
      for {key, {counter, _kind}} <- @stream_params,
          do: {key, Integer.to_string(Counters.get(s.context.stats, counter))}

    [
      {"appendonly", "no"},
      {"databases", "1"},
      {"maxclients", Integer.to_string(config.max_connections)},
      {"proto-max-bulk-len", Integer.to_string(config.max_frame_size)},
      {"save", ""},
      {"timeout", Integer.to_string(idle)}
    ] ++ Enum.sort(stream)
  end

  ## FUNCTION

  # Ringbus runs no functions: there are none to list or flush.
  def function([sub | args], s), do: function(upcase(sub), sub, args, s)

  defp function("FLUSH", _, [], s), do: {{:simple, "OK"}, s}

  defp function("FLUSH", _, [mode], s) do
    if upcase(mode) in ["SYNC", "ASYNC"],
      do: {{:simple, "OK"}, s},
      else: {Encoder.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"), s}
  end

  defp function("FLUSH", sub, _args, s),
    do:
      {Encoder.error([
         "ERR unknown subcommand or wrong number of arguments for '",
         sub,
         "'. Try FUNCTION HELP."
       ]), s}

  defp function("LIST", _, _args, s), do: {[], s}

  defp function(upper, sub, _args, s)
       when upper in ["LOAD", "DELETE", "DUMP", "RESTORE", "KILL", "STATS"],
       do: {Encoder.error(["ERR Ringbus runs no functions (FUNCTION ", sub, ")"]), s}

  defp function(_upper, sub, _args, s), do: {unknown_subcommand(sub, "FUNCTION"), s}
end
