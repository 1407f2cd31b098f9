defmodule Ringbus.Resp.Commands do
  @moduledoc false
  # The command table of the RESP front end: every command's handler, arity,
  # access and keys, and what Redis's COMMAND INFO says of it. The session
  # (`Ringbus.Resp.Session`) dispatches through the table, which names each
  # command's handler; what the handlers share is below them (`Ringbus.Resp.Args`, `Ringbus.Resp.Keys`,
  # `Ringbus.Resp.Errors`), so that nothing calls back up into the table.

  alias Ringbus.Resp.{
    ClaimCommands,
    ConfigCommands,
    Errors,
    GroupCommands,
    KeyCommands,
    ServerCommands
  }

  alias Ringbus.Resp.{StreamAdmin, StreamCommands, Transaction}

  import Ringbus.Resp.Args, only: [upcase: 1]

  # name => {{module, function}, arity, access, keys}: the session runs a
  # command as `apply(module, function, [args, session])`. arity as Redis's: n exactly,
  # -n at least n. keys: :first (the argument after the name), :all (every
  # argument) or :own (the handler checks them, with the access given here
  # as an attribute of its own). access: what the token
  # needs on the keys; a command Redis flags `write` needs :write (or
  # :manage), as the binary protocol's PULL does (see @redis_info).
  @commands %{
    "PING" => {{ServerCommands, :ping}, -1, :none, :none},
    "ECHO" => {{ServerCommands, :echo}, 2, :none, :none},
    "HELLO" => {{ServerCommands, :hello}, -1, :none, :none},
    "AUTH" => {{ServerCommands, :auth}, -2, :none, :none},
    "SELECT" => {{ServerCommands, :select}, 2, :none, :none},
    "CLIENT" => {{ServerCommands, :client}, -2, :none, :none},
    "QUIT" => {{ServerCommands, :quit}, -1, :none, :none},
    "MULTI" => {{Transaction, :multi}, 1, :none, :none},
    "EXEC" => {{Transaction, :exec}, 1, :none, :none},
    "DISCARD" => {{Transaction, :discard}, 1, :none, :none},
    "WATCH" => {{Transaction, :watch}, -2, :none, :none},
    "UNWATCH" => {{Transaction, :unwatch}, 1, :none, :none},
    "COMMAND" => {{__MODULE__, :command}, -1, :none, :none},
    "CONFIG" => {{ConfigCommands, :config}, -2, :none, :none},
    "FUNCTION" => {{ConfigCommands, :function}, -2, :none, :none},
    "INFO" => {{ServerCommands, :info}, -1, :none, :none},
    "DBSIZE" => {{KeyCommands, :dbsize}, 1, :none, :none},
    "EXISTS" => {{KeyCommands, :exists}, -2, :read, :all},
    "TYPE" => {{KeyCommands, :type}, 2, :read, :first},
    "DEL" => {{KeyCommands, :del}, -2, :manage, :all},
    "UNLINK" => {{KeyCommands, :del}, -2, :manage, :all},
    "KEYS" => {{KeyCommands, :keys}, 2, :none, :none},
    "SCAN" => {{KeyCommands, :scan}, -2, :none, :none},
    "FLUSHDB" => {{KeyCommands, :flushdb}, -1, :manage, :own},
    "FLUSHALL" => {{KeyCommands, :flushall}, -1, :manage, :own},
    "XADD" => {{StreamCommands, :xadd}, -5, :write, :first},
    "XREAD" => {{StreamCommands, :xread}, -4, :read, :own},
    "XRANGE" => {{StreamCommands, :xrange}, -4, :read, :first},
    "XREVRANGE" => {{StreamCommands, :xrevrange}, -4, :read, :first},
    "XLEN" => {{StreamCommands, :xlen}, 2, :read, :first},
    "XTRIM" => {{StreamCommands, :xtrim}, -4, :write, :first},
    "XDEL" => {{StreamCommands, :xdel}, -3, :write, :first},
    "XINFO" => {{StreamAdmin, :xinfo}, -2, :read, :own},
    "XGROUP" => {{GroupCommands, :xgroup}, -2, :write, :own},
    "XREADGROUP" => {{GroupCommands, :xreadgroup}, -7, :write, :own},
    "XACK" => {{GroupCommands, :xack}, -4, :write, :first},
    "XPENDING" => {{ClaimCommands, :xpending}, -3, :read, :first},
    "XAUTOCLAIM" => {{ClaimCommands, :xautoclaim}, -6, :write, :first},
    "XCLAIM" => {{ClaimCommands, :xclaim}, -6, :write, :first},
    "XSETID" => {{StreamAdmin, :xsetid}, -3, :write, :first}
  }

  # What Redis 7.0's COMMAND INFO says of each command: its flags, and its
  # first key, last key and step (0s: keys found by the command, or none).
  # Every command of @commands has a row; a row may come before its command.
  @redis_info %{
    "PING" => {~w(fast), 0, 0, 0},
    "ECHO" => {~w(loading stale fast), 0, 0, 0},
    "HELLO" => {~w(noscript loading stale fast no_auth allow_busy), 0, 0, 0},
    "AUTH" => {~w(noscript loading stale fast no_auth allow_busy), 0, 0, 0},
    "SELECT" => {~w(loading stale fast), 0, 0, 0},
    "CLIENT" => {[], 0, 0, 0},
    "QUIT" => {~w(noscript loading stale fast no_auth allow_busy), 0, 0, 0},
    "COMMAND" => {~w(loading stale), 0, 0, 0},
    "CONFIG" => {[], 0, 0, 0},
    "FUNCTION" => {[], 0, 0, 0},
    "INFO" => {~w(loading stale), 0, 0, 0},
    "DBSIZE" => {~w(readonly fast), 0, 0, 0},
    "KEYS" => {~w(readonly), 0, 0, 0},
    "SCAN" => {~w(readonly), 0, 0, 0},
    "FLUSHDB" => {~w(write), 0, 0, 0},
    "FLUSHALL" => {~w(write), 0, 0, 0},
    "UNLINK" => {~w(write fast), 1, -1, 1},
    "EXISTS" => {~w(readonly fast), 1, -1, 1},
    "TYPE" => {~w(readonly fast), 1, 1, 1},
    "DEL" => {~w(write), 1, -1, 1},
    "XADD" => {~w(write denyoom fast), 1, 1, 1},
    "XREAD" => {~w(readonly blocking movablekeys), 0, 0, 0},
    "XRANGE" => {~w(readonly), 1, 1, 1},
    "XREVRANGE" => {~w(readonly), 1, 1, 1},
    "XLEN" => {~w(readonly fast), 1, 1, 1},
    "XTRIM" => {~w(write), 1, 1, 1},
    "XDEL" => {~w(write fast), 1, 1, 1},
    "XINFO" => {[], 0, 0, 0},
    "XGROUP" => {[], 0, 0, 0},
    "XSETID" => {~w(write denyoom fast), 1, 1, 1},
    "XREADGROUP" => {~w(write blocking movablekeys), 0, 0, 0},
    "XACK" => {~w(write fast), 1, 1, 1},
    "XPENDING" => {~w(readonly), 1, 1, 1},
    "XCLAIM" => {~w(write fast), 1, 1, 1},
    "XAUTOCLAIM" => {~w(write fast), 1, 1, 1},
    "MULTI" => {~w(noscript loading stale fast allow_busy), 0, 0, 0},
    "EXEC" => {~w(noscript loading stale skip_slowlog), 0, 0, 0},
    "DISCARD" => {~w(noscript loading stale fast allow_busy), 0, 0, 0},
    "WATCH" => {~w(noscript loading stale fast allow_busy), 1, -1, 1},
    "UNWATCH" => {~w(noscript loading stale fast allow_busy), 0, 0, 0}
  }

  @doc "The command's table entry: `{{module, function}, arity, access, keys}`, under its upper-case name."
  @spec lookup(binary()) :: {:ok, binary(), tuple()} | :error
  def lookup(name) do
    case @commands do
      %{^name => entry} ->
        {:ok, name, entry}

      _ ->
        upper = upcase(name)
        if is_map_key(@commands, upper), do: {:ok, upper, @commands[upper]}, else: :error
    end
  end

  @doc """
  What Redis's COMMAND INFO says of a command: `{flags, first_key,
  last_key, step}`, or nil for a command Redis does not have.
  """
  @spec redis_info(binary()) :: {[binary()], integer(), integer(), integer()} | nil
  def redis_info(name), do: Map.get(@redis_info, name)

  @doc "Every command's name."
  @spec names() :: [binary()]
  def names, do: @commands |> Map.keys() |> Enum.sort()

  @doc "How many commands there are."
  @spec count() :: pos_integer()
  def count, do: map_size(@commands)

  ## COMMAND

  @doc "COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS: the table, as Redis words it."
  def command([], s), do: {Enum.map(names(), &command_info/1), s}

  def command([sub | args], s) do
    case {upcase(sub), args} do
      {"COUNT", []} ->
        {count(), s}

      {"INFO", names} ->
        {Enum.map(names, &command_info(upcase(&1))), s}

      {"DOCS", []} ->
        {{:map, Enum.map(names(), &command_docs/1)}, s}

      {"DOCS", names} ->
        {{:map, for(n <- names, u = upcase(n), lookup(u) != :error, do: command_docs(u))}, s}

      _ ->
        {Errors.unknown_subcommand(sub, "COMMAND"), s}
    end
  end

  defp command_info(name) do
    case lookup(name) do
      {:ok, upper, {_, arity, _access, _keys}} ->
        {flags, first, last, step} = redis_info(upper)
        flags = {:set, Enum.map(flags, &{:simple, &1})}
        [String.downcase(upper), arity, flags, first, last, step, [], [], [], []]

      _ ->
        nil
    end
  end

  defp command_docs(name) do
    group = if String.starts_with?(name, "X"), do: "stream", else: "connection"

    {String.downcase(name),
     {:map, [{"summary", "See docs/RESP.md"}, {"since", "1.0.0"}, {"group", group}]}}
  end
end
