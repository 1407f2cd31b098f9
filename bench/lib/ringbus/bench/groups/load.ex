defmodule Ringbus.Bench.Groups.Load do
  @moduledoc false
  # One row of the groups bench, for any system (`Groups.Client`), run on
  # the node where its clients run: producers and consumers together, then
  # a consumer's crash. Every loop is bounded in count (the meter's budget)
  # and in time (the row's deadline, plus a grace for the consumers to ack
  # what was pushed).

  alias Ringbus.Bench.Groups.Meter
  alias Ringbus.Bench.Replication.Samples

  # Consumers stop this long after the deadline even if some pushed
  # messages are never acked (they count against the rate).
  @grace_us 5_000_000

  @type run :: %{
          size: pos_integer(),
          producers: pos_integer(),
          consumers: pos_integer(),
          batch: pos_integer(),
          backlog: pos_integer(),
          ms: pos_integer(),
          max: pos_integer(),
          wait_ms: pos_integer(),
          ack_wait: pos_integer()
        }

  @doc """
  `run.producers` producers and `run.consumers` consumers of `client` on
  `target` for `run.ms` or `run.max` messages; producers stop pushing while
  `run.backlog` messages are pushed and not acked. Returns the row's figures
  (`Meter.summary/3`), the rate over the time until the last consumer
  stopped.
  """
  @spec run(module(), map(), run()) :: map()
  def run(client, target, run) do
    meter = Meter.new(run.max)
    start = Samples.now()
    run = Map.merge(run, %{deadline: start + run.ms * 1_000, meter: meter, client: client})

    producers = for i <- 1..run.producers, do: fn -> produce(client.producer(target, i), run) end

    consumers =
      for i <- 1..run.consumers, do: fn -> consume(client.consumer(target, "c#{i}"), run) end

    refs = for fun <- producers ++ consumers, do: elem(spawn_monitor(fun), 1)
    for ref <- refs, do: await_down(ref, run.ms + 60_000)
    Meter.summary(meter, (Samples.now() - start) / 1_000_000, run.size)
  end

  defp await_down(ref, ms) do
    receive do
      {:DOWN, ^ref, _, _, :normal} -> :ok
      {:DOWN, ^ref, _, _, reason} -> raise "a producer or consumer failed: #{inspect(reason)}"
    after
      ms -> raise "a producer or consumer did not stop in #{ms} ms"
    end
  end

  defp produce(conn, run) do
    cond do
      Samples.now() >= run.deadline ->
        done(conn, run)

      Meter.backlog(run.meter) + run.batch > run.backlog ->
        receive after: (1 -> :ok)
        produce(conn, run)

      true ->
        case Meter.take(run.meter, run.batch) do
          0 ->
            done(conn, run)

          n ->
            case run.client.push(conn, Meter.payloads(run.size, n)) do
              {:ok, conn} ->
                Meter.pushed(run.meter, n)
                produce(conn, run)

              {:error, _reason, conn} ->
                Meter.error(run.meter)
                produce(conn, run)
            end
        end
    end
  end

  defp done(conn, run) do
    Meter.producer_done(run.meter)
    run.client.close(conn)
  end

  # `acks`: a batch's keys still to ack, when they ride with the next fetch.
  defp consume(conn, run, acks \\ []) do
    if Meter.drained?(run.meter, run.producers) or Samples.now() > run.deadline + @grace_us do
      conn |> ack(run, acks) |> run.client.close()
    else
      {conn, acks} = consume_once(conn, run, acks)
      consume(conn, run, acks)
    end
  end

  # One fetch, and one ack of what it brought: in a request of its own, or
  # with the next fetch (`Client.ack_fetch/4`, unless `run.ack_apart`).
  defp consume_once(conn, run, acks) do
    if function_exported?(run.client, :ack_fetch, 4) and not Map.get(run, :ack_apart, false) do
      # A fetch that carries acks does not wait: its answer counts them,
      # and the producers wait on that count (the backlog).
      wait_ms = if acks == [], do: run.wait_ms, else: 0

      case run.client.ack_fetch(conn, acks, run.batch, wait_ms) do
        {:ok, acked, messages, conn} ->
          Meter.acked(run.meter, acked)
          {conn, delivered(run, messages)}

        {:error, _reason, conn} ->
          fetch_failed(conn, run, acks)
      end
    else
      case run.client.fetch(conn, run.batch, run.wait_ms) do
        {:ok, messages, conn} -> {ack(conn, run, delivered(run, messages)), []}
        {:error, _reason, conn} -> fetch_failed(conn, run, [])
      end
    end
  end

  # The acks a failed request carried may not be done: they go again.
  defp fetch_failed(conn, run, acks) do
    Meter.error(run.meter)
    receive after: (5 -> :ok)
    {conn, acks}
  end

  # Each message's first delivery is timed; their keys, to ack.
  defp delivered(run, messages) do
    now = System.os_time(:microsecond)
    for {key, payload, n} <- messages, do: Meter.delivered(run.meter, payload, n, now) && key
  end

  defp ack(conn, _run, []), do: conn

  defp ack(conn, run, keys) do
    case run.client.ack(conn, keys) do
      {:ok, acked, conn} ->
        Meter.acked(run.meter, acked)
        conn

      {:error, _reason, conn} ->
        Meter.error(run.meter)
        conn
    end
  end

  @doc """
  A consumer's crash: `run.batch` messages pushed, fetched by one consumer
  that does not ack them, another consumer waiting; then the first one's
  process is killed (`Process.exit(pid, :kill)`, which also closes its
  sockets). Returns the ms from the kill to the other consumer's getting
  the first and the last of those messages again (`reclaim/3`), nil for
  when they did not all come within `run.ack_wait` + 10 s, and how many
  were held and how many did not come.
  """
  @spec crash(module(), map(), run()) :: %{
          first_ms: float() | nil,
          all_ms: float() | nil,
          missing: non_neg_integer(),
          held: non_neg_integer()
        }
  def crash(client, target, run) do
    parent = self()
    producer = client.producer(target, 0)
    {:ok, producer} = client.push(producer, Meter.payloads(run.size, run.batch))
    client.close(producer)

    {crashed, crashed_ref} =
      spawn_monitor(fn ->
        conn = client.consumer(target, "crashed")
        keys = hold(client, conn, run.batch, Samples.now() + 10_000_000, [])
        send(parent, {:holding, keys})
        # Holds its messages unacked until it is killed (or the crash gives up).
        receive after: (run.ack_wait + 30_000 -> :ok)
      end)

    keys =
      receive do
        {:holding, [_ | _] = keys} -> keys
      after
        15_000 -> raise "the consumer to crash got none of the messages pushed in 15 s"
      end

    {survivor, survivor_ref} =
      spawn_monitor(fn ->
        conn = client.consumer(target, "survivor")
        send(parent, :ready)

        receive do
          {:killed, at} ->
            deadline = Samples.now() + (run.ack_wait + 10_000) * 1_000

            send(
              parent,
              {:reclaimed, reclaim(client, conn, run, MapSet.new(keys), at, deadline, nil)}
            )
        after
          15_000 -> client.close(conn)
        end
      end)

    receive do
      :ready -> :ok
    after
      15_000 -> raise "the surviving consumer did not start in 15 s"
    end

    killed_at = System.os_time(:microsecond)
    Process.exit(crashed, :kill)
    send(survivor, {:killed, killed_at})

    receive do
      {:reclaimed, result} ->
        await_down(survivor_ref, 5_000)
        receive do: ({:DOWN, ^crashed_ref, _, _, _} -> :ok)
        Map.put(result, :held, MapSet.size(MapSet.new(keys)))
    after
      run.ack_wait + 20_000 -> raise "the surviving consumer did not answer"
    end
  end

  defp hold(client, conn, n, deadline, acc) do
    cond do
      n <= 0 or Samples.now() > deadline ->
        acc

      true ->
        {:ok, messages, conn} = client.fetch(conn, n, 100)
        got = for {key, _payload, _n} <- messages, do: key
        hold(client, conn, n - Enum.count(got), deadline, got ++ acc)
    end
  end

  # The survivor's loop: until every held key came back, or the deadline.
  # `first` is the ms from the kill to the first of them.
  defp reclaim(client, conn, run, keys, killed_at, deadline, first) do
    if Samples.now() > deadline do
      client.close(conn)
      %{first_ms: first, all_ms: nil, missing: MapSet.size(keys)}
    else
      {:ok, messages, conn} = client.reclaim(conn, run.batch, run.wait_ms)
      at_ms = (System.os_time(:microsecond) - killed_at) / 1_000
      came = for {key, _payload, _n} <- messages, MapSet.member?(keys, key), do: key
      first = if first == nil and came != [], do: at_ms, else: first
      keys = MapSet.difference(keys, MapSet.new(came))
      conn = ack_all(client, conn, messages)

      if MapSet.size(keys) == 0 do
        client.close(conn)
        %{first_ms: first, all_ms: at_ms, missing: 0}
      else
        reclaim(client, conn, run, keys, killed_at, deadline, first)
      end
    end
  end

  defp ack_all(_client, conn, []), do: conn

  defp ack_all(client, conn, messages) do
    {:ok, _acked, conn} = client.ack(conn, Enum.map(messages, &elem(&1, 0)))
    conn
  end
end
