defmodule Ringbus.Resp.Session do
  @moduledoc false
  # The RESP protocol of one connection, as functions of data: the commands
  # of a read and the session in, the reply bytes and the new session out.
  # It runs commands against `Ringbus` (which may start subscriptions for
  # the calling process) but never touches a socket, a timer or the mailbox:
  # `Ringbus.Resp.Connection` does those.
  #
  #   handle(commands, session)            -> {status, out, session}
  #   deliver(session, sub, messages, lost) -> {status, out, session}
  #   closed(session, sub, reason)          -> {status, out, session}
  #   timeout(session, token)               -> {status, out, session}
  #
  # `out` is iodata, the replies in order. `status` is `:ok`; `{:block,
  # token, ms}` when a command waits (XREAD BLOCK): the commands after it are
  # kept here, and the next three functions end the wait, reply and run
  # them; or `{:close, reason}` after QUIT, whose reply ends `out`.
  #
  # Every command goes through one table (`Ringbus.Resp.Commands`): its handler, its
  # arity as Redis counts it, and the access its keys need (`:read`,
  # `:write`, or `:none` for no key), checked with the token's grants.
  #
  # Transactions. After MULTI, commands are checked and queued
  # (`Ringbus.Resp.Transaction`) until EXEC runs them in order, or DISCARD
  # drops them. EXEC is not isolated: other clients' commands may run
  # between the queued ones. A queued command that would block answers at
  # once, as in Redis.
  #
  # XADDs. Consecutive XADDs with `*` to one stream with the same options
  # within a read are stored with one push of all their payloads, and
  # answered in order, as the binary server stores a run of pushes.

  alias Ringbus.Resp.{Args, ClaimCommands, Commands, Encoder, Errors, GroupCommands, Groups}
  alias Ringbus.Resp.{KeyCommands, Keys, StreamAdmin, StreamCommands, Transaction}
  alias Ringbus.Server.{Auth, Config}

  import Args, only: [upcase: 1]
  import Keys, only: [allowed?: 3]

  import Errors,
    only: [
      no_permission: 0,
      wrong_arity: 1,
      syntax_error: 0,
      not_integer: 0,
      unknown_subcommand: 2
    ]

  @connections 1
  @connections_received 2
  @commands_processed 3
  @blocked_clients 4

  # Before AUTH, when tokens are required: what Redis lets through.
  @before_auth ["AUTH", "HELLO", "QUIT"]

  # After MULTI: what runs at once instead of being queued, as in Redis.
  @not_queued ["EXEC", "DISCARD", "MULTI", "WATCH", "QUIT"]

  @type context :: %{groups: Groups.table(), stats: :counters.counters_ref()}
  @type status :: :ok | {:block, reference(), timeout()} | {:close, atom()}

  defstruct [
    :config,
    :context,
    :id,
    proto: 2,
    grants: nil,
    name: nil,
    # While a command waits: what it waits for, and the commands after it.
    blocked: nil,
    queued: [],
    # After MULTI: the transaction's queue.
    multi: nil
  ]

  @type t :: %__MODULE__{config: Config.t()}

  @doc "What every connection of one RESP listener shares: its groups and counters."
  @spec context() :: context()
  def context, do: %{groups: Groups.new(), stats: :counters.new(4, [:write_concurrency])}

  @doc "A session for a new connection, counted as connected until `gone/1`."
  @spec new(Config.t(), context()) :: t()
  def new(%Config{} = config, context) do
    :counters.add(context.stats, @connections, 1)
    :counters.add(context.stats, @connections_received, 1)
    grants = if config.tokens == nil, do: Auth.all()
    id = :erlang.unique_integer([:positive, :monotonic])
    %__MODULE__{config: config, context: context, id: id, grants: grants}
  end

  @doc "The connection has ended."
  @spec gone(t()) :: :ok
  def gone(%__MODULE__{context: context}), do: :counters.sub(context.stats, @connections, 1)

  @doc "Whether the client may run commands (it has authenticated, or needs not)."
  @spec authenticated?(t()) :: boolean()
  def authenticated?(session), do: Keys.authenticated?(session)

  @doc "Whether a command waits."
  @spec blocked?(t()) :: boolean()
  def blocked?(%__MODULE__{blocked: blocked}), do: blocked != nil

  @doc "The reply that closes a connection on a protocol error, a timeout or a shutdown."
  @spec fatal(t(), binary() | :timeout | :shutting_down) :: iodata()
  def fatal(session, :timeout),
    do:
      encode(
        session,
        Encoder.error("ERR idle timeout: no command within the server's idle_timeout")
      )

  def fatal(session, :shutting_down),
    do: encode(session, Encoder.error("ERR the server is shutting down"))

  def fatal(session, message), do: encode(session, Encoder.error(["ERR ", message]))

  ## Commands

  @doc "Runs the commands of one read, in order."
  @spec handle([[binary()]], t()) :: {status(), iodata(), t()}
  def handle(commands, %__MODULE__{blocked: nil} = session) do
    run(commands, session, nil, [], 0)
  end

  # The commands after a waiting one wait with it.
  def handle(commands, session),
    do: {blocked_status(session), [], %{session | queued: session.queued ++ commands}}

  defp run([[name | args] = command | rest], s, batch, out, n) do
    case batchable(name, args, s) do
      {:ok, key, entry} when batch != nil and elem(batch, 0) == key ->
        run(rest, s, StreamCommands.add(batch, entry), out, n + 1)

      {:ok, key, entry} ->
        out = flush(s, batch, out)
        run(rest, s, StreamCommands.batch(key, entry), out, n + 1)

      :no ->
        out = flush(s, batch, out)

        case step(command, s) do
          {reply, s} ->
            run(rest, s, nil, [out | encode(s, reply)], n + 1)

          {:block, block, s} ->
            count(s, n + 1)
            :counters.add(s.context.stats, @blocked_clients, 1)
            token = make_ref()

            {{:block, token, block.timeout}, out,
             %{s | blocked: Map.put(block, :token, token), queued: rest}}

          {:close, reply, s} ->
            count(s, n + 1)
            {{:close, :quit}, [out | encode(s, reply)], s}
        end
    end
  end

  defp run([], s, batch, out, n) do
    count(s, n)
    {:ok, flush(s, batch, out), s}
  end

  defp batchable(name, args, %{multi: nil} = s), do: StreamCommands.batchable(name, args, s)
  defp batchable(_name, _args, _s), do: :no

  # In a transaction, a command is checked as Redis checks it, then queued;
  # a command that fails the check aborts the transaction.
  defp step(command, %{multi: nil} = s), do: execute(command, s)

  defp step([name | _] = command, s) do
    case check(command, s) do
      {:error, reply} ->
        if upcase(name) == "EXEC",
          # A refused EXEC ends the transaction, saying why.
          do: {exec_abort(reply), %{s | multi: nil}},
          else: {reply, %{s | multi: Transaction.abort(s.multi)}}

      {:ok, handler, args} ->
        if upcase(name) in @not_queued,
          do: guarded(fn -> dispatch(handler, args, s) end, s),
          else: enqueue(command, s)
    end
  end

  defp exec_abort({:error, text}) do
    why = String.replace_prefix(text, "ERR ", "")
    Encoder.error(["EXECABORT Transaction discarded because of: ", why])
  end

  defp enqueue(command, s) do
    case Transaction.add(s.multi, command, s.config.max_frame_size) do
      {:ok, t} ->
        {{:simple, "QUEUED"}, %{s | multi: t}}

      {:error, _bound, t} ->
        {Encoder.error([
           "ERR a transaction queues at most #{Transaction.max_commands()} commands ",
           "and max_frame_size (#{s.config.max_frame_size}) bytes: this one is discarded"
         ]), %{s | multi: t}}
    end
  end

  defp flush(_s, nil, out), do: out

  defp flush(s, batch, out) do
    Enum.reduce(StreamCommands.store(batch, s), out, fn reply, out -> [out | encode(s, reply)] end)
  end

  defp count(_s, 0), do: :ok
  defp count(s, n), do: :counters.add(s.context.stats, @commands_processed, n)

  defp encode(s, reply), do: Encoder.encode(reply, s.proto)

  defp execute(command, s) do
    case check(command, s) do
      {:ok, handler, args} -> guarded(fn -> dispatch(handler, args, s) end, s)
      {:error, reply} -> {reply, s}
    end
  end

  # What Redis checks before it runs or queues a command.
  defp check([name | args], s) do
    case Commands.lookup(name) do
      {:ok, upper, {handler, arity, access, keys}} ->
        cond do
          not arity?(arity, args) ->
            {:error,
             Encoder.error([
               "ERR wrong number of arguments for '",
               String.downcase(upper),
               "' command"
             ])}

          s.grants == nil and upper not in @before_auth ->
            {:error, Encoder.error("NOAUTH Authentication required.")}

          not keys_allowed?(s, access, keys, args) ->
            {:error, no_permission()}

          true ->
            {:ok, handler, args}
        end

      :error ->
        {:error, unknown_command(name, args)}
    end
  end

  # A channel error deep in a command's helpers ends the command with its reply.
  defp guarded(fun, s) do
    fun.()
  catch
    :throw, {Errors, reply} -> {reply, s}
  end

  defp arity?(arity, args) when arity > 0, do: length_is?(args, arity - 1)
  defp arity?(arity, args), do: length_at_least?(args, -arity - 1)

  defp length_is?([], 0), do: true
  defp length_is?([_ | rest], n) when n > 0, do: length_is?(rest, n - 1)
  defp length_is?(_, _), do: false

  defp length_at_least?(_, 0), do: true
  defp length_at_least?([_ | rest], n), do: length_at_least?(rest, n - 1)
  defp length_at_least?([], _), do: false

  defp keys_allowed?(_s, :none, _keys, _args), do: true
  defp keys_allowed?(_s, _access, :own, _args), do: true
  defp keys_allowed?(s, access, :first, [key | _]), do: allowed?(s, access, key)
  defp keys_allowed?(s, access, :all, keys), do: Enum.all?(keys, &allowed?(s, access, &1))

  # Redis 7.0's text: the name and the first arguments, quoted, within 128 bytes.
  defp unknown_command(name, args) do
    listed =
      Enum.reduce_while(args, "", fn arg, acc ->
        if byte_size(acc) < 128,
          do:
            {:cont,
             acc <> "'" <> binary_part(arg, 0, min(byte_size(arg), 128 - byte_size(acc))) <> "' "},
          else: {:halt, acc}
      end)

    name = binary_part(name, 0, min(byte_size(name), 128))
    Encoder.error(["ERR unknown command '", name, "', with args beginning with: ", listed])
  end

  ## Dispatch

  defp dispatch(:ping, [], s), do: {{:simple, "PONG"}, s}
  defp dispatch(:ping, [message], s), do: {message, s}
  defp dispatch(:ping, _args, s), do: {wrong_arity("ping"), s}
  defp dispatch(:echo, [message], s), do: {message, s}
  defp dispatch(:quit, _args, s), do: {:close, {:simple, "OK"}, s}
  defp dispatch(:hello, args, s), do: hello(args, s)
  defp dispatch(:auth, args, s), do: auth(args, s)
  defp dispatch(:select, [db], s), do: select(db, s)
  defp dispatch(:client, [sub | args], s), do: client(upcase(sub), sub, args, s)
  defp dispatch(:command, args, s), do: command(args, s)
  defp dispatch(:config, [sub | args], s), do: config(upcase(sub), sub, args, s)
  defp dispatch(:info, args, s), do: {{:verbatim, info(args, s)}, s}
  defp dispatch(:dbsize, [], s), do: {count_streams(), s}
  defp dispatch(:exists, keys, s), do: {Enum.count(keys, &stream?/1), s}
  defp dispatch(:type, [key], s), do: {{:simple, if(stream?(key), do: "stream", else: "none")}, s}
  defp dispatch(:del, keys, s), do: {Enum.count(keys, &delete(&1, s)), s}
  defp dispatch(:multi, [], s), do: multi(s)
  defp dispatch(:exec, [], s), do: exec(s)
  defp dispatch(:discard, [], s), do: discard(s)
  defp dispatch(:watch, _keys, s), do: watch(s)
  # Nothing is ever watched, so there is nothing to forget.
  defp dispatch(:unwatch, [], s), do: {{:simple, "OK"}, s}

  defp dispatch(handler, args, s)
       when handler in [:xgroup, :xreadgroup, :xack],
       do: apply(GroupCommands, handler, [args, s])

  defp dispatch(handler, args, s) when handler in [:keys, :scan, :flushdb, :flushall],
    do: apply(KeyCommands, handler, [args, s])

  defp dispatch(handler, args, s) when handler in [:xclaim, :xpending, :xautoclaim],
    do: apply(ClaimCommands, handler, [args, s])

  defp dispatch(:xsetid, args, s), do: StreamAdmin.xsetid(args, s)
  defp dispatch(:xinfo, args, s), do: StreamAdmin.xinfo(args, s)

  defp dispatch(handler, args, s), do: apply(StreamCommands, handler, [args, s])

  defp stream?(key),
    do: is_binary(key) and match?({:ok, _}, Errors.check!(Ringbus.info(key), key))

  defp delete(key, s) do
    case Ringbus.delete(key) do
      :ok ->
        Groups.drop_stream(s.context.groups, key)
        true

      {:error, :no_channel} ->
        Groups.drop_stream(s.context.groups, key)
        false

      {:error, reason} ->
        Errors.fail!(reason, key)
    end
  end

  defp count_streams, do: Enum.count(Ringbus.channels(), &is_binary/1)

  ## Transactions

  defp multi(%{multi: nil} = s), do: {{:simple, "OK"}, %{s | multi: Transaction.new()}}
  defp multi(s), do: {Encoder.error("ERR MULTI calls can not be nested"), s}

  defp exec(%{multi: nil} = s), do: {Encoder.error("ERR EXEC without MULTI"), s}

  defp exec(%{multi: %Transaction{aborted: true}} = s) do
    {Encoder.error("EXECABORT Transaction discarded because of previous errors."),
     %{s | multi: nil}}
  end

  defp exec(%{multi: t} = s) do
    {replies, s} =
      Enum.reduce(Transaction.commands(t), {[], %{s | multi: nil}}, fn command, {acc, s} ->
        {reply, s} = exec_one(command, s)
        {[reply | acc], s}
      end)

    count(s, t.count)
    {:lists.reverse(replies), s}
  end

  # A command that would wait answers as its wait's timeout would, at once.
  defp exec_one(command, s) do
    case execute(command, s) do
      {:block, block, s} ->
        Enum.each(Map.keys(block.subs), &Ringbus.unsubscribe/1)
        {:null_array, s}

      {reply, s} ->
        {reply, s}
    end
  end

  defp discard(%{multi: nil} = s), do: {Encoder.error("ERR DISCARD without MULTI"), s}
  defp discard(s), do: {{:simple, "OK"}, %{s | multi: nil}}

  defp watch(%{multi: nil} = s) do
    {Encoder.error(
       "ERR WATCH is not supported by Ringbus: EXEC runs its commands in order, not isolated from other clients'"
     ), s}
  end

  defp watch(s), do: {Encoder.error("ERR WATCH inside MULTI is not allowed"), s}

  ## Connection

  defp hello([], s), do: hello_reply(s)

  defp hello([version | opts], s) do
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
        {"id", s.id},
        {"mode", "standalone"},
        {"role", "master"},
        {"modules", []}
      ]}, s}
  end

  defp auth([_token], %{config: %{tokens: nil}} = s) do
    {Encoder.error(
       "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
     ), s}
  end

  defp auth([token], s), do: auth(["default", token], s)

  defp auth([user, token], s) do
    case authenticate(user, token, s) do
      {:ok, s} -> {{:simple, "OK"}, s}
      {:error, reply} -> {reply, s}
    end
  end

  defp auth(_args, s), do: {syntax_error(), s}

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

  defp select(db, s) do
    case Integer.parse(db) do
      {0, ""} -> {{:simple, "OK"}, s}
      {_, ""} -> {Encoder.error("ERR DB index is out of range"), s}
      _ -> {not_integer(), s}
    end
  end

  defp client("ID", _, [], s), do: {s.id, s}
  defp client("GETNAME", _, [], s), do: {s.name, s}

  defp client("SETNAME", _, [name], s) do
    case client_name(name) do
      :ok -> {{:simple, "OK"}, %{s | name: if(name == "", do: nil, else: name)}}
      error -> {error, s}
    end
  end

  # Newer clients announce their library; Redis 7.2 takes it, so do we.
  defp client("SETINFO", _, [_attr, _value], s), do: {{:simple, "OK"}, s}

  defp client(upper, _, _args, s) when upper in ["ID", "GETNAME", "SETNAME", "SETINFO"],
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

  defp command([], s), do: {Enum.map(Commands.names(), &command_info/1), s}

  defp command([sub | args], s) do
    case {upcase(sub), args} do
      {"COUNT", []} ->
        {Commands.count(), s}

      {"INFO", names} ->
        {Enum.map(names, &command_info(upcase(&1))), s}

      {"DOCS", []} ->
        {{:map, Enum.map(Commands.names(), &command_docs/1)}, s}

      {"DOCS", names} ->
        {{:map,
          for(n <- names, u = upcase(n), Commands.lookup(u) != :error, do: command_docs(u))}, s}

      _ ->
        {unknown_subcommand(sub, "COMMAND"), s}
    end
  end

  defp command_info(name) do
    case Commands.lookup(name) do
      {:ok, upper, {_, arity, _access, _keys}} ->
        {flags, first, last, step} = Commands.redis_info(upper)
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

  defp config("GET", _, [], s), do: {wrong_arity("config|get"), s}

  defp config("GET", _, patterns, s) do
    params = config_params(s.config)
    pairs = for {key, value} <- params, Enum.any?(patterns, &glob?(&1, key)), do: {key, value}
    {{:map, pairs}, s}
  end

  defp config(upper, sub, _args, s) when upper in ["SET", "RESETSTAT", "REWRITE"],
    do:
      {Encoder.error([
         "ERR Ringbus does not change its configuration over RESP (CONFIG ",
         sub,
         ")"
       ]), s}

  defp config(_upper, sub, _args, s), do: {unknown_subcommand(sub, "CONFIG"), s}

  defp config_params(config) do
    idle = if config.idle_timeout == :infinity, do: 0, else: div(config.idle_timeout, 1000)

    [
      {"appendonly", "no"},
      {"databases", "1"},
      {"maxclients", Integer.to_string(config.max_connections)},
      {"proto-max-bulk-len", Integer.to_string(config.max_frame_size)},
      {"save", ""},
      {"timeout", Integer.to_string(idle)}
    ]
  end

  defp glob?(pattern, key), do: Regex.match?(glob_regex(String.downcase(pattern)), key)

  defp glob_regex(pattern) do
    body =
      pattern
      |> String.graphemes()
      |> Enum.map_join(fn
        "*" -> ".*"
        "?" -> "."
        char -> Regex.escape(char)
      end)

    Regex.compile!("\\A" <> body <> "\\z", "s")
  end

  @sections ["server", "clients", "memory", "stats", "keyspace"]

  defp info(args, s) do
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
      "process_id:#{System.pid()}",
      "uptime_in_seconds:#{div(:erlang.statistics(:wall_clock) |> elem(0), 1000)}"
    ])
  end

  defp info_section("clients", s) do
    lines([
      "# Clients",
      "connected_clients:#{:counters.get(s.context.stats, @connections)}",
      "blocked_clients:#{:counters.get(s.context.stats, @blocked_clients)}"
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
      "total_connections_received:#{:counters.get(s.context.stats, @connections_received)}",
      "total_commands_processed:#{:counters.get(s.context.stats, @commands_processed)}"
    ])
  end

  defp info_section("keyspace", _s) do
    case count_streams() do
      0 -> lines(["# Keyspace"])
      n -> lines(["# Keyspace", "db0:keys=#{n},expires=0,avg_ttl=0"])
    end
  end

  defp lines(lines), do: Enum.map_join(lines, &(&1 <> "\r\n"))

  ## Waiting commands

  @doc """
  A batch from a subscription: ends the wait it belongs to if it answers the
  waiting command, then runs the commands queued behind it.
  """
  @spec deliver(t(), term(), [{Ringbus.seq(), binary()}], non_neg_integer()) ::
          {status(), iodata(), t()}
  def deliver(%__MODULE__{blocked: %{subs: subs} = block} = s, sub, messages, lost)
      when is_map_key(subs, sub) do
    case guarded(fn -> block.module.woken(block, sub, messages, lost, s) end, s) do
      {{:error, _} = reply, s} -> resume(s, reply)
      {:reply, reply, s} -> resume(s, reply)
      {:wait, block} -> {blocked_status(s), [], %{s | blocked: block}}
    end
  end

  # A batch for a wait that has ended: dropped, the wait was answered.
  def deliver(s, _sub, _messages, _lost), do: {status(s), [], s}

  @doc "A subscription of the waiting command has ended (its stream was deleted)."
  @spec closed(t(), term(), term()) :: {status(), iodata(), t()}
  def closed(%__MODULE__{blocked: %{subs: subs} = block} = s, sub, _reason)
      when is_map_key(subs, sub) do
    block = %{block | subs: Map.delete(subs, sub)}

    if map_size(block.subs) == 0,
      do: resume(%{s | blocked: block}, :null_array),
      else: {blocked_status(s), [], %{s | blocked: block}}
  end

  def closed(s, _sub, _reason), do: {status(s), [], s}

  @doc "The waiting command's time is up: it gets the null reply, as in Redis."
  @spec timeout(t(), reference()) :: {status(), iodata(), t()}
  def timeout(%__MODULE__{blocked: %{token: token}} = s, token), do: resume(s, :null_array)
  def timeout(s, _token), do: {status(s), [], s}

  @doc "Ends a wait without a reply, when the connection closes."
  @spec cancel(t()) :: t()
  def cancel(%__MODULE__{blocked: nil} = s), do: s

  def cancel(s) do
    :counters.sub(s.context.stats, @blocked_clients, 1)
    Enum.each(Map.keys(s.blocked.subs), &Ringbus.unsubscribe/1)
    %{s | blocked: nil, queued: []}
  end

  defp resume(s, reply) do
    queued = s.queued
    s = cancel(s)
    {status, out, s} = handle(queued, s)
    {status, [encode(s, reply) | out], s}
  end

  defp status(%__MODULE__{blocked: nil}), do: :ok
  defp status(s), do: blocked_status(s)

  defp blocked_status(%__MODULE__{blocked: block}), do: {:block, block.token, block.timeout}
end
