defmodule Ringbus.Resp.Session do
  @moduledoc false
  # The RESP protocol of one connection, as functions of data: the commands
  # of a read and the session in, the reply bytes and the new session out.
  # It runs commands against `Ringbus` (which may start subscriptions for
  # the calling process) but never touches a socket, a timer or the mailbox:
  # `Ringbus.Resp.Protocol` and the one `Ringbus.Server.Connection` do those.
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
  # Every command goes through one table (`Ringbus.Resp.Commands`): its
  # handler `{module, function}`, run as `apply(module, function, [args,
  # session])`, its arity as Redis counts it, and the access its keys need
  # (`:read`, `:write`, or `:none` for no key), checked with the token's
  # grants.
  #
  # Transactions. After MULTI, commands are checked and queued
  # (`Ringbus.Resp.Transaction`) until EXEC runs them in order, or DISCARD
  # drops them. EXEC is not isolated: other clients' commands may run
  # between the queued ones. A queued command that would block answers at
  # once, as in Redis.
  #
  # XADDs. The XADDs with `*` of a read are stored with one push per
  # stream (`Ringbus.Resp.StreamCommands.store/2`) and answered in order, as
  # the binary server stores a run of pushes. A batch gathers until a
  # command that is not such an XADD, or one to a stream of the batch with
  # other options, and is stored before that command runs: a command of the
  # read sees every XADD before it, as one by one.

  alias Ringbus.Resp.{Args, BlockingRead, Commands, Counters, Encoder, Errors, Keys}
  alias Ringbus.Resp.{StreamCommands, Transaction}
  alias Ringbus.Server.{Auth, Config}

  import Args, only: [upcase: 1]
  import Keys, only: [allowed?: 3]
  import Errors, only: [no_permission: 0]

  # Before AUTH, when tokens are required: what Redis lets through.
  @before_auth ["AUTH", "HELLO", "QUIT"]

  # After MULTI: what runs at once instead of being queued, as in Redis.
  @not_queued ["EXEC", "DISCARD", "MULTI", "WATCH", "QUIT"]

  @type context :: %{stats: :counters.counters_ref()}
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

  @doc """
  What every connection of one RESP listener shares: its counters. (Its
  consumer groups are the node's, `Ringbus.Group`.)
  """
  @spec context() :: context()
  def context, do: %{stats: Counters.new()}

  @doc "A session for a new connection, counted as connected until `gone/1`."
  @spec new(Config.t(), context()) :: t()
  def new(%Config{} = config, context) do
    Counters.add(context.stats, :connections, 1)
    Counters.add(context.stats, :connections_received, 1)
    grants = if config.tokens == nil, do: Auth.all()
    id = :erlang.unique_integer([:positive, :monotonic])
    %__MODULE__{config: config, context: context, id: id, grants: grants}
  end

  @doc "The connection has ended."
  @spec gone(t()) :: :ok
  def gone(%__MODULE__{context: context}), do: Counters.sub(context.stats, :connections, 1)

  @doc "Whether the client may run commands (it has authenticated, or needs not)."
  @spec authenticated?(t()) :: boolean()
  def authenticated?(session), do: Keys.authenticated?(session)

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
      {:ok, key, opts, payload} ->
        case StreamCommands.add(batch || StreamCommands.batch(), key, opts, payload) do
          {:ok, batch} ->
            run(rest, s, batch, out, n + 1)

          # The stream's XADDs so far had other options: they go in first.
          :conflict ->
            out = flush(s, batch, out)
            {:ok, batch} = StreamCommands.add(StreamCommands.batch(), key, opts, payload)
            run(rest, s, batch, out, n + 1)
        end

      :no ->
        out = flush(s, batch, out)

        case step(command, s) do
          {reply, s} ->
            run(rest, s, nil, [out | encode(s, reply)], n + 1)

          {:block, block, s} ->
            count(s, n + 1)
            Counters.add(s.context.stats, :blocked_clients, 1)
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
          do: {Transaction.exec_abort(reply), %{s | multi: nil}},
          else: {reply, %{s | multi: Transaction.abort(s.multi)}}

      {:ok, handler, args} ->
        if upcase(name) in @not_queued,
          do: guarded(fn -> dispatch(handler, args, s) end, s),
          else: Transaction.queue(command, s)
    end
  end

  defp flush(_s, nil, out), do: out

  defp flush(s, batch, out) do
    Enum.reduce(StreamCommands.store(batch, s), out, fn reply, out -> [out | encode(s, reply)] end)
  end

  defp count(_s, 0), do: :ok
  defp count(s, n), do: Counters.add(s.context.stats, :commands_processed, n)

  defp encode(s, reply) do
    # Error replies count by code in the server's figures, as ERROR frames do.
    with {:error, text} <- reply, do: Ringbus.Server.Stats.resp_error(s.config.counters, text)
    Encoder.encode(reply, s.proto)
  end

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

  # EXEC's handler hands its queue back: the session alone runs commands.
  defp dispatch({module, function}, args, s) do
    case apply(module, function, [args, s]) do
      {:exec, t, s} -> exec(t, s)
      result -> result
    end
  end

  ## Transactions

  # EXEC (`Ringbus.Resp.Transaction`): the queued commands run in order.
  defp exec(t, s) do
    {replies, s} =
      Enum.reduce(Transaction.commands(t), {[], s}, fn command, {acc, s} ->
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
        BlockingRead.release(block)
        {:null_array, s}

      {reply, s} ->
        {reply, s}
    end
  end

  ## Waiting commands

  @doc """
  A batch from a subscription: ends the wait it belongs to if it answers the
  waiting command, then runs the commands queued behind it.
  """
  @spec deliver(t(), term(), [{Ringbus.seq(), binary()}], non_neg_integer()) ::
          {status(), iodata(), t()}
  def deliver(%__MODULE__{blocked: %{subs: subs} = block} = s, sub, messages, lost)
      when is_map_key(subs, sub) do
    answer_or_wait(s, fn -> block.module.woken(block, sub, messages, lost, s) end)
  end

  # A batch for a wait that has ended: dropped, the wait was answered.
  def deliver(s, _sub, _messages, _lost), do: {status(s), [], s}

  @doc """
  A subscription of the waiting command has ended (its stream was deleted,
  or its node went): the command's handler (`closed/4`) says whether it
  answers or waits on.
  """
  @spec closed(t(), term(), term()) :: {status(), iodata(), t()}
  def closed(%__MODULE__{blocked: %{subs: subs} = block} = s, sub, reason)
      when is_map_key(subs, sub),
      do: answer_or_wait(s, fn -> block.module.closed(block, sub, reason, s) end)

  def closed(s, _sub, _reason), do: {status(s), [], s}

  @doc """
  Group `group` of stream `key` was destroyed: an XREADGROUP waiting on it
  gets Redis's -NOGROUP at once.
  """
  @spec group_destroyed(t(), binary(), binary()) :: {status(), iodata(), t()}
  def group_destroyed(%__MODULE__{blocked: %{watch: watch}} = s, key, group) do
    if {key, group} in watch,
      do: resume(s, Errors.group_gone()),
      else: {status(s), [], s}
  end

  def group_destroyed(s, _key, _group), do: {status(s), [], s}

  defp answer_or_wait(s, handler) do
    case guarded(handler, s) do
      {{:error, _} = reply, s} -> resume(s, reply)
      {:reply, reply, s} -> resume(s, reply)
      {:wait, block} -> {blocked_status(s), [], %{s | blocked: block}}
    end
  end

  @doc "The waiting command's time is up: it gets the null reply, as in Redis."
  @spec timeout(t(), reference()) :: {status(), iodata(), t()}
  def timeout(%__MODULE__{blocked: %{token: token}} = s, token), do: resume(s, :null_array)
  def timeout(s, _token), do: {status(s), [], s}

  @doc "Ends a wait without a reply, when the connection closes."
  @spec cancel(t()) :: t()
  def cancel(%__MODULE__{blocked: nil} = s), do: s

  def cancel(s) do
    Counters.sub(s.context.stats, :blocked_clients, 1)
    BlockingRead.release(s.blocked)
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
