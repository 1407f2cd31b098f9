defmodule Ringbus.Client.Groups do
  @moduledoc """
  Consumer groups over a `Ringbus.Client` connection: the groups of
  `Ringbus.Groups`, with the same functions, arguments and answers, and a
  client first. A group made here is the group the Elixir API and RESP see.

  ## Example

      {:ok, client} = Ringbus.Client.connect(port: port)
      :ok = Ringbus.Client.create(client, "jobs", capacity: 1_000)
      :ok = Ringbus.Client.Groups.create(client, "jobs", "workers", from: :earliest)
      {:ok, _} = Ringbus.Client.push_many(client, "jobs", ["resize 1.png", "resize 2.png"])

      {:ok, [{seq, "resize 1.png", 1}]} = Ringbus.Client.Groups.fetch(client, "jobs", "workers", "w1", 1)
      {:ok, 1} = Ringbus.Client.Groups.ack(client, "jobs", "workers", [seq])

      # Given back: delivered again, to any consumer, with its count up.
      {:ok, [{next, "resize 2.png", 1}]} = Ringbus.Client.Groups.fetch(client, "jobs", "workers", "w1", 1)
      {:ok, 1} = Ringbus.Client.Groups.nack(client, "jobs", "workers", [next])
      {:ok, [{^next, "resize 2.png", 2}]} = Ringbus.Client.Groups.fetch(client, "jobs", "workers", "w2", 10)

      # Waits on the server up to 200 ms for a message; the client's other
      # requests go on meanwhile.
      {:ok, []} = Ringbus.Client.Groups.fetch(client, "jobs", "workers", "w2", 10, timeout: 200)

      {:ok, [%{name: "workers", acked: 1, pending: 1}]} = Ringbus.Client.Groups.info(client, "jobs")

  ## Owners

  The connection is the owner of every consumer it fetches or claims for,
  as the calling process is in `Ringbus.Groups`: when the connection closes
  (or its server side ends), the pending messages of those consumers are
  due at once, for any other consumer, with their delivery counts going
  up. A fetch that waits on the server waits there in a process of its
  own, still for the connection.

  ## Errors

  `{:error, reason}` with the reasons of `Ringbus.Groups` (`:no_group`,
  `:no_channel`, `:exists`, the cluster's `:node_down`, `:node_busy`,
  `:timeout`), `:too_many_groups` (a channel's 64 groups),
  `:too_many_fetches` (64 fetches waiting on one connection), `:forbidden`,
  and the client's `:closed` and `:timeout`. A server that speaks only
  version 3 or 4 closes the connection (`unknown_opcode`). Bad arguments
  raise `ArgumentError`.
  """

  alias Ringbus.{Client, Options}
  alias Ringbus.Client.Request
  alias Ringbus.Wire.{Frame, GroupFrame}

  @type client :: Client.t()
  @type channel :: binary()
  @typedoc "A group or consumer name: 1 to 65,535 bytes."
  @type name :: binary()
  @type message :: {non_neg_integer(), binary(), pos_integer()}
  @type reason :: atom()

  @doc """
  Creates group `group` of `channel`, with the options of
  `Ringbus.Groups.create/3` (`:from`, `:ack_wait`, `:max_deliver`,
  `:dead_letter`, `:max_pending`) and their defaults.
  """
  @spec create(client(), channel(), name(), Ringbus.Groups.options()) :: :ok | {:error, reason()}
  def create(client, channel, group, opts \\ []) do
    defaults = [from: :latest, ack_wait: 30_000, max_deliver: :infinity, dead_letter: nil]
    opts = Options.validate!(opts, defaults ++ [max_pending: 10_000], "group")
    from = opts[:from]

    Options.check!(
      :from,
      from,
      &(&1 in [:earliest, :latest] or u64?(&1) or match?({:time, t} when is_integer(t), &1)),
      ":earliest, :latest, a seq or {:time, ms}"
    )

    Options.check!(:ack_wait, opts[:ack_wait], &u32_positive?/1, "a positive integer")

    Options.check!(
      :max_deliver,
      opts[:max_deliver],
      &(&1 == :infinity or u32_positive?(&1)),
      "a positive integer or :infinity"
    )

    Options.check!(:max_pending, opts[:max_pending], &u32_positive?/1, "a positive integer")
    dead_letter = opts[:dead_letter] && channel!(opts[:dead_letter])

    Client.request(
      client,
      &{:group_create, &1, channel!(channel), name!(group), from, opts[:ack_wait],
       opts[:max_deliver], opts[:max_pending], dead_letter},
      0
    )
  end

  @doc """
  Up to `max` messages (1 to 1,000) for `consumer`: `{seq, payload,
  deliveries}`, those due again first. With `timeout: ms` (default `0`) a
  fetch that finds nothing waits on the server up to `ms` for a message;
  the call then waits that long beyond the client's `:timeout`. With
  `times: true` (default `false`, protocol version 6) each message comes
  with the time it was stored: `{seq, payload, deliveries, ms}`.
  """
  @spec fetch(client(), channel(), name(), name(), pos_integer(),
          timeout: non_neg_integer(),
          times: boolean()
        ) ::
          {:ok, [message() | {non_neg_integer(), binary(), pos_integer(), integer()}]}
          | {:error, reason()}
  def fetch(client, channel, group, consumer, max, opts \\ []) do
    opts = Options.validate!(opts, [timeout: 0, times: false], "fetch")
    wait = opts[:timeout]
    Options.check!(:timeout, wait, &u32?/1, "a non-negative integer below 2^32")
    Options.check!(:times, opts[:times], &is_boolean/1, "a boolean")
    max!(max)
    type = if opts[:times], do: :group_fetch_timed, else: :group_fetch

    Client.request(
      client,
      &{type, &1, channel!(channel), name!(group), name!(consumer), max, wait},
      wait
    )
  end

  @doc """
  Subscribes the client's owner to `consumer`'s messages of `group`
  (protocol version 7), as `Ringbus.Groups.subscribe/4` does in the
  embedded API: due ones first, then new ones, in batches `{:ringbus,
  sub_id, [{seq, payload, deliveries}], 0}` (with `times: true`, `{seq,
  payload, deliveries, ms}`), as `Ringbus.Client.subscribe/3` delivers a
  channel's. At most `:credit` messages (default `1000`, capped at the
  server's `max_credit`) are delivered and not acked: `ack/4` gives their
  credit back, `Ringbus.Client.ack/3` gives none. `:max_batch` (default
  `256`) bounds a batch. The connection owns the consumer: when it
  closes, or `Ringbus.Client.unsubscribe/2` ends the subscription (which
  removes the consumer), its pending messages are due at once, for any
  consumer. It ends with `{:ringbus_closed, sub_id, reason}` when the
  group or channel goes (`:no_group`, `:no_channel`).
  """
  @spec subscribe(client(), channel(), name(), name(),
          credit: pos_integer(),
          max_batch: pos_integer(),
          times: boolean()
        ) :: {:ok, Client.sub_id()} | {:error, reason()}
  def subscribe(client, channel, group, consumer, opts \\ []) do
    opts = Options.validate!(opts, [credit: 1000, max_batch: 256, times: false], "subscribe")
    Request.delivery_options!(opts)

    request =
      &{:group_subscribe, &1, channel!(channel), name!(group), name!(consumer), opts[:credit],
       opts[:max_batch], opts[:times]}

    with {:ok, sub_id, _incarnation} <- Client.request(client, request, 0), do: {:ok, sub_id}
  end

  @doc "Acks messages: they leave the group. Returns how many were pending."
  @spec ack(client(), channel(), name(), [non_neg_integer()]) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def ack(client, channel, group, seqs) do
    {n, seqs} = seqs!(seqs)
    Client.request(client, &{:group_ack, &1, channel!(channel), name!(group), n, seqs}, 0)
  end

  @doc """
  Gives pending messages back: each is due again after `delay:` ms
  (default `0`). Returns how many were pending.
  """
  @spec nack(client(), channel(), name(), [non_neg_integer()], delay: non_neg_integer()) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def nack(client, channel, group, seqs, opts \\ []) do
    delay = Options.validate!(opts, [delay: 0], "nack")[:delay]
    Options.check!(:delay, delay, &u32?/1, "a non-negative integer below 2^32")
    {n, seqs} = seqs!(seqs)

    Client.request(
      client,
      &{:group_nack, &1, channel!(channel), name!(group), delay, n, seqs},
      0
    )
  end

  @doc "Pending messages still being worked on: their `ack_wait` starts again."
  @spec in_progress(client(), channel(), name(), [non_neg_integer()]) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def in_progress(client, channel, group, seqs) do
    {n, seqs} = seqs!(seqs)

    Client.request(
      client,
      &{:group_in_progress, &1, channel!(channel), name!(group), n, seqs},
      0
    )
  end

  @doc "Takes pending messages over for `consumer`, due or not, as `Ringbus.Groups.claim/4`."
  @spec claim(client(), channel(), name(), name(), [non_neg_integer()]) ::
          {:ok, [message()]} | {:error, reason()}
  def claim(client, channel, group, consumer, seqs) do
    {n, seqs} = seqs!(seqs)

    Client.request(
      client,
      &{:group_claim, &1, channel!(channel), name!(group), name!(consumer), n, seqs},
      0
    )
  end

  @doc """
  Takes over for `consumer` up to `count` (1 to 1,000) pending messages
  delivered `min_idle` ms ago or more, as `Ringbus.Groups.autoclaim/5`.
  """
  @spec autoclaim(client(), channel(), name(), name(), non_neg_integer(), pos_integer()) ::
          {:ok, [message()]} | {:error, reason()}
  def autoclaim(client, channel, group, consumer, min_idle, count) do
    Options.check!(:min_idle, min_idle, &u32?/1, "a non-negative integer below 2^32")
    max!(count)

    Client.request(
      client,
      &{:group_autoclaim, &1, channel!(channel), name!(group), name!(consumer), min_idle, count},
      0
    )
  end

  @doc "Removes a consumer: its pending messages are due at once. Returns how many."
  @spec remove_consumer(client(), channel(), name(), name()) ::
          {:ok, non_neg_integer()} | {:error, reason()}
  def remove_consumer(client, channel, group, consumer) do
    Client.request(
      client,
      &{:group_remove_consumer, &1, channel!(channel), name!(group), name!(consumer)},
      0
    )
  end

  @doc "Deletes a group with its pending messages; `{:error, :no_group}` if none."
  @spec delete(client(), channel(), name()) :: :ok | {:error, reason()}
  def delete(client, channel, group),
    do: Client.request(client, &{:group_delete, &1, channel!(channel), name!(group)}, 0)

  @doc """
  The channel's groups, each a map as `Ringbus.Groups.info/1` gives it
  (`:name`, `:delivered`, `:pending`, `:lag`, `:redelivered`, `:acked`,
  `:dead`, `:lost`, `:dropped`, `:held`, `:config`, `:consumers`).
  """
  @spec info(client(), channel()) :: {:ok, [map()]} | {:error, reason()}
  def info(client, channel),
    do: Client.request(client, &{:group_info, &1, channel!(channel)}, 0)

  defp channel!(channel) do
    max = Frame.max_name_size()

    Options.check!(
      :channel,
      channel,
      &(is_binary(&1) and byte_size(&1) in 1..max),
      "a binary of 1 to #{max} bytes"
    )

    channel
  end

  defp name!(name) do
    Options.check!(
      :name,
      name,
      &(is_binary(&1) and byte_size(&1) in 1..0xFFFF),
      "a binary of 1 to 65535 bytes"
    )

    name
  end

  defp max!(max) do
    limit = GroupFrame.max_fetch()

    Options.check!(
      :max,
      max,
      &(is_integer(&1) and &1 in 1..limit),
      "an integer from 1 to #{limit}"
    )
  end

  # The list and its count for the frame, checked and counted in one walk.
  defp seqs!(seqs) when is_list(seqs) do
    n =
      Enum.reduce(seqs, 0, fn seq, n ->
        Options.check!(:seqs, seq, &u64?/1, "seqs: non-negative integers below 2^64")
        n + 1
      end)

    {n, seqs}
  end

  defp seqs!(other), do: Options.check!(:seqs, other, &is_list/1, "a list of seqs")

  defp u32?(n), do: is_integer(n) and n in 0..0xFFFF_FFFF
  defp u32_positive?(n), do: is_integer(n) and n in 1..0xFFFF_FFFF
  defp u64?(n), do: is_integer(n) and n in 0..0xFFFF_FFFF_FFFF_FFFF
end
