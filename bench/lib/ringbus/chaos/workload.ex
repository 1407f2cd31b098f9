defmodule Ringbus.Chaos.Workload do
  @moduledoc """
  The chaos clients, run inside a peer node: producers and consumers that
  go through `Ringbus`'s API and record every operation into a
  `Ringbus.Chaos.History` of that node.

  The ops and their values (`{process, type, op, value, time}`):

    * `:push`, `:push_many` - invoked with `{channel, keys}`, completed
      with `{channel, keys, seq}` (`:ok`) or `{channel, keys, reason}`.
      A producer tags each push `producer: {id, first_counter}` and
      retries a push that did not answer `:ok` up to `:retries` times with
      the same keys under the same tag: a retry after `:timeout` (an
      unknown outcome) is then answered the first push's seq if that was
      stored, and stores no copy. With `tagged: false` it pushes untagged,
      as a producer without producer ids, and such retries duplicate;
    * `:subscribe` - `{channel, index}`; then each batch is an unpaired
      `:ok` `:deliver` of `{channel, index, [{seq, key}], lost}`, and the
      end of a subscription an `:info` `:closed` of `{channel, index,
      reason}`;
    * `:read` - `{channel, from}`, completed with `{channel, from, [{seq,
      key}], lost}` or `{channel, from, reason}`;
    * `:pull` - `{channel}`, completed with `{channel, [{seq, key}]}` (empty
      when the channel was) or `{channel, reason}`.

  A spec (`run/1`):

    * `:history` - the name of the `Ringbus.Chaos.History` to record into;
    * `:producers` - `[{id, channels}]`: a producer pushes to these;
    * `:consumers` - `[{id, :subscribe | :read | :pull, channel}]`;
    * `:group_consumers` - `[{id, channel, group}]`: each a
      `Ringbus.Chaos.GroupConsumer` of that group (it records its own ops:
      `:fetch`, `:autoclaim`, `:group_ack`, `:crash`), which drains for at
      most `:group_drain_ms` after `:until`;
    * `:seed` - each producer seeds `:rand` with it and its id;
    * `:until` - `System.os_time(:millisecond)` at which producers stop;
      consumers go on `:drain_ms` more;
    * `:large_bytes`, `:large_ratio` - the size of a large payload and the
      share of pushes that carry one; `:pause_ms` between a producer's ops;
    * `:max_ops` - ops per process, at most;
    * `:tagged` - whether pushes to memory channels carry producer tags
      (default `true`);
    * `:members` - `%{channel => [node]}` for replicated channels: every
      op goes to a member's node through `:erpc` (subscriptions through a
      relay there), the members in turn; a push goes under the producer
      tag `{id, first counter}`, so its retries (`:retries`) are the same
      push; `:push_timeout` is its `:timeout`.
  """

  alias Ringbus.Chaos.{GroupConsumer, History, Payload}

  @defaults %{
    drain_ms: 1_000,
    group_consumers: [],
    group_drain_ms: 20_000,
    large_bytes: 1_000_000,
    large_ratio: 0.002,
    small_bytes: 64,
    pause_ms: 2,
    retries: 3,
    max_ops: 100_000,
    tagged: true,
    members: nil,
    push_timeout: 1_000
  }

  @doc "Runs the spec's clients until they stop; returns the ops each made."
  @spec run(map()) :: %{term() => non_neg_integer()}
  def run(spec) do
    spec = @defaults |> Map.merge(spec) |> Map.update!(:history, &History.open/1)

    workers =
      for({id, channels} <- spec.producers, do: {id, fn -> producer(spec, id, channels) end}) ++
        for({id, kind, ch} <- spec.consumers, do: {id, fn -> consumer(spec, id, kind, ch) end}) ++
        for {id, ch, group} <- spec.group_consumers,
            do: {id, fn -> GroupConsumer.run(spec, id, ch, group) end}

    parent = self()
    # Every loop is bounded in time; this is only in case one is not.
    drain = max(spec.drain_ms, spec.group_drain_ms)
    limit = spec.until + drain + 30_000 - System.os_time(:millisecond)

    monitors =
      for {id, fun} <- workers do
        {pid, ref} = spawn_monitor(fn -> send(parent, {:ops, self(), fun.()}) end)
        {ref, pid, id}
      end

    for {ref, pid, id} <- monitors, into: %{} do
      receive do
        {:ops, ^pid, ops} ->
          Process.demonitor(ref, [:flush])
          {id, ops}

        {:DOWN, ^ref, _, _, reason} ->
          {id, {:crashed, reason}}
      after
        max(limit, 0) -> Process.exit(pid, :kill) && {id, :killed}
      end
    end
  end

  @doc "Writes the history named `name` to `path`; see `Ringbus.Chaos.History.dump/2`."
  @spec dump(atom(), Path.t()) :: non_neg_integer()
  def dump(name, path), do: History.dump(History.open(name), path)

  @doc """
  The final state of a channel of this node, read locally once the clients
  stopped: `%{info: info | nil, messages: [{seq, key}]}`.
  """
  @spec final(term()) :: %{info: map() | nil, messages: list()}
  def final(ch) do
    case Ringbus.info(ch) do
      {:ok, info} -> %{info: info, messages: read_all(ch, 0, [])}
      {:error, _} -> %{info: nil, messages: []}
    end
  end

  defp read_all(ch, from, acc) do
    case Ringbus.read(ch, from, 200) do
      {:ok, [], _} ->
        acc |> Enum.reverse() |> List.flatten()

      {:ok, messages, _} ->
        read_all(ch, elem(List.last(messages), 0) + 1, [Payload.keys(messages) | acc])
    end
  end

  ## Producers

  defp producer(spec, id, channels) do
    :rand.seed(:exsss, {spec.seed, id, 1})
    produce(spec, id, channels, 0, 0)
  end

  defp produce(spec, id, channels, counter, ops) do
    if stop?(spec, ops, spec.until) do
      ops
    else
      ch = Enum.random(channels)
      r = :rand.uniform()

      {op, keys, bytes} =
        cond do
          r < spec.large_ratio ->
            {:push, [{id, counter}], spec.large_bytes}

          r < 0.75 ->
            {:push, [{id, counter}], spec.small_bytes}

          true ->
            {:push_many, for(c <- counter..(counter + :rand.uniform(15)), do: {id, c}),
             spec.small_bytes}
        end

      payloads = for key <- keys, do: Payload.encode(key, bytes)
      tag = if spec.tagged, do: {id, counter}
      tries = attempt(spec, {id, tag}, op, ch, keys, payloads, spec.retries + 1)
      Process.sleep(spec.pause_ms)
      produce(spec, id, channels, counter + Enum.count(keys), ops + tries)
    end
  end

  defp attempt(spec, {id, _tag} = who, op, ch, keys, payloads, tries) do
    History.record(spec.history, id, :invoke, op, {ch, keys})

    result = push_op(spec, who, op, ch, keys, payloads, tries)

    type = History.classify(result)
    History.record(spec.history, id, type, op, {ch, keys, value(result)})

    if type != :ok and tries > 1 and not stop?(spec, 0, spec.until) do
      Process.sleep(5 + :rand.uniform(45))
      1 + attempt(spec, who, op, ch, keys, payloads, tries - 1)
    else
      1
    end
  end

  defp push_op(%{members: nil}, {_id, tag}, :push, ch, _keys, [payload], _tries),
    do: Ringbus.push(ch, payload, producer: tag)

  defp push_op(%{members: nil}, {_id, tag}, :push_many, ch, _keys, payloads, _tries),
    do: Ringbus.push(ch, payloads, producer: tag)

  # A replicated channel: the batch goes under its first key's tag, so that
  # every attempt is the same push, through the members in turn.
  defp push_op(spec, {id, _tag}, _op, ch, [{_, n} | _], payloads, tries) do
    opts = [producer: {id, n}, timeout: spec.push_timeout]
    remote(spec, member(spec, ch, id + tries), :push, [ch, payloads, opts])
  end

  defp member(spec, ch, i) do
    members = Map.fetch!(spec.members, ch)
    Enum.at(members, rem(i, Enum.count(members)))
  end

  # A call to a member's node: a reply that does not come, or a connection
  # that drops, is an unknown outcome; so is a call that raised there.
  defp remote(spec, node, fun, args) do
    :erpc.call(node, Ringbus, fun, args, spec.push_timeout + 1_000)
  catch
    :error, {:erpc, :timeout} -> {:error, :timeout}
    :error, {:erpc, :noconnection} -> {:error, :noconnection}
    _kind, _reason -> {:error, :closed}
  end

  defp value({:ok, seq}), do: seq
  defp value({:error, reason}), do: reason

  ## Consumers

  defp consumer(spec, id, :subscribe, ch), do: subscribe(spec, id, ch, 0, 0)
  defp consumer(spec, id, :read, ch), do: read(spec, id, ch, 0, 0, 0)
  defp consumer(spec, id, :pull, ch), do: pull(spec, id, ch, 0)

  defp subscribe(spec, id, ch, index, ops) do
    if stop?(spec, ops, drain_until(spec)) do
      ops
    else
      History.record(spec.history, id, :invoke, :subscribe, {ch, index})

      case subscribe_op(spec, ch, index) do
        {:ok, sub} ->
          History.record(spec.history, id, :ok, :subscribe, {ch, index})
          delivered = deliver(spec, id, ch, sub, index, 0)
          subscribe(spec, id, ch, index + 1, ops + 1 + delivered)

        error ->
          History.record(
            spec.history,
            id,
            History.classify(error),
            :subscribe,
            {ch, index, value(error)}
          )

          Process.sleep(50)
          subscribe(spec, id, ch, index + 1, ops + 1)
      end
    end
  end

  defp deliver(spec, id, ch, sub, index, ops) do
    remaining = drain_until(spec) - System.os_time(:millisecond)

    receive do
      {:ringbus, ^sub, messages, lost} ->
        History.record(spec.history, id, :ok, :deliver, {ch, index, Payload.keys(messages), lost})
        ack(sub, Enum.count(messages))

        if stop?(spec, ops, drain_until(spec)),
          do: end_subscription(sub, ops + 1),
          else: deliver(spec, id, ch, sub, index, ops + 1)

      {:ringbus_closed, ^sub, reason} ->
        History.record(spec.history, id, :info, :closed, {ch, index, reason})
        Process.sleep(50)
        ops

      # A relay (a replicated channel's subscription) that died with its node.
      {:DOWN, _, :process, ^sub, reason} ->
        History.record(spec.history, id, :info, :closed, {ch, index, reason})
        Process.sleep(50)
        ops
    after
      max(remaining, 0) -> end_subscription(sub, ops)
    end
  end

  defp end_subscription(relay, ops) when is_pid(relay) do
    Process.exit(relay, :kill)
    ops
  end

  defp end_subscription(sub, ops) do
    Ringbus.unsubscribe(sub)
    ops
  end

  defp ack(relay, _count) when is_pid(relay), do: :ok
  defp ack(sub, count), do: Ringbus.ack(sub, count)

  @subscribe_opts [from: :earliest, max_credit: 200, max_batch: 50]

  defp subscribe_op(%{members: nil}, ch, _index), do: Ringbus.subscribe(ch, @subscribe_opts)

  # A subscription on a member: a relay there subscribes and forwards each
  # batch here; the subscription is the relay's pid, monitored.
  defp subscribe_op(spec, ch, index) do
    ref = make_ref()
    relay = Node.spawn(member(spec, ch, index), __MODULE__, :relay, [self(), ref, ch])
    monitor = Process.monitor(relay)

    receive do
      {^ref, {:ok, _}} ->
        {:ok, relay}

      {^ref, error} ->
        Process.demonitor(monitor, [:flush])
        error

      {:DOWN, ^monitor, _, _, _} ->
        {:error, :closed}
    after
      spec.push_timeout ->
        Process.exit(relay, :kill)
        Process.demonitor(monitor, [:flush])
        {:error, :timeout}
    end
  end

  @doc false
  # Runs on a member: subscribes, tells `client` the result, then forwards
  # every batch (acked here) and the close, until `client` goes.
  def relay(client, ref, ch) do
    Process.monitor(client)
    result = Ringbus.subscribe(ch, @subscribe_opts)
    send(client, {ref, result})
    with {:ok, sub} <- result, do: forward(client, sub)
  end

  defp forward(client, sub) do
    receive do
      {:ringbus, ^sub, messages, lost} ->
        send(client, {:ringbus, self(), messages, lost})
        Ringbus.ack(sub, Enum.count(messages))
        forward(client, sub)

      {:ringbus_closed, ^sub, reason} ->
        send(client, {:ringbus_closed, self(), reason})

      {:DOWN, _, :process, ^client, _} ->
        Ringbus.unsubscribe(sub)
    end
  end

  # After a run of empty reads the reader starts again from 0: a channel
  # whose home restarted begins again at seq 0.
  defp read(spec, id, ch, from, empty, ops) do
    if stop?(spec, ops, drain_until(spec)) do
      ops
    else
      History.record(spec.history, id, :invoke, :read, {ch, from})

      case read_op(spec, ch, from, ops) do
        {:ok, [], lost} ->
          History.record(spec.history, id, :ok, :read, {ch, from, [], lost})
          Process.sleep(20)

          if empty >= 10,
            do: read(spec, id, ch, 0, 0, ops + 1),
            else: read(spec, id, ch, from, empty + 1, ops + 1)

        {:ok, messages, lost} ->
          History.record(spec.history, id, :ok, :read, {ch, from, Payload.keys(messages), lost})
          Process.sleep(5)
          read(spec, id, ch, elem(List.last(messages), 0) + 1, 0, ops + 1)

        error ->
          History.record(
            spec.history,
            id,
            History.classify(error),
            :read,
            {ch, from, value(error)}
          )

          Process.sleep(20)
          read(spec, id, ch, from, empty, ops + 1)
      end
    end
  end

  defp pull(spec, id, ch, ops) do
    if stop?(spec, ops, drain_until(spec)) do
      ops
    else
      History.record(spec.history, id, :invoke, :pull, {ch})

      case pull_op(spec, ch, ops) do
        {:ok, seq, payload} ->
          History.record(spec.history, id, :ok, :pull, {ch, [{seq, Payload.key(payload)}]})

        :empty ->
          History.record(spec.history, id, :ok, :pull, {ch, []})

        error ->
          History.record(spec.history, id, History.classify(error), :pull, {ch, value(error)})
      end

      Process.sleep(3)
      pull(spec, id, ch, ops + 1)
    end
  end

  defp read_op(%{members: nil}, ch, from, _ops), do: Ringbus.read(ch, from, 20)

  defp read_op(spec, ch, from, ops),
    do: remote(spec, member(spec, ch, ops), :read, [ch, from, 20])

  defp pull_op(%{members: nil}, ch, _ops), do: Ringbus.pull(ch)
  defp pull_op(spec, ch, ops), do: remote(spec, member(spec, ch, ops), :pull, [ch])

  defp drain_until(spec), do: spec.until + spec.drain_ms

  defp stop?(spec, ops, until),
    do:
      ops >= spec.max_ops or History.full?(spec.history) or System.os_time(:millisecond) >= until
end
