defmodule Ringbus.Bench.Groups.RabbitClient do
  @moduledoc false
  # The groups bench's RabbitMQ side, with the Erlang AMQP 0-9-1 client
  # (`amqp_client`, loaded from Debian's package by
  # `Groups.RabbitServers.load_client!/1`), one connection and channel per
  # producer or consumer. A producer's channel is in confirm mode: it
  # publishes a batch to the quorum queue and waits for the broker's
  # confirms. A consumer consumes with manual acks and a prefetch of `batch`,
  # so the broker holds back what the consumer has not acked, as a fetch of
  # `batch` does elsewhere; a fetch takes the deliveries waiting in the
  # consumer's mailbox (waiting up to `wait_ms` for the first), and one
  # `basic.ack` with `multiple` acks them all (the channel's earlier ones are
  # acked already). A consumer's channel and connection die with its
  # process: a watcher closes the connection when it exits, and the queue
  # then delivers its unacked messages again at once.
  #
  # The AMQP methods are records of `rabbit_framing_amqp_0_9_1`, built at
  # run time from its own field names, so the bench compiles without the
  # package. `target` is `%{port:, queue:}`.

  @behaviour Ringbus.Bench.Groups.Client

  @compile {:no_warn_undefined, [:amqp_channel, :amqp_connection, :amqp_uri]}
  @compile {:no_warn_undefined, :rabbit_framing_amqp_0_9_1}
  @framing :rabbit_framing_amqp_0_9_1
  # The `basic` class (AMQP 0-9-1), and its properties from empty flags: all unset.
  @basic 60
  @no_props <<0, 0>>
  # `headers` is the third of `basic`'s properties (AMQP 0-9-1, 4.2.5.1).
  @headers 3
  # A confirm or a reply later than this is an error (the rows are seconds long).
  @reply_s 10

  @impl true
  def producer(target, _index) do
    conn = connect!(target)
    {:"confirm.select_ok"} = :amqp_channel.call(conn.channel, method(:"confirm.select", []))
    conn
  end

  @impl true
  def consumer(target, _name) do
    conn = connect!(target)
    owner = self()

    _ =
      spawn(fn ->
        ref = Process.monitor(owner)
        receive do: ({:DOWN, ^ref, _, _, _} -> :amqp_connection.close(conn.connection, 1_000))
      end)

    qos = method(:"basic.qos", prefetch_count: target.prefetch)
    {:"basic.qos_ok"} = :amqp_channel.call(conn.channel, qos)
    consume = method(:"basic.consume", queue: target.queue)
    _ = :amqp_channel.subscribe(conn.channel, consume, self())
    conn
  end

  defp connect!(target) do
    {:ok, params} = :amqp_uri.parse(~c"amqp://guest:guest@127.0.0.1:#{target.port}")
    {:ok, connection} = :amqp_connection.start(params)
    {:ok, channel} = :amqp_connection.open_channel(connection)

    Map.merge(target, %{
      connection: connection,
      channel: channel,
      props: @framing.decode_properties(@basic, @no_props)
    })
  end

  @doc "`name`'s method record with `fields` set, the others at their defaults."
  @spec method(atom(), keyword()) :: tuple()
  def method(name, fields) do
    names = @framing.method_fieldnames(name)

    Enum.reduce(fields, @framing.method_record(name), fn {field, value}, record ->
      put_elem(record, field_index(names, field), value)
    end)
  end

  defp field_index(names, field),
    do: 1 + (Enum.find_index(names, &(&1 == field)) || raise("no field #{field}"))

  @impl true
  def push(conn, payloads) do
    publish = method(:"basic.publish", routing_key: conn.queue)

    for p <- payloads,
        do: :ok = :amqp_channel.cast(conn.channel, publish, {:amqp_msg, conn.props, p})

    case :amqp_channel.wait_for_confirms(conn.channel, @reply_s) do
      true -> {:ok, conn}
      other -> {:error, {:confirms, other}, conn}
    end
  end

  @impl true
  def fetch(conn, max, wait_ms), do: {:ok, take(max, wait_ms, []), conn}

  # The first delivery waits up to `wait_ms`; the rest are those already here.
  defp take(0, _wait_ms, acc), do: Enum.reverse(acc)

  defp take(left, wait_ms, acc) do
    receive do
      {deliver, {:amqp_msg, props, payload}} when elem(deliver, 0) == :"basic.deliver" ->
        take(left - 1, 0, [{tag(deliver), payload, deliveries(deliver, props)} | acc])

      _other ->
        take(left, wait_ms, acc)
    after
      wait_ms -> Enum.reverse(acc)
    end
  end

  defp tag(deliver),
    do: elem(deliver, field_index(@framing.method_fieldnames(:"basic.deliver"), :delivery_tag))

  # A quorum queue counts a message's earlier deliveries in `x-delivery-count`.
  defp deliveries(deliver, props) do
    headers = elem(props, @headers)

    case is_list(headers) and List.keyfind(headers, "x-delivery-count", 0) do
      {_, _type, count} -> count + 1
      _none -> if redelivered?(deliver), do: 2, else: 1
    end
  end

  defp redelivered?(deliver),
    do: elem(deliver, field_index(@framing.method_fieldnames(:"basic.deliver"), :redelivered))

  @impl true
  def ack(conn, []), do: {:ok, 0, conn}

  def ack(conn, tags) do
    ack = method(:"basic.ack", delivery_tag: Enum.max(tags), multiple: true)
    :ok = :amqp_channel.call(conn.channel, ack)
    {:ok, Enum.count(tags), conn}
  end

  @impl true
  def reclaim(conn, max, wait_ms), do: fetch(conn, max, wait_ms)

  @impl true
  def close(conn) do
    _ = :amqp_connection.close(conn.connection, 1_000)
    :ok
  end
end
