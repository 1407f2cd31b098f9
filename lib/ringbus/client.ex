defmodule Ringbus.Client do
  # Kept whole: the client's public API in one module, whose documentation
  # is half its lines; the work is in Client.Connection, Client.Session and
  # Client.Handshake.
  @moduledoc """
  A client for a `Ringbus.Server`, over TCP or TLS.

  It speaks the protocol of `docs/PROTOCOL.md` and offers the operations of
  the embedded `Ringbus` API on a remote server, with the same results where
  they make sense, and many requests in flight on one connection.

  ## Example

      {:ok, client} = Ringbus.Client.connect(host: "127.0.0.1", port: 7171)

      :ok = Ringbus.Client.create(client, "events", capacity: 100_000)
      {:ok, 0} = Ringbus.Client.push(client, "events", "hello")
      {:ok, 1} = Ringbus.Client.push_many(client, "events", ["a", "b"])

      {:ok, [{0, "hello"}, {1, "a"}], 0} = Ringbus.Client.read(client, "events", 0, 2)
      {:ok, 0, "hello"} = Ringbus.Client.pull(client, "events")
      {:ok, 2} = Ringbus.Client.len(client, "events")

      :ok = Ringbus.Client.close(client)

  Every function that waits for the server is safe to call from many
  processes at once on one client: requests are pipelined, each with its own
  correlation id, and answered as the server handles them.

  ## Fast ingest: pushes with asynchronous acks

  `push/3` waits for the server's ack, so a producer that calls it in a loop
  does one round trip per message. `push_async/4` returns at once with the
  push's correlation id; the server acknowledges all the pushes of one socket
  read with one `PUSH_ACKS` frame, and the client hands each such frame to
  the owner (see `:owner`) as **one** message:

      {:ringbus_acks, client, [{corr, {:ok, seq} | {:error, reason}}]}

  Entries come in the order the pushes were sent. A producer pushes until
  the client says `{:error, :backpressure}` and then waits for acks:

      def produce(client, payloads, acked \\\\ 0)

      def produce(client, [payload | rest] = payloads, acked) do
        case Ringbus.Client.push_async(client, "events", payload) do
          {:ok, _corr} -> produce(client, rest, acked)
          {:error, :backpressure} -> produce(client, payloads, acked + await_acks(client))
        end
      end

      def produce(_client, [], acked), do: acked

      defp await_acks(client) do
        receive do
          {:ringbus_acks, ^client, acks} -> length(acks)
        end
      end

  A list of payloads goes as one `PUSH_BATCH` frame with one correlation id
  and one ack entry, whose seq is that of the first message. With
  `ack: false` a push is sent in no-ack mode: the server stores it and says
  nothing, not even when it fails, and `push_async/4` returns `:ok`.

  ### Coalescing

  A producer of many small pushes gets further with `linger:` on
  `connect/1`, as Kafka's producer does with `linger.ms` and `batch.size`:
  `push_async/4` of a single payload (acked, with no options) hands the
  payload to the connection, which gathers those of each channel and sends
  them as one `PUSH_BATCH` when `:batch_bytes` have gathered, when it has
  nothing else to do (`linger: 0`, no added wait) or when `linger`
  milliseconds have passed since the first one gathered. The owner still
  gets one `{corr, {:ok, seq}}` entry per push, with the seq of that push's
  own message; the acks of one channel come in the order of its pushes,
  those of different channels in the order their batches went. Any other
  request sends what has gathered first, so nothing is reordered against
  it. A coalesced batch is stored or refused whole: on a `:reject` channel
  without room for all of it, or on a channel whose `max_bytes` is below
  the batch's bytes, each of its pushes is answered with the error (none of
  them stored), where pushes sent one by one might have been stored in
  part. Keep `:batch_bytes` below such a channel's `max_bytes`.

  ### Backpressure

  At most `:max_pending` async messages (default 100,000) are in flight: a
  message counts from `push_async/4` until its ack reaches the client or, in
  no-ack mode, until it is written to the socket. Past the bound,
  `push_async/4` returns `{:error, :backpressure}` and sends nothing; the
  caller waits for acks and tries again. One push is always taken when
  nothing is in flight, so a batch larger than the bound still goes alone.
  The bound holds the client's memory and the server's work; the owner must
  still take the `:ringbus_acks` messages out of its mailbox.

  Until it does, they wait there, and with the default on-heap message
  queue each garbage collection of the owner copies them again: a producer
  that pushes up to the bound before it takes any acks spends most of its
  time copying them. Such an owner keeps its mailbox off the heap, with
  `Process.flag(:message_queue_data, :off_heap)` before `connect/1`, or
  takes the acks as they come.

  The bound is at most 250,000 because the client process writes and reads
  the socket: when the server's acks for every pending push (14 bytes each)
  outgrow the socket buffers and the server's output queue, the server
  stops reading until the client reads, while the client waits to write.

  ## Consumer groups

  `Ringbus.Client.Groups` offers the consumer groups of `Ringbus.Groups`
  over the connection (protocol version 5): `Ringbus.Client.Groups.fetch/6`
  may wait on the server without holding up the client's other requests,
  and the connection owns the consumers it fetches for: when it closes,
  their pending messages are due at once.

  ## Subscriptions

  `subscribe/3` streams a channel's messages to the owner, in the shape the
  embedded `Ringbus.subscribe/2` uses, with the server's subscription id (an
  integer) in place of a reference:

      {:ok, sub} = Ringbus.Client.subscribe(client, "events", from: :earliest, credit: 1000)

      receive do
        {:ringbus, ^sub, messages, lost} ->
          handle(messages, lost)
          Ringbus.Client.ack(client, sub, length(messages))

        {:ringbus_closed, ^sub, reason} ->
          :gone
      end

  Flow control is credit in messages: the server sends at most `:credit`
  messages ahead of `ack/3`, which returns credit (a `CREDIT` frame, with no
  answer). A subscription ends with `unsubscribe/2`, with
  `{:ringbus_closed, sub, :no_channel}` when its channel is deleted, with
  `{:ringbus_closed, sub, :shutting_down}` when the server stops (SIGTERM,
  `bin/ringbus stop`), or with `{:ringbus_closed, sub, :closed}` when the
  connection is lost otherwise.

  ## Errors

  Functions return `{:ok, value}` (or `:ok`, or `:empty` for `pull/2`) or
  `{:error, reason}`; the `!` variants raise `Ringbus.Client.Error`. A reason
  is always an atom (or, for an error code newer than this client, its
  integer):

    * Request errors from the server, as the protocol names them
      (`Ringbus.Wire.ErrorCode`): `:no_channel`, `:exists`, `:full`,
      `:too_large`, `:forbidden`, `:no_subscription`,
      `:too_many_subscriptions`, `:bad_argument`, `:internal`,
      `:new_incarnation` (see "Incarnations"), and in a
      cluster `:node_down`, `:node_busy` (not carried out) and `:timeout`
      (code 111: unknown outcome, see `Ringbus.Cluster`). The same
      atoms the embedded `Ringbus` functions return, so code moves between
      the two. They come from `ERROR` frames and from the status of
      `PUSH_ACKS` entries alike; the server's text message is not kept (the
      protocol says clients must not parse it).
    * `:closed` - the connection is closed, or closed while the request
      waited. A request that was written may or may not have been handled.
    * `:timeout` - no answer within `:timeout` milliseconds. The request may
      still be handled; its late answer is dropped. The same atom as the
      server's code 111, with the same meaning: unknown outcome.
    * `:backpressure` - see above; only from `push_async/4`.
    * `:frame_too_large` - the request would not fit the server's max frame
      size; nothing was sent.
    * From `connect/1` only: socket errors such as `:econnrefused` or
      `:timeout`, TLS errors as `:ssl` gives them, and the server's refusal:
      `:auth_failed`, `:bad_version`, `:server_busy`, `:shutting_down`.

  When the connection is lost (the server closed it, a socket error), the
  owner gets one last `{:ringbus_acks, client, entries}` with a
  `{corr, {:error, :closed}}` entry for each async push not acked by then,
  so it hears of every push it sent; then `{:ringbus_closed, sub, reason}`
  for each subscription still open (with the connection error the server
  sent, or `:closed`), and `{:ringbus_down, client, reason}`, where
  `reason` is the connection error the server sent (say `:idle_timeout` or
  `:shutting_down`), `:closed`, or the socket error. A push answered
  `:closed` may or may not have been stored: a server that shuts down
  answers every push it has read, so those it did not answer it did not
  store, but a connection cut short can lose an ack. Closing the client with
  `close/1`, or the owner exiting, sends no such messages.

  ## Incarnations

  A channel deleted and created again (or a memory channel whose server
  restarted) counts its seqs from 0 again, under a new incarnation (see
  "Incarnations" in `Ringbus`). A consumer that keeps a seq to resume from
  keeps the incarnation with it and states it; given the `:incarnation`
  option, `read/5` and `subscribe/3` also answer with the incarnation their
  messages are of, so the first read or subscription pins it (`:any` states
  none):

      {:ok, messages, _lost, inc} = Ringbus.Client.read(client, "events", 0, 100, incarnation: :any)
      # ... later, from the seq after the last one handled:
      case Ringbus.Client.read(client, "events", next_seq, 100, incarnation: inc) do
        {:ok, messages, _lost, ^inc} -> messages
        {:error, :new_incarnation} -> start_over()
      end

  `info/2` has the incarnation as `:incarnation`.

  ## Keep-alive

  A server closes a connection from which no frame came for its idle timeout
  (announced in `HELLO_OK`). When it has one, the client sends a `PING` every
  third of it, so a client that only subscribes stays connected.

  ## Process

  The client is a process (`Ringbus.Client.Connection`) that owns the socket;
  the `t:t/0` value holds its pid and an `:atomics` array that callers use to
  take correlation ids and count pending pushes without a message to it.
  Callers encode their requests themselves and send the bytes to the
  process, which writes whatever is queued with one socket write. It is not
  linked to the caller; it monitors the owner and closes when the owner exits.
  See `lib/ringbus/client/README.md`.
  """

  alias Ringbus.Client.{Connection, Counters, Error, Handshake, Request, Socket}
  alias Ringbus.Options
  alias Ringbus.Wire.Frame

  @enforce_keys [:pid, :counters, :max_pending, :max_frame_size, :timeout]
  defstruct [:pid, :counters, :max_pending, :max_frame_size, :timeout, linger: nil]

  @typedoc "A connected client, as returned by `connect/1`."
  @type t :: %__MODULE__{
          pid: pid(),
          counters: :atomics.atomics_ref(),
          max_pending: pos_integer(),
          max_frame_size: pos_integer(),
          timeout: timeout(),
          linger: non_neg_integer() | nil
        }

  @typedoc "A correlation id: identifies an async push in the owner's `:ringbus_acks` messages."
  @type corr :: 1..0xFFFF_FFFF

  @typedoc "A subscription id, chosen by the server."
  @type sub_id :: non_neg_integer()

  @type channel :: String.t()

  @typedoc "See the Errors section of the module doc."
  @type reason :: atom() | pos_integer()

  @typedoc """
  Options of `connect/1`:

    * `:host` - the server's address, a hostname or IP string, a charlist or
      an IP tuple. Default `"127.0.0.1"`.
    * `:port` - the server's port. Default `7171`
      (`Ringbus.Wire.Frame.default_port/0`).
    * `:transport` - `:tcp` or `:tls`. Default `:tcp`.
    * `:tls` - `:ssl` client options for `transport: :tls`, such as
      `verify: :verify_peer, cacerts: [...]`. Default `[]`.
    * `:token` - the token to authenticate with, or `nil` for none.
      Default `nil`.
    * `:timeout` - milliseconds for connecting and `HELLO`, and for each
      function that waits for an answer. Default `5_000`.
    * `:owner` - the process that receives async acks, deliveries and the
      `:ringbus_down` message; the client closes when it exits. Default the
      caller.
    * `:max_pending` - async messages in flight at most (see Backpressure),
      up to `250_000`. Default `100_000`.
    * `:buffer_size` - socket buffer sizes, in bytes. Default 1 MiB.
    * `:send_timeout` - milliseconds a write may wait on a server that does
      not read before the connection closes. Default `30_000`.
    * `:linger` - coalesce `push_async/4` calls of single payloads (see
      Coalescing): `0` sends what has gathered as soon as the connection has
      nothing else to do, once it has let the callers run a turn (a yield)
      to add more; `n` waits up to `n` milliseconds for more. Default
      `nil`: every push is its own `PUSH` frame.
    * `:batch_bytes` - with `:linger`, a channel's gathered payloads go out
      once they add up to this many bytes. Default `65_536`.
  """
  @type options :: [
          host: String.t() | charlist() | :inet.ip_address(),
          port: :inet.port_number(),
          transport: :tcp | :tls,
          tls: [:ssl.tls_client_option()],
          token: String.t() | nil,
          timeout: timeout(),
          owner: pid(),
          max_pending: pos_integer(),
          buffer_size: pos_integer(),
          send_timeout: pos_integer(),
          linger: non_neg_integer() | nil,
          batch_bytes: pos_integer()
        ]

  # 14 bytes of PUSH_ACKS entry per pending push: 250,000 of them (3.5 MB)
  # fit in the socket buffers and the server's output queue, so the server
  # never blocks writing acks while this client blocks writing pushes.
  @max_pending_limit 250_000

  # Guards compare with it: channel names and producer ids.
  @max_name Frame.max_name_size()

  ## Connecting

  @doc """
  Connects to a server, says `HELLO` and returns a client.

  See `t:options/0`. Unknown options raise `ArgumentError`.

      {:ok, client} = Ringbus.Client.connect(port: 7171, token: "s3cret")
      {:error, :auth_failed} = Ringbus.Client.connect(port: 7171, token: "wrong")
      {:error, :econnrefused} = Ringbus.Client.connect(port: 1)
  """
  @spec connect(options()) :: {:ok, t()} | {:error, reason() | term()}
  def connect(opts \\ []) do
    opts =
      Keyword.validate!(opts,
        host: "127.0.0.1",
        port: Frame.default_port(),
        transport: :tcp,
        tls: [],
        token: nil,
        timeout: 5_000,
        owner: self(),
        max_pending: 100_000,
        buffer_size: 1024 * 1024,
        send_timeout: 30_000,
        linger: nil,
        batch_bytes: 65_536
      )

    host = host!(opts[:host])

    Options.check!(
      :port,
      opts[:port],
      &(is_integer(&1) and &1 in 0..65_535),
      "an integer in 0..65535"
    )

    Options.check!(:transport, opts[:transport], &(&1 in Socket.transports()), ":tcp or :tls")
    Options.check!(:tls, opts[:tls], &is_list/1, "a keyword list of ssl options")
    Options.check!(:token, opts[:token], &(is_nil(&1) or is_binary(&1)), "a binary or nil")
    Options.check!(:timeout, opts[:timeout], &timeout?/1, "a positive integer or :infinity")
    Options.check!(:owner, opts[:owner], &is_pid/1, "a pid")

    for key <- [:buffer_size, :send_timeout, :batch_bytes] do
      Options.check!(key, opts[key], &Options.positive?/1, "a positive integer")
    end

    Options.check!(
      :linger,
      opts[:linger],
      &(is_nil(&1) or (is_integer(&1) and &1 >= 0)),
      "nil or a non-negative integer"
    )

    Options.check!(
      :max_pending,
      opts[:max_pending],
      &(is_integer(&1) and &1 in 1..@max_pending_limit),
      "an integer in 1..#{@max_pending_limit}"
    )

    with {:ok, transport, socket} <- Socket.connect(host, opts[:port], opts),
         {:ok, limits} <- Handshake.hello(transport, socket, opts[:token], opts[:timeout]) do
      start(transport, socket, limits, opts)
    end
  end

  @doc "Like `connect/1`, but returns the client or raises `Ringbus.Client.Error`."
  @spec connect!(options()) :: t()
  def connect!(opts \\ []), do: connect(opts) |> bang()

  defp start(transport, socket, limits, opts) do
    client = %__MODULE__{
      pid: nil,
      counters: Counters.new(),
      max_pending: opts[:max_pending],
      max_frame_size: limits.max_frame_size,
      timeout: opts[:timeout],
      linger: opts[:linger]
    }

    args = %{
      client: client,
      transport: transport,
      socket: socket,
      owner: opts[:owner],
      limits: limits,
      batch_bytes: opts[:batch_bytes],
      buffer_size: opts[:buffer_size]
    }

    # The process puts its own pid in the struct, as the caller does here.
    {:ok, pid} = Connection.start(args)
    client = %{client | pid: pid}

    case transport.controlling_process(socket, pid) do
      :ok ->
        send(pid, {:ringbus_activate, socket})
        {:ok, client}

      {:error, reason} ->
        transport.close(socket)
        Connection.stop(pid)
        {:error, reason}
    end
  end

  @doc """
  Closes the connection and stops the client. Calls waiting for an answer
  return `{:error, :closed}`, and so does every later call. Returns `:ok`,
  also when the client was closed already.
  """
  @spec close(t()) :: :ok
  def close(%__MODULE__{pid: pid}) do
    GenServer.call(pid, :close)
  catch
    :exit, _ -> :ok
  end

  @doc "The server's limits, as announced in `HELLO_OK`: today its `max_frame_size`."
  @spec max_frame_size(t()) :: pos_integer()
  def max_frame_size(%__MODULE__{max_frame_size: size}), do: size

  ## Channels

  @typedoc """
  Options of `create/3`:

    * `:capacity` - messages the channel keeps, a positive integer. Required.
    * `:overflow` - `:drop_oldest` (a push to a full channel overwrites the
      oldest message) or `:reject` (it is refused with `:full`). Default
      `:drop_oldest`.
    * `:max_bytes` - the most payload bytes the channel holds, or `nil` for
      no bound but the capacity (see `Ringbus.Channel`). Default `nil`.
    * `:replicas` - an integer in 1..255: the channel is replicated and
      durable, on the server's node and `replicas - 1` other nodes of its
      cluster (see "Replicated channels" in `Ringbus`); `nil` for a memory
      channel. A server with fewer nodes connected answers
      `{:error, :node_down}`. Default `nil`.
    * `:max_age` - the most ms a message stays (see "Time" in `Ringbus`),
      or `nil` for no bound by age. Default `nil`.
  """
  @type create_options :: [
          capacity: pos_integer(),
          overflow: :drop_oldest | :reject,
          max_bytes: pos_integer() | nil,
          replicas: 1..255 | nil,
          max_age: pos_integer() | nil
        ]

  @doc """
  Creates a channel. Returns `{:error, :exists}` if there is one of that name.

      :ok = Ringbus.Client.create(client, "events", capacity: 1_000_000, overflow: :drop_oldest)
      :ok = Ringbus.Client.create(client, "orders", capacity: 100_000, replicas: 3)
  """
  @spec create(t(), channel(), create_options()) :: :ok | {:error, reason()}
  def create(client, channel, opts) do
    {capacity, overflow, max_bytes, replicas, max_age} = Request.create_options!(opts)
    name = channel!(channel)
    call(client, &{:create, &1, name, capacity, overflow, max_bytes, replicas, max_age})
  end

  @doc "Like `create/3`, but raises `Ringbus.Client.Error` on failure."
  @spec create!(t(), channel(), create_options()) :: :ok
  def create!(client, channel, opts), do: create(client, channel, opts) |> bang()

  @doc """
  Deletes a channel and its messages. Every subscription to it, on any
  connection, ends with `{:ringbus_closed, sub, :no_channel}`.
  """
  @spec delete(t(), channel()) :: :ok | {:error, reason()}
  def delete(client, channel), do: call(client, &{:delete, &1, channel!(channel)})

  @doc "Like `delete/2`, but raises `Ringbus.Client.Error` on failure."
  @spec delete!(t(), channel()) :: :ok
  def delete!(client, channel), do: delete(client, channel) |> bang()

  ## Pushes

  @doc """
  Pushes one message, waits for its ack and returns its seq.

  A channel that does not exist is created by the push when the server has
  `:auto_create` on (its default); otherwise the result is
  `{:error, :no_channel}`. A full `:reject` channel gives `{:error, :full}`.

      {:ok, seq} = Ringbus.Client.push(client, "events", "hello")
  """
  @spec push(t(), channel(), binary()) :: {:ok, Ringbus.seq()} | {:error, reason()}
  def push(client, channel, payload) when is_binary(payload),
    do: call(client, &{:push, &1, :ack, channel!(channel), payload})

  @doc """
  Like `push/3` (a binary) or `push_many/3` (a list), with options:

    * `:producer` - `{producer_id, n}`: a producer tag, a binary of 1 to
      255 bytes and a non-negative integer below 2^64 (a `PUSH` or
      `PUSH_BATCH` with the producer-tag flag, `docs/PROTOCOL.md`). The
      channel stores a tagged push once and answers every resend with
      its first seq, so a push answered `{:error, :timeout}` (no answer
      in time, here or between the server and the channel's home node)
      may be sent again under the same tag, on this connection or
      another. A producer's `n` increases; the channel remembers its last
      64 and answers an older one `{:error, :stale_tag}` (see `Ringbus`,
      "Producer tags"). Defaults to `nil`, an untagged push.

  A server older than producer tags closes the connection with
  `bad_frame` on a tagged push.

      {:ok, seq} = Ringbus.Client.push(client, "events", "e-17", producer: {"billing", 17})
  """
  @spec push(t(), channel(), binary() | [binary()], producer: {binary(), non_neg_integer()} | nil) ::
          {:ok, Ringbus.seq()} | {:error, reason()}
  def push(client, channel, payload_or_payloads, opts) do
    opts = Ringbus.Options.validate!(opts, [producer: nil], "push")

    case {opts[:producer], payload_or_payloads} do
      {nil, payload} when is_binary(payload) ->
        push(client, channel, payload)

      {nil, payloads} when is_list(payloads) ->
        push_many(client, channel, payloads)

      {{id, n} = tag, payload}
      when is_binary(id) and byte_size(id) in 1..@max_name and
             is_integer(n) and n >= 0 and n < 0x1_0000_0000_0000_0000 ->
        tagged_push(client, channel!(channel), tag, payload)

      {tag, _} ->
        raise ArgumentError,
              "expected :producer to be a tuple {binary of 1 to #{@max_name} bytes, u64}, got: " <>
                inspect(tag)
    end
  end

  defp tagged_push(client, channel, tag, payload) when is_binary(payload),
    do: call(client, &{:tagged_push, &1, :ack, channel, tag, payload})

  defp tagged_push(client, channel, tag, payloads) when is_list(payloads) do
    count = length(payloads)
    call(client, &{:tagged_push_batch, &1, :ack, channel, tag, count, payloads})
  end

  @doc "Like `push/3`, but returns the seq or raises `Ringbus.Client.Error`."
  @spec push!(t(), channel(), binary()) :: Ringbus.seq()
  def push!(client, channel, payload), do: push(client, channel, payload) |> bang()

  @doc """
  Pushes a batch as one `PUSH_BATCH` frame and returns the seq of its first
  message; the others follow it. On a `:reject` channel the batch goes in
  whole or not at all.
  """
  @spec push_many(t(), channel(), [binary()]) :: {:ok, Ringbus.seq()} | {:error, reason()}
  def push_many(client, channel, payloads) when is_list(payloads) do
    # The encoder walks the list anyway; counting it is one more pass in the caller.
    count = length(payloads)
    call(client, &{:push_batch, &1, :ack, channel!(channel), count, payloads})
  end

  @doc "Like `push_many/3`, but returns the first seq or raises `Ringbus.Client.Error`."
  @spec push_many!(t(), channel(), [binary()]) :: Ringbus.seq()
  def push_many!(client, channel, payloads), do: push_many(client, channel, payloads) |> bang()

  @doc """
  Sends a push (a binary) or a batch (a list of binaries, one `PUSH_BATCH`
  frame) without waiting for the server.

  Returns `{:ok, corr}` at once; the ack comes to the owner later as an entry
  `{corr, {:ok, seq} | {:error, reason}}` of a
  `{:ringbus_acks, client, entries}` message, one message per `PUSH_ACKS`
  frame of the server. For a batch, `seq` is that of its first message.

  Returns `{:error, :backpressure}`, having sent nothing, when `:max_pending`
  messages are in flight (see the module doc), `{:error, :frame_too_large}`
  when the frame would exceed the server's max frame size, and
  `{:error, :closed}` once the connection is closed.

  ## Options

    * `:ack` - `false` sends the push in no-ack mode: the server never
      answers it, not even on failure, and the result is `:ok`. Default `true`.
  """
  @spec push_async(t(), channel(), binary() | [binary()], ack: boolean()) ::
          {:ok, corr()} | :ok | {:error, :backpressure | :frame_too_large | :closed}
  def push_async(client, channel, payload_or_payloads, opts \\ [])

  def push_async(%__MODULE__{linger: linger} = client, channel, payload, [])
      when is_binary(payload) and is_integer(linger),
      do: coalesce(client, channel!(channel), payload)

  def push_async(%__MODULE__{} = client, channel, payload, opts) when is_binary(payload) do
    mode = ack_mode(opts)
    channel = channel!(channel)
    async(client, mode, 1, &Frame.encode_push(&1, mode, channel, payload))
  end

  def push_async(%__MODULE__{} = client, channel, payloads, opts) when is_list(payloads) do
    mode = ack_mode(opts)
    channel = channel!(channel)
    count = length(payloads)
    async(client, mode, count, &measured({:push_batch, &1, mode, channel, count, payloads}))
  end

  defp ack_mode([]), do: :ack

  defp ack_mode(opts) do
    case Keyword.validate!(opts, ack: true)[:ack] do
      true -> :ack
      false -> :no_ack
      other -> raise ArgumentError, "expected :ack to be a boolean, got: #{inspect(other)}"
    end
  end

  defp measured(frame) do
    data = Frame.encode(frame)
    {data, IO.iodata_length(data)}
  end

  # `encode` takes the push's corr and returns its bytes and their count.
  defp async(%__MODULE__{counters: counters} = client, mode, count, encode) do
    case Counters.reserve(counters, count, client.max_pending) do
      :closed ->
        {:error, :closed}

      :full ->
        {:error, :backpressure}

      :ok ->
        corr = Counters.next_corr(counters)

        case encode_reserved(client, encode, corr, count) do
          {:ok, data, bytes} ->
            send(client.pid, {:ringbus_push, data, bytes, corr, count, mode})
            if mode == :ack, do: {:ok, corr}, else: :ok

          error ->
            Counters.release(counters, count)
            error
        end
    end
  end

  # The payload goes to the connection as it is; the connection gathers it
  # with the others of its channel into one PUSH_BATCH (see Coalescing).
  defp coalesce(%__MODULE__{counters: counters} = client, channel, payload) do
    if byte_size(payload) + byte_size(channel) + Frame.push_overhead() > client.max_frame_size do
      if Counters.closed?(counters), do: {:error, :closed}, else: {:error, :frame_too_large}
    else
      case Counters.reserve(counters, 1, client.max_pending) do
        :ok ->
          corr = Counters.next_corr(counters)
          send(client.pid, {:ringbus_coalesce, channel, payload, corr})
          {:ok, corr}

        :full ->
          {:error, :backpressure}

        :closed ->
          {:error, :closed}
      end
    end
  end

  # Gives the reserved room back when the encoder raises on a bad payload.
  defp encode_reserved(client, encode, corr, count) do
    {data, bytes} = encode.(corr)

    if bytes - Frame.length_prefix_size() > client.max_frame_size,
      do: {:error, :frame_too_large},
      else: {:ok, data, bytes}
  rescue
    e ->
      Counters.release(client.counters, count)
      reraise e, __STACKTRACE__
  end

  @doc "The async messages in flight now: pushed and not yet acked (or written, in no-ack mode)."
  @spec pending(t()) :: non_neg_integer()
  def pending(%__MODULE__{counters: counters}), do: Counters.pending(counters)

  ## Reads

  @doc """
  Takes the oldest message out of a channel: `{:ok, seq, payload}`, or
  `:empty`. Each message is pulled at most once over all clients.
  """
  @spec pull(t(), channel()) :: {:ok, Ringbus.seq(), binary()} | :empty | {:error, reason()}
  def pull(client, channel), do: call(client, &{:pull, &1, channel!(channel)})

  @doc """
  Reads up to `max` messages from seq `from` on, without removing them.

  Returns the messages in seq order and `lost`: how many messages at or after
  `from` were gone before the first one returned. The server may return fewer
  than `max` (it caps a read at 1,000 messages and at its max frame size); to
  go on, read again from the seq after the last one returned.
  """
  @spec read(t(), channel(), from(), non_neg_integer()) ::
          {:ok, [{Ringbus.seq(), binary()}], non_neg_integer()} | {:error, reason()}
  def read(client, channel, from, max) when is_integer(max) and max in 0..0xFFFF_FFFF,
    do:
      with(
        {:ok, messages, lost, _inc} <- read(client, channel, from, max, []),
        do: {:ok, messages, lost}
      )

  @doc """
  Like `read/4`, with options, and answers with the channel's incarnation:
  `{:ok, messages, lost, incarnation}`.

    * `:incarnation` - the incarnation the reader expects (from an earlier
      answer or `info/2`), or `:any`. When the channel has another, it was
      created again since (see "Incarnations") and the read answers
      `{:error, :new_incarnation}`. Defaults to `:any`.
    * `:times` - when true, each message comes with the time it was
      stored: `{seq, payload, ms}` (see "Time" in `Ringbus`). Default `false`.

  `from` may be `{:time, ms}`: the first message stored at or after that
  system time. Bad options raise `ArgumentError`.
  """
  @spec read(t(), channel(), from(), non_neg_integer(),
          incarnation: pos_integer() | :any,
          times: boolean()
        ) ::
          {:ok, [{Ringbus.seq(), binary()} | {Ringbus.seq(), binary(), integer()}],
           non_neg_integer(), pos_integer()}
          | {:error, reason()}
  def read(client, channel, from, max, opts) when is_integer(max) and max in 0..0xFFFF_FFFF do
    Request.from!(from, "a seq or {:time, ms}")
    {times?, opts} = Keyword.pop(opts, :times, false)
    Options.check!(:times, times?, &is_boolean/1, "a boolean")

    case {incarnation!(opts), times? or not is_integer(from)} do
      {:any, false} ->
        call(client, &{:read, &1, channel!(channel), from, max})

      {inc, false} ->
        call(client, &{:read, &1, channel!(channel), from, max, inc})

      {inc, true} ->
        call(client, &{:read, &1, channel!(channel), from, max, Request.any(inc), times?})
    end
  end

  @typedoc "Where a read or subscription starts: a seq, or `{:time, ms}` (system ms)."
  @type from :: Ringbus.seq() | {:time, non_neg_integer()}

  @doc "Like `read/4`, but returns `{messages, lost}` or raises `Ringbus.Client.Error`."
  @spec read!(t(), channel(), Ringbus.seq(), non_neg_integer()) ::
          {[{Ringbus.seq(), binary()}], non_neg_integer()}
  def read!(client, channel, from, max) do
    case read(client, channel, from, max) do
      {:ok, messages, lost} -> {messages, lost}
      {:error, reason} -> raise Error, reason: reason
    end
  end

  @doc "The number of messages a channel holds."
  @spec len(t(), channel()) :: {:ok, non_neg_integer()} | {:error, reason()}
  def len(client, channel), do: call(client, &{:len, &1, channel!(channel)})

  @doc "Like `len/2`, but returns the length or raises `Ringbus.Client.Error`."
  @spec len!(t(), channel()) :: non_neg_integer()
  def len!(client, channel), do: len(client, channel) |> bang()

  @doc """
  A channel's figures, as `Ringbus.info/1` gives them (see `t:Ringbus.info/0`),
  with its `:incarnation`, but for a replicated channel's Raft figures, which
  the protocol does not carry (`:oldest_time`, `:newest_time`, `:max_age`
  and `:expired` are there, protocol version 6). Two more keys:

    * `:replicas` - the channel's members, for a replicated channel; `nil`
      for a memory channel
    * `:nodes` - the nodes the server's node is connected to, itself
      included: the most `:replicas` a `create/4` through it can ask for now

  A server that speaks only version 3 refuses this client's `HELLO` with
  `:bad_version`.
  """
  @spec info(t(), channel()) :: {:ok, Ringbus.info()} | {:error, reason()}
  def info(client, channel), do: call(client, &{:info, &1, channel!(channel)})

  @doc "Like `info/2`, but returns the figures or raises `Ringbus.Client.Error`."
  @spec info!(t(), channel()) :: Ringbus.info()
  def info!(client, channel), do: info(client, channel) |> bang()

  @doc "Sends `PING` and waits for `PONG`."
  @spec ping(t()) :: :ok | {:error, reason()}
  def ping(client), do: call(client, &{:ping, &1})

  ## Subscriptions

  @typedoc """
  Options of `subscribe/3`:

    * `:from` - where to start: a seq, `:earliest` (the oldest message held),
      `:latest` (the next message pushed) or `{:time, ms}` (the first
      message stored at or after that system time). Default `:latest`.
    * `:times` - when true, each delivered message comes with the time it
      was stored: `{seq, payload, ms}`. Default `false`.
    * `:credit` - messages the server may send before `ack/3` returns
      credit; the server caps it at its `max_credit`. Default `1000`.
    * `:max_batch` - messages in one delivery, at most. Default `256`.
    * `:incarnation` - the incarnation the subscriber expects, to resume
      `from:` a seq of it, or `:any`; see "Incarnations". When the channel
      has another, `{:error, :new_incarnation}` and no subscription. Given,
      the answer is `{:ok, sub_id, incarnation}`: the incarnation the
      subscription's seqs are of. Default: not given, `{:ok, sub_id}`.
  """
  @type subscribe_options :: [
          from: from() | :earliest | :latest,
          times: boolean(),
          credit: pos_integer(),
          max_batch: pos_integer(),
          incarnation: pos_integer() | :any
        ]

  @doc """
  Subscribes the owner to a channel; see the Subscriptions section of the
  module doc. Returns the subscription id, and with `:incarnation` the
  channel's incarnation.
  """
  @spec subscribe(t(), channel(), subscribe_options()) ::
          {:ok, sub_id()} | {:ok, sub_id(), pos_integer()} | {:error, reason()}
  def subscribe(client, channel, opts \\ []) do
    {pin, opts} = Keyword.pop(opts, :incarnation)
    inc = if pin == nil, do: :any, else: incarnation!(incarnation: pin)
    opts = Keyword.validate!(opts, from: :latest, credit: 1000, max_batch: 256, times: false)
    from = opts[:from]

    if from not in [:earliest, :latest],
      do: Request.from!(from, "a seq, :earliest, :latest or {:time, ms}")

    Request.delivery_options!(opts)

    {credit, max_batch} = {opts[:credit], opts[:max_batch]}

    request =
      case {inc, opts[:times] or match?({:time, _}, from)} do
        {:any, false} ->
          &{:subscribe, &1, channel!(channel), from, credit, max_batch}

        {inc, false} ->
          &{:subscribe, &1, channel!(channel), from, credit, max_batch, inc}

        {inc, true} ->
          &{:subscribe, &1, channel!(channel), from, credit, max_batch, Request.any(inc),
           opts[:times]}
      end

    case call(client, request) do
      {:ok, sub_id, inc} when pin != nil -> {:ok, sub_id, inc}
      {:ok, sub_id, _inc} -> {:ok, sub_id}
      error -> error
    end
  end

  @doc """
  Like `subscribe/3`, but returns the id (with `:incarnation`, `{sub_id,
  incarnation}`) or raises `Ringbus.Client.Error`.
  """
  @spec subscribe!(t(), channel(), subscribe_options()) :: sub_id() | {sub_id(), pos_integer()}
  def subscribe!(client, channel, opts \\ []) do
    case subscribe(client, channel, opts) do
      {:ok, sub_id, inc} -> {sub_id, inc}
      other -> bang(other)
    end
  end

  @doc """
  Returns `count` messages of credit to a subscription. Does not wait: the
  server answers `CREDIT` only when it fails, and such an answer is dropped
  (it happens when the credit crosses the subscription's end). Returns `:ok`,
  or `{:error, :closed}`.
  """
  @spec ack(t(), sub_id(), pos_integer()) :: :ok | {:error, :closed}
  def ack(%__MODULE__{} = client, sub_id, count)
      when is_integer(sub_id) and sub_id >= 0 and is_integer(count) and count > 0 do
    if Counters.closed?(client.counters) do
      {:error, :closed}
    else
      corr = Counters.next_corr(client.counters)
      data = Frame.encode({:credit, corr, sub_id, min(count, 0xFFFF_FFFF)})
      send(client.pid, {:ringbus_write, data, IO.iodata_length(data)})
      :ok
    end
  end

  @doc """
  Ends a subscription. No delivery for it follows the `:ok`, though some may
  be in the owner's mailbox already.
  """
  @spec unsubscribe(t(), sub_id()) :: :ok | {:error, reason()}
  def unsubscribe(client, sub_id) when is_integer(sub_id) and sub_id >= 0,
    do: call(client, &{:unsubscribe, &1, sub_id}, {:unsubscribe, sub_id})

  ## Internals

  @doc false
  # For Ringbus.Client.Groups: a request whose answer may take `extra` ms
  # beyond the client's `:timeout` (a fetch that waits on the server).
  def request(client, frame, extra), do: call(client, frame, nil, extra)

  # A request that waits for its answer: encoded here, written by the process.
  defp call(%__MODULE__{} = client, frame, action \\ nil, extra \\ 0) do
    corr = Counters.next_corr(client.counters)
    timeout = if client.timeout == :infinity, do: :infinity, else: client.timeout + extra

    with {:ok, data, bytes} <- encode(client, frame.(corr)) do
      GenServer.call(client.pid, {:request, corr, data, bytes, action}, timeout)
    end
  catch
    :exit, {:timeout, _} -> {:error, :timeout}
    :exit, _ -> {:error, :closed}
  end

  defp encode(client, frame) do
    data = Frame.encode(frame)
    bytes = IO.iodata_length(data)

    if bytes - Frame.length_prefix_size() > client.max_frame_size,
      do: {:error, :frame_too_large},
      else: {:ok, data, bytes}
  end

  defp channel!(channel) when is_binary(channel) and byte_size(channel) in 1..@max_name,
    do: channel

  defp channel!(channel) do
    raise ArgumentError,
          "expected a channel name of 1 to #{@max_name} bytes, got: #{inspect(channel)}"
  end

  defp bang(:ok), do: :ok
  defp bang({:ok, value}), do: value
  defp bang({:error, reason}), do: raise(Error, reason: reason)

  defp host!(host) when is_binary(host), do: String.to_charlist(host)
  defp host!(host) when is_list(host), do: host
  defp host!(ip) when is_tuple(ip) and tuple_size(ip) in [4, 8], do: ip

  defp host!(other),
    do: raise(ArgumentError, "expected :host to be a hostname or an IP, got: #{inspect(other)}")

  defp timeout?(:infinity), do: true
  defp timeout?(t), do: is_integer(t) and t > 0

  defp incarnation!(opts) do
    opts = Keyword.validate!(opts, incarnation: :any)
    inc = opts[:incarnation]
    check = &(&1 == :any or (is_integer(&1) and &1 in 1..0xFFFF_FFFF_FFFF_FFFF))
    Options.check!(:incarnation, inc, check, ":any or a positive integer below 2^64")
    inc
  end
end
