defmodule Ringbus.Test.ClusterProbe do
  @moduledoc """
  Functions the cluster tests run inside peer nodes (through
  `Ringbus.Test.Nodes.call/5`), where a test's own closures cannot
  go: timed loads, long-lived subscribers, a server.
  """

  @doc """
  Pushes to each channel of `names` in turn for `duration_ms`, timing every
  call. Returns `records`, one per call, `{os_time_us, name, micros,
  result}` where result is `{:ok, seq, payload}` or the error, in call
  order; and `lateness_us`, how late at worst a process sleeping 1 ms in a
  loop beside it woke: what the machine alone costs a process that waits.
  """
  def timed_pushes(names, duration_ms, payload_bytes \\ 16) do
    deadline = System.monotonic_time(:millisecond) + duration_ms
    pad = :binary.copy("x", max(payload_bytes - 12, 0))
    control = Task.async(fn -> lateness(deadline, 0) end)
    # Records go to ETS as they are made: a list of them on this process's
    # heap would grow to megabytes, and its collections would show up as
    # long calls.
    table = :ets.new(:records, [:ordered_set, :private])
    timed_loop(names, names, deadline, pad, 0, table)
    records = for {_i, record} <- :ets.tab2list(table), do: record
    %{records: records, lateness_us: Task.await(control)}
  end

  defp lateness(deadline, worst) do
    if System.monotonic_time(:millisecond) > deadline do
      worst
    else
      t0 = System.monotonic_time(:microsecond)
      Process.sleep(1)
      lateness(deadline, max(worst, System.monotonic_time(:microsecond) - t0 - 1_000))
    end
  end

  defp timed_loop(names, [], deadline, pad, i, table),
    do: timed_loop(names, names, deadline, pad, i, table)

  defp timed_loop(names, [name | rest], deadline, pad, i, table) do
    if System.monotonic_time(:millisecond) > deadline do
      :ok
    else
      payload = <<i::96>> <> pad
      at = System.os_time(:microsecond)
      t0 = System.monotonic_time(:microsecond)
      result = Ringbus.push(name, payload)
      micros = System.monotonic_time(:microsecond) - t0

      result =
        case result do
          {:ok, seq} -> {:ok, seq, payload}
          error -> error
        end

      :ets.insert(table, {i, {at, name, micros, result}})
      timed_loop(names, rest, deadline, pad, i + 1, table)
    end
  end

  @doc """
  The acked messages of `records` (from `timed_pushes/3`) that a read of
  their channel no longer returns, read in chunks through `Ringbus.read/3`.
  """
  def missing(records) do
    for {name, acked} <-
          Enum.group_by(for({_, n, _, {:ok, s, p}} <- records, do: {n, s, p}), &elem(&1, 0)),
        held = read_all(name),
        {_, seq, payload} <- acked,
        Map.get(held, seq) != payload,
        do: {name, seq}
  end

  # Small reads, retried: under a short `call_timeout` on a loaded machine
  # one may come back `node_busy`.
  defp read_all(name, chunk \\ 100), do: read_all(name, chunk, 0, %{}, 200)

  defp read_all(_name, _chunk, _from, _acc, 0), do: raise("reads kept failing")

  defp read_all(name, chunk, from, acc, tries) do
    case Ringbus.read(name, from, chunk) do
      {:ok, [], _lost} ->
        acc

      {:ok, messages, _lost} ->
        next = elem(List.last(messages), 0) + 1
        read_all(name, chunk, next, Map.merge(acc, Map.new(messages)), tries)

      {:error, _} ->
        Process.sleep(20) && read_all(name, chunk, from, acc, tries - 1)
    end
  end

  @doc """
  Pushes `bytes`-byte payloads to `name` one by one for `duration_ms`, then
  waits until the channel can be read again and checks every answer
  against what the channel holds. See `outcomes/2`.
  """
  def checked_pushes_for(name, duration_ms, bytes) do
    deadline = System.monotonic_time(:millisecond) + duration_ms
    run = :erlang.unique_integer([:positive])
    table = :ets.new(:pushes, [:ordered_set, :private])
    push_until(name, deadline, run, bytes, 0, table)
    outcomes(name, table)
  end

  @doc "Pushes `count` payloads of `bytes` to `name` one by one and checks them: see `outcomes/2`."
  def checked_pushes(name, count, bytes) do
    run = :erlang.unique_integer([:positive])
    table = :ets.new(:pushes, [:ordered_set, :private])

    for i <- 1..count do
      payload = checked_payload(run, i, bytes)
      :ets.insert(table, {i, {payload, Ringbus.push(name, payload)}})
    end

    outcomes(name, table)
  end

  defp push_until(name, deadline, run, bytes, i, table) do
    if System.monotonic_time(:millisecond) <= deadline do
      payload = checked_payload(run, i, bytes)
      :ets.insert(table, {i, {payload, Ringbus.push(name, payload)}})
      push_until(name, deadline, run, bytes, i + 1, table)
    end
  end

  @doc """
  Pushes `bytes`-byte payloads to `name` one by one for `duration_ms`, each
  under producer tag `{run, i}`, and sends each again under the same tag
  while the answer is `:timeout`, `:node_busy` or `:node_down` (for at most
  `duration_ms` more). Returns `retried_after_timeout` (sends of a tag
  whose previous send timed out), `answers` (the last answer per tag, by
  kind), `missing` (tags answered `{:ok, seq}` whose payload is not at seq)
  and `duplicated` (payloads held more than once).
  """
  def tagged_pushes_for(name, duration_ms, bytes) do
    deadline = System.monotonic_time(:millisecond) + duration_ms
    run = :erlang.unique_integer([:positive])
    table = :ets.new(:pushes, [:ordered_set, :private])
    retried = tagged_until(name, deadline, deadline + duration_ms, run, bytes, 0, table, 0)
    pushes = for {_i, push} <- :ets.tab2list(table), do: push
    {first, _} = hd(pushes)
    held = read_all(name, max(div(1_000_000, byte_size(first)), 1))
    held = Map.new(held, fn {seq, payload} -> {seq, binary_part(payload, 0, 16)} end)

    %{
      retried_after_timeout: retried,
      answers: Enum.frequencies_by(pushes, fn {_, result} -> kind(result) end),
      missing:
        for({payload, {:ok, seq}} <- pushes, held[seq] != binary_part(payload, 0, 16), do: seq),
      duplicated: held |> Map.values() |> Enum.frequencies() |> Enum.count(fn {_, n} -> n > 1 end)
    }
  end

  defp tagged_until(name, deadline, give_up, run, bytes, i, table, retried) do
    if System.monotonic_time(:millisecond) <= deadline do
      payload = checked_payload(run, i, bytes)
      {answer, retried} = tagged_push(name, payload, {run, i}, give_up, retried, false)
      :ets.insert(table, {i, {payload, answer}})
      tagged_until(name, deadline, give_up, run, bytes, i + 1, table, retried)
    else
      retried
    end
  end

  defp tagged_push(name, payload, tag, give_up, retried, timed_out?) do
    retried = if timed_out?, do: retried + 1, else: retried

    case Ringbus.push(name, payload, producer: tag) do
      {:error, reason} = answer when reason in [:timeout, :node_busy, :node_down] ->
        if System.monotonic_time(:millisecond) > give_up do
          {answer, retried}
        else
          Process.sleep(5)
          tagged_push(name, payload, tag, give_up, retried, reason == :timeout)
        end

      answer ->
        {answer, retried}
    end
  end

  defp checked_payload(run, i, bytes),
    do: <<run::64, i::64, :binary.copy("c", max(bytes - 16, 0))::binary>>

  # What a checker of the three outcomes counts: the answers by kind, the
  # pushes answered `{:ok, seq}` whose payload is not at seq (`missing`),
  # the pushes answered with an error other than `:timeout` whose payload
  # is stored all the same (`refused_stored`: each a false answer), and how
  # many `:timeout` pushes were stored (either is right).
  defp outcomes(name, table) do
    pushes = for {_i, push} <- :ets.tab2list(table), do: push
    {first, _} = hd(pushes)
    # Reads of about 1 MB: a larger answer would not fit in a link's outbox.
    held = read_all(name, max(div(1_000_000, byte_size(first)), 1))
    held = Map.new(held, fn {seq, payload} -> {seq, binary_part(payload, 0, 16)} end)
    stored = MapSet.new(Map.values(held))
    stored? = fn payload -> MapSet.member?(stored, binary_part(payload, 0, 16)) end

    %{
      answers: Enum.frequencies_by(pushes, fn {_, result} -> kind(result) end),
      missing:
        for({payload, {:ok, seq}} <- pushes, held[seq] != binary_part(payload, 0, 16), do: seq),
      refused_stored:
        for(
          {payload, {:error, reason}} <- pushes,
          reason != :timeout and stored?.(payload),
          do: reason
        ),
      timeouts_stored:
        Enum.count(pushes, &(match?({_, {:error, :timeout}}, &1) and stored?.(elem(&1, 0))))
    }
  end

  defp kind({:ok, _seq}), do: :ok
  defp kind({:error, reason}), do: reason

  @doc """
  Starts a subscriber process (not linked to the caller) that subscribes to
  `name`, keeps every batch and, with `ack: true`, acks each at once.
  Returns `{:ok, pid, sub}` or the subscribe error.
  """
  def subscriber(name, opts, ack?) do
    parent = self()
    ref = make_ref()

    pid =
      spawn(fn ->
        case Ringbus.subscribe(name, opts) do
          {:ok, sub} ->
            send(parent, {ref, {:ok, self(), sub}})
            subscriber_loop(sub, ack?, %{batches: [], closed: nil})

          error ->
            send(parent, {ref, error})
        end
      end)

    receive do
      {^ref, reply} -> reply
    after
      5_000 -> Process.exit(pid, :kill) && {:error, :timeout}
    end
  end

  defp subscriber_loop(sub, ack?, state) do
    receive do
      {:ringbus, ^sub, messages, lost} ->
        if ack?, do: Ringbus.ack(sub, length(messages))
        subscriber_loop(sub, ack?, %{state | batches: [{messages, lost} | state.batches]})

      {:ringbus_closed, ^sub, reason} ->
        subscriber_loop(sub, ack?, %{state | closed: reason})

      {:ack, from, count} ->
        send(from, {:acked, Ringbus.ack(sub, count)})
        subscriber_loop(sub, ack?, state)

      {:unsubscribe, from} ->
        send(from, {:unsubscribed, Ringbus.unsubscribe(sub)})
        subscriber_loop(sub, ack?, state)

      {:get, from} ->
        send(from, {:got, %{state | batches: :lists.reverse(state.batches)}})
        subscriber_loop(sub, ack?, state)

      :stop ->
        :ok
    end
  end

  @doc "What a subscriber has received: `%{batches: [{messages, lost}], closed: reason | nil}`."
  def received(pid), do: ask(pid, {:get, self()}, :got)

  @doc """
  A subscriber's batches summed up without shipping them: messages
  delivered, `lost` in total, whether every batch starts at the seq after
  the one before plus its `lost`, the batches that report a loss
  (`{first_seq, lost}`), and why it closed (or `nil`).
  """
  def tally(pid) do
    %{batches: batches, closed: closed} = received(pid)
    gaps = for {[{first, _} | _], lost} <- batches, lost > 0, do: {first, lost}

    {delivered, lost, _next, contiguous?} =
      Enum.reduce(batches, {0, 0, nil, true}, fn {messages, lost}, {d, l, next, ok?} ->
        [{first, _} | _] = messages
        {last, _} = List.last(messages)
        {d + length(messages), l + lost, last + 1, ok? and (next == nil or first == next + lost)}
      end)

    %{delivered: delivered, lost: lost, contiguous?: contiguous?, gaps: gaps, closed: closed}
  end

  @doc "Makes a subscriber ack `count` messages; returns what `Ringbus.ack/2` did."
  def ack(pid, count), do: ask(pid, {:ack, self(), count}, :acked)

  @doc "Makes a subscriber unsubscribe; returns what `Ringbus.unsubscribe/1` did."
  def unsubscribe(pid), do: ask(pid, {:unsubscribe, self()}, :unsubscribed)

  @doc "Pushes `count` payloads of `bytes` to `name` one by one; returns the results."
  def push_n(name, count, bytes) do
    for i <- 1..count,
        do: Ringbus.push(name, <<i::32, :binary.copy("p", max(bytes - 4, 0))::binary>>)
  end

  @doc """
  Declares `channels` as a release's boot does (`Ringbus.Release.create_channels/1`),
  as soon as another node connects to this one (or after `timeout` ms), so
  that the links come up while it declares them. Returns its result.
  """
  def declare_on_nodeup(channels, timeout \\ 10_000) do
    :ok = :net_kernel.monitor_nodes(true)

    if Node.list() == [] do
      receive do
        {:nodeup, _} -> :ok
      after
        timeout -> :ok
      end
    end

    :net_kernel.monitor_nodes(false)
    Ringbus.Release.create_channels(channels)
  end

  @doc "Pushes one message to each of `names`; returns `{name, result}` for each."
  def push_each(names), do: for(name <- names, do: {name, Ringbus.push(name, "x")})

  @doc "Where this node resolves each of `names`: `{name, Ringbus.Cluster.home(name)}`."
  def homes(names), do: for(name <- names, do: {name, Ringbus.Cluster.home(name)})

  @doc """
  Reads `name` from seq 0 on, `max` at a time, from the seq after the last
  message each time, until it has `total` messages; retries node_busy and
  timeout. Returns the tags (`push_n/3`'s first 4 bytes) in the order read,
  the messages and bytes of the largest answer, and the errors met.
  """
  def read_all(name, total, max) do
    read_all(name, total, max, 0, [], {0, 0}, [])
  end

  defp read_all(_name, total, _max, next, tags, largest, errors) when next >= total,
    do: %{tags: Enum.reverse(tags), largest: largest, errors: Enum.frequencies(errors)}

  defp read_all(name, total, max, next, tags, largest, errors) do
    case Ringbus.read(name, next, max) do
      {:ok, [_ | _] = messages, 0} ->
        {last, _} = List.last(messages)
        tags = Enum.reduce(messages, tags, fn {_, <<i::32, _::binary>>}, acc -> [i | acc] end)
        answer = {length(messages), Ringbus.Op.messages_bytes(messages)}
        read_all(name, total, max, last + 1, tags, max(largest, answer), errors)

      {:error, reason} when reason in [:node_busy, :timeout] ->
        read_all(name, total, max, next, tags, largest, [reason | errors])

      other ->
        %{unexpected: other, at: next}
    end
  end

  @doc "Starts a process that samples the largest `queued_bytes` of this node's links."
  def queue_sampler do
    spawn(fn -> sample_queues(0) end)
  end

  defp sample_queues(largest) do
    receive do
      {:get, from} -> send(from, {:largest, largest})
    after
      1 ->
        links = Map.values(Ringbus.cluster_info().links)
        sample_queues(Enum.reduce(links, largest, &max(&1.queued_bytes, &2)))
    end
  end

  @doc """
  Starts a process that pushes `batch` messages to `name` with
  `Ringbus.push_many/2` every `interval_ms`, whatever the answers, until it
  is sent `:stop`: a steady load.
  """
  def steady_pusher(name, batch, interval_ms) do
    payloads = for i <- 1..batch, do: "steady-#{i}"
    spawn(fn -> push_steadily(name, payloads, interval_ms) end)
  end

  defp push_steadily(name, payloads, interval_ms) do
    receive do
      :stop -> :ok
    after
      interval_ms ->
        Ringbus.push_many(name, payloads)
        push_steadily(name, payloads, interval_ms)
    end
  end

  @doc "The largest `queued_bytes` a `queue_sampler/0` has seen."
  def largest_queued(pid), do: ask(pid, {:get, self()}, :largest)

  @doc "Creates each of `names` here as fast as it can; returns the results in order."
  def create_all(names, opts), do: for(name <- names, do: {name, Ringbus.create(name, opts)})

  @doc """
  Starts a `Ringbus.Server` on port 0 that outlives the call; returns the
  port of its `listener` (`:binary`, or `:resp` with `resp_port: 0`; also
  given as the `:protocol` option).
  """
  def start_server(opts \\ [], listener \\ :binary) do
    parent = self()
    {protocol, opts} = Keyword.pop(opts, :protocol, listener)

    spawn(fn ->
      {:ok, server} = Ringbus.Server.start_link([port: 0] ++ opts)
      send(parent, {:port, Ringbus.Server.port(server, protocol)})
      Process.sleep(:infinity)
    end)

    receive do
      {:port, port} -> port
    after
      5_000 -> :timeout
    end
  end

  @doc "Starts a server with a RESP listener on this node, both on port 0; returns the RESP port."
  def start_resp_server, do: start_server([resp_port: 0], :resp)

  @doc """
  Starts a process that fetches up to `max` messages of consumer group
  `group` for `consumer` (`Ringbus.Groups.fetch/5`), and so owns that
  consumer, then lives on until killed. Returns `{pid, answer}`.
  """
  def group_fetcher(name, group, consumer, max) do
    caller = self()

    pid =
      spawn(fn ->
        send(caller, {:fetched, self(), Ringbus.Groups.fetch(name, group, consumer, max)})
        Process.sleep(:infinity)
      end)

    receive do
      {:fetched, ^pid, answer} -> {pid, answer}
    after
      5_000 -> :timeout
    end
  end

  @doc """
  Starts a process that subscribes to consumer group `group` for `consumer`
  (`Ringbus.Groups.subscribe/4`) and keeps the messages of its batches for
  `group_batches/2`. Returns `{pid, answer}`, the subscribe's answer.
  """
  def group_subscriber(name, group, consumer, opts) do
    caller = self()

    pid =
      spawn(fn ->
        send(caller, {:subscribed, self(), Ringbus.Groups.subscribe(name, group, consumer, opts)})
        group_subscriber_loop([])
      end)

    receive do
      {:subscribed, ^pid, answer} -> {pid, answer}
    after
      5_000 -> :timeout
    end
  end

  defp group_subscriber_loop(acc) do
    receive do
      {:ringbus, _sub, messages, _lost} ->
        group_subscriber_loop(acc ++ messages)

      {:take, from} ->
        send(from, {:taken, self(), acc})
        group_subscriber_loop([])
    end
  end

  @doc """
  The messages `group_subscriber/4`'s process `pid` got since the last
  call, once there are `count` of them or `wait` ms have passed.
  """
  def group_batches(pid, count, wait \\ 5_000),
    do: group_batches(pid, count, System.monotonic_time(:millisecond) + wait, [])

  defp group_batches(pid, count, deadline, acc) do
    send(pid, {:take, self()})
    acc = acc ++ receive(do: ({:taken, ^pid, messages} -> messages))

    if length(acc) >= count or System.monotonic_time(:millisecond) >= deadline do
      acc
    else
      Process.sleep(20)
      group_batches(pid, count, deadline, acc)
    end
  end

  @doc "Starts a process that records this node's nodeup and nodedown events with their os_time (µs)."
  def node_watcher do
    parent = self()

    pid =
      spawn(fn ->
        :ok = :net_kernel.monitor_nodes(true)
        send(parent, :watching)
        watch([])
      end)

    receive do
      :watching -> pid
    end
  end

  defp watch(events) do
    receive do
      {kind, node} when kind in [:nodeup, :nodedown] ->
        watch([{System.os_time(:microsecond), kind, node} | events])

      {:get, from} ->
        send(from, {:events, :lists.reverse(events)})
        watch(events)
    end
  end

  @doc "The events a `node_watcher/0` recorded, oldest first."
  def node_events(pid), do: ask(pid, {:get, self()}, :events)

  @doc """
  Starts a process that records the lines this node logs at `:info` and
  above, as `{level, text}`: the node's own handlers stay silent (peer nodes
  log nothing, and their standard I/O is the test's control channel).
  """
  def log_recorder do
    parent = self()

    pid =
      spawn(fn ->
        for id <- :logger.get_handler_ids(),
            do: :ok = :logger.set_handler_config(id, :level, :emergency)

        :ok = :logger.add_handler(:ringbus_probe_logs, __MODULE__, %{config: %{pid: self()}})
        :ok = :logger.set_primary_config(:level, :info)
        send(parent, :recording)
        record([])
      end)

    receive do
      :recording -> pid
    end
  end

  defp record(lines) do
    receive do
      {:log, level, text} ->
        record([{level, text} | lines])

      {:get, from} ->
        send(from, {:lines, :lists.reverse(lines)})
        record(lines)
    end
  end

  @doc "The lines a `log_recorder/0` recorded, oldest first."
  def log_lines(pid), do: ask(pid, {:get, self()}, :lines)

  @doc false
  # The `:logger` handler of `log_recorder/0`.
  def log(%{level: level, msg: msg}, %{config: %{pid: pid}}) do
    text =
      case msg do
        {:string, chardata} -> IO.chardata_to_string(chardata)
        {:report, report} -> inspect(report)
        {format, args} -> IO.chardata_to_string(:io_lib.format(format, args))
      end

    send(pid, {:log, level, text})
  end

  # Asks a process started here and waits for its `{tag, answer}`.
  defp ask(pid, request, tag) do
    send(pid, request)

    receive do
      {^tag, answer} -> answer
    after
      5_000 -> :timeout
    end
  end
end
