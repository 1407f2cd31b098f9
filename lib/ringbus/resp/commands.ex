defmodule Ringbus.Resp.Commands do
  @moduledoc false
  # The command table of the RESP front end: every command's handler, arity,
  # access and keys, and what Redis's COMMAND INFO says of it. The session
  # (`Ringbus.Resp.Session`) dispatches through the table; what the handlers
  # share is below them (`Ringbus.Resp.Args`, `Ringbus.Resp.Keys`,
  # `Ringbus.Resp.Errors`), so that nothing calls back up into the table.

  # name => {handler, arity, access, keys}; arity as Redis's: n exactly,
  # -n at least n. keys: :first (the argument after the name), :all (every
  # argument) or :own (the handler checks them, with the access given here
  # as an attribute of its own). access: what the token
  # needs on the keys; a command Redis flags `write` needs :write (or
  # :manage), as the binary protocol's PULL does (see @redis_info).
  @commands %{
    "PING" => {:ping, -1, :none, :none},
    "ECHO" => {:echo, 2, :none, :none},
    "HELLO" => {:hello, -1, :none, :none},
    "AUTH" => {:auth, -2, :none, :none},
    "SELECT" => {:select, 2, :none, :none},
    "CLIENT" => {:client, -2, :none, :none},
    "QUIT" => {:quit, -1, :none, :none},
    "MULTI" => {:multi, 1, :none, :none},
    "EXEC" => {:exec, 1, :none, :none},
    "DISCARD" => {:discard, 1, :none, :none},
    "WATCH" => {:watch, -2, :none, :none},
    "UNWATCH" => {:unwatch, 1, :none, :none},
    "COMMAND" => {:command, -1, :none, :none},
    "CONFIG" => {:config, -2, :none, :none},
    "INFO" => {:info, -1, :none, :none},
    "DBSIZE" => {:dbsize, 1, :none, :none},
    "EXISTS" => {:exists, -2, :read, :all},
    "TYPE" => {:type, 2, :read, :first},
    "DEL" => {:del, -2, :manage, :all},
    "UNLINK" => {:del, -2, :manage, :all},
    "KEYS" => {:keys, 2, :none, :none},
    "SCAN" => {:scan, -2, :none, :none},
    "FLUSHDB" => {:flushdb, -1, :manage, :own},
    "FLUSHALL" => {:flushall, -1, :manage, :own},
    "XADD" => {:xadd, -5, :write, :first},
    "XREAD" => {:xread, -4, :read, :own},
    "XRANGE" => {:xrange, -4, :read, :first},
    "XREVRANGE" => {:xrevrange, -4, :read, :first},
    "XLEN" => {:xlen, 2, :read, :first},
    "XTRIM" => {:xtrim, -4, :write, :first},
    "XDEL" => {:xdel, -3, :write, :first},
    "XINFO" => {:xinfo, -2, :read, :own},
    "XGROUP" => {:xgroup, -2, :write, :own},
    "XREADGROUP" => {:xreadgroup, -7, :write, :own},
    "XACK" => {:xack, -4, :write, :first},
    "XPENDING" => {:xpending, -3, :read, :first},
    "XAUTOCLAIM" => {:xautoclaim, -6, :write, :first},
    "XCLAIM" => {:xclaim, -6, :write, :first},
    "XSETID" => {:xsetid, -3, :write, :first}
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

  @doc "The command's table entry: `{handler, arity, access, keys}`, under its upper-case name."
  @spec lookup(binary()) :: {:ok, binary(), tuple()} | :error
  def lookup(name) do
    case @commands do
      %{^name => entry} ->
        {:ok, name, entry}

      _ ->
        upper = Ringbus.Resp.Args.upcase(name)
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
end
