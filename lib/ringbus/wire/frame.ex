defmodule Ringbus.Wire.Frame do
  @moduledoc """
  Encoding and decoding of single frames of the Ringbus protocol, version 7
  (and 3 to 6: 6 is 7 without group subscriptions, 5 is 6 without time, 4 is 5
  without the consumer-group frames, and 3 differs from 4 only in `INFO_OK`).

  `docs/PROTOCOL.md` is the specification; this module is its reference
  implementation. Every frame is a `u32` length (the bytes of opcode and body),
  a `u8` opcode and a body; integers are big-endian. Here a frame is a tagged
  tuple whose first element names its type and whose other elements follow
  the order of the fields on the wire.

  The codec is pure: it takes and returns data and never touches a socket.
  To cut a byte stream into frames use `Ringbus.Wire.Decoder`. It is kept
  whole: each frame's encoder and decoder sit side by side on one set of
  opcodes and field guards, so a layout is written and read in one place.

  ## Requests (client to server)

      {:hello, corr, version, flags, token}            # token: binary | nil
      {:create, corr, name, capacity, overflow, max_bytes, replicas}
                                                       # max_bytes: pos | nil; replicas: 1..255 | nil
      {:create, corr, name, capacity, overflow, max_bytes, replicas, max_age}  # version 6
      {:delete, corr, name}
      {:push, corr, ack_mode, name, payload}           # ack_mode: :ack | :no_ack
      {:push_batch, corr, ack_mode, name, count, payloads}
      {:tagged_push, corr, ack_mode, name, {producer, n}, payload}
      {:tagged_push_batch, corr, ack_mode, name, {producer, n}, count, payloads}
      {:pull, corr, name}
      {:read, corr, name, from_seq, max}
      {:read, corr, name, from_seq, max, incarnation}  # incarnation stated
      {:read, corr, name, from, max, incarnation, times?}  # version 6: from: seq | {:time, ms}
      {:len, corr, name}
      {:info, corr, name}
      {:subscribe, corr, name, from, credit, max_batch} # from: seq | :earliest | :latest
      {:subscribe, corr, name, from, credit, max_batch, incarnation}
      {:subscribe, corr, name, from, credit, max_batch, incarnation, times?}  # version 6
      {:credit, corr, sub_id, credit}
      {:unsubscribe, corr, sub_id}
      {:ping, corr}

  and version 5's consumer-group requests, `{:group_create, ...}` to
  `{:group_info, ...}`, laid out in `Ringbus.Wire.GroupFrame`.

  ## Responses and server-initiated frames (server to client)

      {:hello_ok, corr, version, limits}               # limits: see t:limits/0
      {:ok, corr}
      {:push_acks, count, acks}                        # acks: [{corr, {:ok, seq} | {:error, reason}}]
      {:pull_ok, corr, seq, payload}
      {:empty, corr}
      {:read_ok, corr, incarnation, lost, count, messages}  # messages: [{seq, payload}]
      {:len_ok, corr, len}
      {:info_ok, corr, info}                           # info: see below
      {:subscribed, corr, sub_id, incarnation}
      {:deliver, sub_id, lost, count, messages}
      {:sub_closed, sub_id, reason}
      {:pong, corr}
      {:error, corr, reason, message}

  and version 5's `{:group_messages, ...}`, `{:group_count, ...}` and
  `{:group_info_ok, ...}`, and version 6's `{:read_timed_ok, ...}` and
  `{:deliver_timed, ...}` (`Ringbus.Wire.TimeFrame`). Version 6's `:read`
  and `:subscribe` may start `from` `{:time, ms}`; without it and times
  they decode to the older forms. `INFO_OK` is `Ringbus.Wire.InfoFrame`'s.

  A batch's payloads are a list, or, from a decoder that packs large
  batches (`Ringbus.Wire.Decoder.new/2`'s `:pack_batches`), one
  `Ringbus.Wire.Entries`: the entries as they came, walked as an
  enumerable. The encoder takes either.

  `:tagged_push` and `:tagged_push_batch` are `PUSH` and `PUSH_BATCH` with
  the producer-tag flag (0x02) and its fields: `producer`, 1 to 255 bytes,
  and `n`, a u64 (`Ringbus.push/3`'s `producer: {producer, n}`).

  A `:read` or `:subscribe` with an `incarnation` (a u64) is `READ` or
  `SUBSCRIBE` with the incarnation flag (0x01) and that field: the server
  answers it `:new_incarnation` when the channel has another
  (`Ringbus.read/4`'s `incarnation: i`). `READ_OK`, `SUBSCRIBED` and
  `INFO_OK` carry the channel's incarnation, which `info` has as
  `:incarnation`.

  Frames that carry a list carry its length too (`count`), so neither side
  walks a long list to count it. The encoder counts while it encodes and
  raises `ArgumentError` when the count is wrong.

  `overflow` is `:drop_oldest` or `:reject`, as in `Ringbus.create/2`, and
  `info` has the keys of `t:Ringbus.info/0` that version 3's `INFO_OK`
  carries; with `:replicas` (`nil` for a memory channel, else its members,
  1 to 255) and `:nodes` (a u16) too, it is version 4's, and a version 4
  `INFO_OK` decodes to such a map. Error reasons are the
  atoms of `Ringbus.Wire.ErrorCode`, or integers for codes this version does
  not know.

  ## Example

      iex> frame = {:push, 7, :ack, "events", "hello"}
      iex> bytes = IO.iodata_to_binary(Ringbus.Wire.Frame.encode(frame))
      iex> Base.encode16(bytes)
      "00000017" <> "04" <> "00000007" <> "00" <> "0006" <> "6576656E7473" <> "00000005" <> "68656C6C6F"
      iex> Ringbus.Wire.Frame.decode(bytes, 1024)
      {:ok, {:push, 7, :ack, "events", "hello"}, ""}

  ## Payloads

  A payload decoded from a frame is a sub-binary of the bytes it was decoded
  from: the codec copies nothing. Whoever keeps a payload for long decides
  whether to copy it (`Ringbus.Channel.Ring` does, as it stores it).

  ## Errors

  `decode/2` and `decode_body/1` return `{:error, reason}` with:

    * `:frame_too_large` - the length prefix is larger than the maximum;
      checked before any byte of the body is looked at
    * `:empty_frame` - the length prefix is 0, so there is no opcode
    * `{:unknown_opcode, byte}` - the opcode is not one of this version
    * `{:truncated, type}` - the body ends before its fields do
    * `{:trailing_bytes, type}` - the body goes on after its last field
    * `{:bad_field, type, field}` - a field holds a value its encoding does not
      allow: `:magic`, `:name` (empty or longer than 255 bytes), `:flags`
      (reserved bits set), `:overflow`, `:from`, `:status`, `:code`
  """

  alias Ringbus.Wire.{Entries, ErrorCode, GroupFrame, InfoFrame, TimeFrame}

  @magic "RBUS"
  @version 7
  # The versions a server speaks: a version 3 client gets version 3's
  # INFO_OK, without `replicas` and `nodes`; versions 3 and 4 have no
  # consumer-group frames; versions 3 to 5 have no time; 3 to 6 no group subscriptions.
  @versions [3, 4, 5, 6, 7]
  # Ringbus.Channel.max_name_bytes/0, which the wire may not call (it depends
  # on nothing); Ringbus.Resp.ErrorsTest keeps the two equal.
  @max_name 255
  @default_port 7171

  # The largest HELLO (opcode, corr, magic, version, flags, a 65,535-byte
  # token) and the largest ERROR (opcode, corr, code, a 65,535-byte message):
  # the limits before the handshake on each side.
  @max_hello_frame 1 + 4 + 4 + 2 + 2 + 2 + 0xFFFF
  @max_error_frame 1 + 4 + 2 + 2 + 0xFFFF

  # Sizes the senders plan with (each documented at its function below).
  @length_prefix 4
  # PUSH: opcode, corr, flags, name length, then payload length; PUSH_BATCH
  # the same with its count in the place of the payload length.
  @push_overhead 1 + 4 + 1 + 2 + 4
  # A PUSH_BATCH entry's payload length.
  @batch_entry_overhead 4
  # A message in READ_OK or DELIVER: seq, payload length.
  @message_overhead 8 + 4
  # PUSH_ACKS: opcode and count, then per push its corr, status and seq.
  @push_acks_overhead 1 + 4
  @push_ack_size 4 + 2 + 8
  # What a server keeps of max_frame_size for the largest header a stored
  # message is sent with (PULL_OK, READ_OK, DELIVER).
  @payload_headroom 64
  @max_capacity 0xFFFF_FFFF
  @max_replicas 255

  # Requests
  @hello 0x01
  @create 0x02
  @delete 0x03
  @push 0x04
  @push_batch 0x05
  @pull 0x06
  @read 0x07
  @len 0x08
  @info 0x09
  @subscribe 0x0A
  @credit 0x0B
  @unsubscribe 0x0C
  @ping 0x0D

  # Responses and server-initiated frames
  @hello_ok 0x81
  @ok 0x82
  @push_acks 0x83
  @pull_ok 0x84
  @empty 0x85
  @read_ok 0x86
  @len_ok 0x87
  @info_ok 0x88
  @subscribed 0x89
  @deliver 0x8A
  @sub_closed 0x8B
  @pong 0x8C
  @error 0xFF

  @opcodes [
    hello: @hello,
    create: @create,
    delete: @delete,
    push: @push,
    push_batch: @push_batch,
    pull: @pull,
    read: @read,
    len: @len,
    info: @info,
    subscribe: @subscribe,
    credit: @credit,
    unsubscribe: @unsubscribe,
    ping: @ping,
    hello_ok: @hello_ok,
    ok: @ok,
    push_acks: @push_acks,
    pull_ok: @pull_ok,
    empty: @empty,
    read_ok: @read_ok,
    len_ok: @len_ok,
    info_ok: @info_ok,
    subscribed: @subscribed,
    deliver: @deliver,
    sub_closed: @sub_closed,
    pong: @pong,
    error: @error
  ]

  # Version 5's consumer-group frames (`Ringbus.Wire.GroupFrame`), among
  # the others in opcode order.
  @groups GroupFrame.requests() ++ GroupFrame.responses()
  @group_types Keyword.keys(@groups)
  @group_opcodes Keyword.values(@groups)
  @timed TimeFrame.responses()
  @timed_types Keyword.keys(@timed)
  @timed_opcodes Keyword.values(@timed)
  @opcodes Enum.sort_by(@opcodes ++ @groups ++ @timed, &elem(&1, 1))

  # Body sizes of the frames that have no variable-length field.
  @fixed_sizes [
    credit: 12,
    unsubscribe: 8,
    ping: 4,
    hello_ok: 26,
    ok: 4,
    empty: 4,
    len_ok: 12,
    subscribed: 16,
    sub_closed: 6,
    pong: 4
  ]

  @no_ack_flag 0x01
  @tagged_flag 0x02
  # READ and SUBSCRIBE: an incarnation follows the name; (version 6) READ's
  # `from` is a time; the messages carry their times.
  @incarnation_flag 0x01
  @time_flag 0x02
  @times_flag 0x04

  @from_seq 0
  @from_earliest 1
  @from_latest 2
  @from_time 3

  @typedoc "A correlation id, chosen by the client; 0 is kept for errors tied to no request."
  @type corr :: 0..0xFFFF_FFFF
  @typedoc "A channel name: 1 to 255 bytes."
  @type name :: binary()
  @type seq :: Ringbus.seq()
  @typedoc "A subscription id, chosen by the server, unique on its connection."
  @type sub_id :: 0..0xFFFF_FFFF
  @type u32 :: 0..0xFFFF_FFFF
  @type u64 :: 0..0xFFFF_FFFF_FFFF_FFFF
  @type ack_mode :: :ack | :no_ack
  @type overflow :: :drop_oldest | :reject

  @typedoc """
  The server's limits, sent in `HELLO_OK`:

    * `:max_frame_size` - the largest length prefix either side may send
    * `:max_payload_size` - the largest payload the server takes in a push
    * `:max_subscriptions` - subscriptions one connection may hold at once
    * `:max_credit` - the most credit one subscription may hold; more is ignored
    * `:idle_timeout` - milliseconds without a frame before the server closes
      the connection, or `:infinity`
  """
  @type limits :: %{
          max_frame_size: u32(),
          max_payload_size: u32(),
          max_subscriptions: u32(),
          max_credit: u32(),
          idle_timeout: pos_integer() | :infinity
        }

  @type request ::
          {:hello, corr(), 0..0xFFFF, 0..0xFFFF, binary() | nil}
          | {:create, corr(), name(), u32(), overflow(), pos_integer() | nil, 1..255 | nil}
          | {:delete, corr(), name()}
          | {:push, corr(), ack_mode(), name(), binary()}
          | {:push_batch, corr(), ack_mode(), name(), u32(), [binary()] | Entries.t()}
          | {:tagged_push, corr(), ack_mode(), name(), tag(), binary()}
          | {:tagged_push_batch, corr(), ack_mode(), name(), tag(), u32(),
             [binary()] | Entries.t()}
          | {:pull, corr(), name()}
          | {:read, corr(), name(), seq(), u32()}
          | {:read, corr(), name(), seq(), u32(), u64()}
          | {:len, corr(), name()}
          | {:info, corr(), name()}
          | {:subscribe, corr(), name(), seq() | :earliest | :latest, u32(), u32()}
          | {:subscribe, corr(), name(), seq() | :earliest | :latest, u32(), u32(), u64()}
          | {:credit, corr(), sub_id(), u32()}
          | {:unsubscribe, corr(), sub_id()}
          | {:ping, corr()}
          | GroupFrame.t()

  @typedoc "A producer tag: a producer id of 1 to 255 bytes and its push's number."
  @type tag :: {name(), u64()}

  @type push_ack :: {corr(), {:ok, seq()} | {:error, ErrorCode.t()}}

  @type response ::
          {:hello_ok, corr(), 0..0xFFFF, limits()}
          | {:ok, corr()}
          | {:push_acks, u32(), [push_ack()]}
          | {:pull_ok, corr(), seq(), binary()}
          | {:empty, corr()}
          | {:read_ok, corr(), u64(), u64(), u32(), [{seq(), binary()}]}
          | {:len_ok, corr(), u64()}
          | {:info_ok, corr(), Ringbus.info()}
          | {:subscribed, corr(), sub_id(), u64()}
          | {:deliver, sub_id(), u64(), u32(), [{seq(), binary()}]}
          | {:sub_closed, sub_id(), ErrorCode.t()}
          | {:pong, corr()}
          | {:error, corr(), ErrorCode.t(), binary()}
          | GroupFrame.t()

  @type t :: request() | response()

  @typedoc "A frame type: a key of `opcodes/0`."
  @type type :: unquote(@opcodes |> Keyword.keys() |> Enum.reduce(&{:|, [], [&1, &2]}))

  @typedoc "Which frames a receiver takes: a server `:requests`, a client `:responses`."
  @type direction :: :requests | :responses | :any

  @type decode_error ::
          :frame_too_large
          | :empty_frame
          | {:unknown_opcode, byte()}
          | {:truncated, type()}
          | {:trailing_bytes, type()}
          | {:bad_field, type(), atom()}

  defguardp is_u16(x) when is_integer(x) and x >= 0 and x <= 0xFFFF
  defguardp is_u32(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF
  defguardp is_u64(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF_FFFF_FFFF
  defguardp is_name(x) when is_binary(x) and byte_size(x) >= 1 and byte_size(x) <= @max_name
  defguardp is_ack_mode(x) when x in [:ack, :no_ack]
  defguardp is_overflow(x) when x in [:drop_oldest, :reject]

  @doc "The newest protocol version this module speaks, the one a client says: `7`."
  @spec version() :: pos_integer()
  def version, do: @version

  @doc """
  Every protocol version this module speaks, `[3, 4, 5, 6, 7]`: a server
  answers a `HELLO` of any of them in that version. Version 4's `INFO_OK`
  adds `replicas` and `nodes`; version 5 the consumer-group frames
  (`Ringbus.Wire.GroupFrame`); version 6 time; version 7 group
  subscriptions (`Ringbus.Wire.GroupPushFrame`).
  """
  @spec versions() :: [pos_integer()]
  def versions, do: @versions

  @doc "The port a server listens on and a client connects to unless told otherwise: `7171`."
  @spec default_port() :: :inet.port_number()
  def default_port, do: @default_port

  @doc "The longest channel name in bytes, `255`; names are 1 to that many bytes."
  @spec max_name_size() :: pos_integer()
  def max_name_size, do: @max_name

  @doc """
  The length prefix of the largest `HELLO`, 65,550: the most a server accepts
  before the handshake.
  """
  @spec max_hello_frame_size() :: pos_integer()
  def max_hello_frame_size, do: @max_hello_frame

  @doc """
  The length prefix of the largest `ERROR`, 65,544: enough for a client to
  read the answer to its `HELLO`, whatever it is.
  """
  @spec max_error_frame_size() :: pos_integer()
  def max_error_frame_size, do: @max_error_frame

  @doc """
  The bytes of a frame's length prefix, 4. `max_frame_size` bounds the
  length, so a frame of `n` bytes in all fits when `n - 4` is within it.
  """
  @spec length_prefix_size() :: pos_integer()
  def length_prefix_size, do: @length_prefix

  @doc """
  The bytes of a `PUSH` besides its name and payload, 12, and of a
  `PUSH_BATCH` besides its name and entries (the same 12); neither counts
  the length prefix.
  """
  @spec push_overhead() :: pos_integer()
  def push_overhead, do: @push_overhead

  @doc "The bytes a `PUSH_BATCH` entry takes besides its payload: its u32 length, 4."
  @spec push_batch_entry_overhead() :: pos_integer()
  def push_batch_entry_overhead, do: @batch_entry_overhead

  @doc "The bytes a message takes in `READ_OK` or `DELIVER` besides its payload: 12."
  @spec message_overhead() :: pos_integer()
  def message_overhead, do: @message_overhead

  @doc """
  The most acks one `PUSH_ACKS` within `max_frame_size` carries: 14 bytes
  each, after the frame's opcode and count.

      iex> Ringbus.Wire.Frame.max_push_acks(1024)
      72
  """
  @spec max_push_acks(pos_integer()) :: non_neg_integer()
  def max_push_acks(max_frame_size), do: div(max_frame_size - @push_acks_overhead, @push_ack_size)

  @doc """
  The largest payload a server with `max_frame_size` stores:
  `max_frame_size - 64`, so that every stored message fits in a `PULL_OK`,
  a `READ_OK` or a `DELIVER` with its header.
  """
  @spec max_payload_size(pos_integer()) :: integer()
  def max_payload_size(max_frame_size), do: max_frame_size - @payload_headroom

  @doc "The largest capacity `CREATE` and `INFO_OK` carry, a u32: 2^32 - 1."
  @spec max_capacity() :: pos_integer()
  def max_capacity, do: @max_capacity

  @doc "The most replicas `CREATE` asks for, a u8: 255."
  @spec max_replicas() :: pos_integer()
  def max_replicas, do: @max_replicas

  @doc "Every frame type with its opcode, requests first."
  @spec opcodes() :: [{type(), byte()}]
  def opcodes, do: @opcodes

  @doc """
  Whether a frame goes from client to server.

  A server treats a frame for which this is false as an unknown opcode.
  """
  @spec request?(t()) :: boolean()
  def request?(frame) when is_tuple(frame), do: opcode(elem(frame, 0)) < 0x80

  @doc "The opcode of a frame type: a tagged push's is its untagged one's."
  @spec opcode(type() | :tagged_push | :tagged_push_batch) :: byte()
  def opcode(:tagged_push), do: @push
  def opcode(:tagged_push_batch), do: @push_batch
  def opcode(type), do: Keyword.fetch!(@opcodes, type)

  ## Encoding

  @doc """
  Encodes a frame, length prefix included, as iodata.

  Payloads go into the iodata as they are, never copied. Raises
  `ArgumentError` when the frame is not one of `t:t/0` or a field is out of
  the range of its encoding (a name of 0 or more than 255 bytes, an integer
  that does not fit, a `count` that is not the length of its list).
  """
  @spec encode(t()) :: iodata()
  def encode(frame) do
    case body(frame) do
      {opcode, body} -> frame_iodata(opcode, body, IO.iodata_length(body))
      {opcode, body, size} -> frame_iodata(opcode, body, size)
    end
  end

  @doc """
  Encodes `{:push, corr, mode, name, payload}` as `encode/1` does, with its
  size in bytes: a client that sends one message a push encodes many. A
  payload of up to 64 bytes goes into one binary with the header, which is
  cheaper to keep and to pass between processes than iodata; a larger one
  stays a binary of its own, never copied.

      iex> {data, 27} = Ringbus.Wire.Frame.encode_push(4, :ack, "events", "hello")
      iex> IO.iodata_to_binary(data) == IO.iodata_to_binary(Ringbus.Wire.Frame.encode({:push, 4, :ack, "events", "hello"}))
      true
  """
  @spec encode_push(corr(), ack_mode(), name(), binary()) :: {iodata(), pos_integer()}
  def encode_push(corr, mode, name, payload)
      when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_binary(payload) do
    size = byte_size(payload)
    length = @push_overhead + byte_size(name) + size
    flags = push_flags(mode)

    # Built in one expression: appending to a binary held in a variable
    # would make a writable off-heap binary, costly to copy into a message.
    if size <= 64 do
      frame =
        <<length::32, @push, corr::32, flags, byte_size(name)::16, name::binary, size::32,
          payload::binary>>

      {frame, length + @length_prefix}
    else
      header = <<length::32, @push, corr::32, flags, byte_size(name)::16, name::binary, size::32>>
      {[header, payload], length + @length_prefix}
    end
  end

  # A field out of range: raises as encode/1 does.
  def encode_push(corr, mode, name, payload), do: encode({:push, corr, mode, name, payload})

  @doc """
  Appends one payload to the entries of a `PUSH_BATCH` being built, for
  `encode_push_batch/5`: a client that gathers many small pushes into one
  batch appends each as it comes, into one binary that grows in place.

      iex> entries = "" |> Ringbus.Wire.Frame.batch_entry("a") |> Ringbus.Wire.Frame.batch_entry("bc")
      iex> {data, size} = Ringbus.Wire.Frame.encode_push_batch(9, :ack, "events", 2, entries)
      iex> IO.iodata_to_binary(data) == IO.iodata_to_binary(Ringbus.Wire.Frame.encode({:push_batch, 9, :ack, "events", 2, ["a", "bc"]}))
      true
      iex> size == IO.iodata_length(data)
      true
  """
  @spec batch_entry(binary(), binary()) :: binary()
  def batch_entry(entries, payload) when is_binary(payload),
    do: <<entries::binary, byte_size(payload)::32, payload::binary>>

  @doc """
  The payload of entries that `batch_entry/2` built from one payload.

      iex> "" |> Ringbus.Wire.Frame.batch_entry("abc") |> Ringbus.Wire.Frame.batch_entry_payload()
      "abc"
  """
  @spec batch_entry_payload(binary()) :: binary()
  def batch_entry_payload(<<size::32, payload::binary-size(size)>>), do: payload

  @doc """
  Encodes a `PUSH_BATCH` of `count` payloads whose entries `batch_entry/2`
  built, as `encode/1` does, with its size in bytes.
  """
  @spec encode_push_batch(corr(), ack_mode(), name(), u32(), binary()) ::
          {iodata(), pos_integer()}
  def encode_push_batch(corr, mode, name, count, entries)
      when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_u32(count) and
             is_binary(entries) do
    head = push_batch_head(corr, mode, name, count)
    size = byte_size(head) + byte_size(entries)
    {frame_iodata(@push_batch, [head, entries], size), size + 1 + @length_prefix}
  end

  defp frame_iodata(opcode, body, size) when size + 1 <= 0xFFFF_FFFF,
    do: [<<size + 1::32, opcode>> | body]

  defp frame_iodata(_opcode, _body, size),
    do: raise(ArgumentError, "frame body of #{size} bytes does not fit a u32 length")

  defp body({:hello, corr, version, flags, token})
       when is_u32(corr) and is_u16(version) and is_u16(flags) and
              (is_nil(token) or (is_binary(token) and byte_size(token) <= 0xFFFF)) do
    token = token || ""
    {@hello, [<<corr::32, @magic, version::16, flags::16, byte_size(token)::16>>, token]}
  end

  defp body({:create, corr, name, capacity, overflow, max_bytes, replicas})
       when is_u32(corr) and is_name(name) and is_u32(capacity) and is_overflow(overflow) and
              (is_nil(max_bytes) or (is_u64(max_bytes) and max_bytes > 0)) and
              (is_nil(replicas) or (is_integer(replicas) and replicas in 1..@max_replicas)) do
    max_bytes = max_bytes || 0

    {@create,
     [
       <<corr::32>>,
       name(name),
       <<capacity::32, overflow(overflow), max_bytes::64, replicas || 0>>
     ]}
  end

  defp body({:create, corr, name, capacity, overflow, max_bytes, replicas, max_age})
       when is_nil(max_age) or (is_u64(max_age) and max_age > 0) do
    {@create, v5} = body({:create, corr, name, capacity, overflow, max_bytes, replicas})
    {@create, [v5, <<max_age || 0::64>>]}
  end

  defp body({:delete, corr, name}) when is_u32(corr) and is_name(name),
    do: {@delete, [<<corr::32>> | name(name)]}

  defp body({:push, corr, mode, name, payload})
       when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_binary(payload) do
    {@push, [<<corr::32, push_flags(mode)>>, name(name), <<byte_size(payload)::32>>, payload]}
  end

  defp body({:push_batch, corr, mode, name, count, %Entries{count: count, data: data}})
       when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_u32(count) do
    head = push_batch_head(corr, mode, name, count)
    {@push_batch, [head, data], byte_size(head) + byte_size(data)}
  end

  defp body({:push_batch, corr, mode, name, count, payloads})
       when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_u32(count) and
              is_list(payloads) do
    head = push_batch_head(corr, mode, name, count)
    {entries, size} = encode_payloads(payloads, count, head, byte_size(head))
    {@push_batch, entries, size}
  end

  defp body({:tagged_push, corr, mode, name, {producer, n}, payload})
       when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_name(producer) and
              is_u64(n) and is_binary(payload) do
    {@push,
     [
       <<corr::32, tagged_flags(mode)>>,
       name(name),
       name(producer),
       <<n::64, byte_size(payload)::32>>,
       payload
     ]}
  end

  defp body({:tagged_push_batch, corr, mode, name, {producer, n}, count, payloads})
       when is_u32(corr) and is_ack_mode(mode) and is_name(name) and is_name(producer) and
              is_u64(n) and is_u32(count) and (is_list(payloads) or is_struct(payloads, Entries)) do
    head = [<<corr::32, tagged_flags(mode)>>, name(name), name(producer), <<n::64, count::32>>]
    size = 5 + 2 + byte_size(name) + 2 + byte_size(producer) + 8 + 4

    case payloads do
      %Entries{count: ^count, data: data} ->
        {@push_batch, [head, data], size + byte_size(data)}

      list when is_list(list) ->
        {entries, size} = encode_payloads(list, count, head, size)
        {@push_batch, entries, size}

      _other_count ->
        body(nil)
    end
  end

  defp body({:pull, corr, name}) when is_u32(corr) and is_name(name),
    do: {@pull, [<<corr::32>> | name(name)]}

  defp body({:read, corr, name, from, max})
       when is_u32(corr) and is_name(name) and is_u64(from) and is_u32(max),
       do: {@read, [<<corr::32, 0>>, name(name), <<from::64, max::32>>]}

  defp body({:read, corr, name, from, max, incarnation})
       when is_u32(corr) and is_name(name) and is_u64(from) and is_u32(max) and
              is_u64(incarnation) do
    {@read, [<<corr::32, @incarnation_flag>>, name(name), <<incarnation::64, from::64, max::32>>]}
  end

  defp body({:read, corr, name, from, max, incarnation, times?})
       when is_u32(corr) and is_name(name) and is_u32(max) and is_boolean(times?) and
              (is_nil(incarnation) or is_u64(incarnation)) do
    {flags, from} = read_from(from)
    flags = flags + if(incarnation, do: @incarnation_flag, else: 0) + times_flag(times?)
    inc = if incarnation, do: <<incarnation::64>>, else: <<>>
    {@read, [<<corr::32, flags>>, name(name), inc, <<from::64, max::32>>]}
  end

  defp body({:len, corr, name}) when is_u32(corr) and is_name(name),
    do: {@len, [<<corr::32>> | name(name)]}

  defp body({:info, corr, name}) when is_u32(corr) and is_name(name),
    do: {@info, [<<corr::32>> | name(name)]}

  defp body({:subscribe, corr, name, from, credit, max_batch})
       when is_u32(corr) and is_name(name) and (from in [:earliest, :latest] or is_u64(from)) and
              is_u32(credit) and is_u32(max_batch) do
    {@subscribe,
     [<<corr::32, 0>>, name(name), subscribe_from(from), <<credit::32, max_batch::32>>]}
  end

  defp body({:subscribe, corr, name, from, credit, max_batch, incarnation})
       when is_u32(corr) and is_name(name) and (from in [:earliest, :latest] or is_u64(from)) and
              is_u32(credit) and is_u32(max_batch) and is_u64(incarnation) do
    {@subscribe,
     [
       <<corr::32, @incarnation_flag>>,
       name(name),
       <<incarnation::64>>,
       subscribe_from(from),
       <<credit::32, max_batch::32>>
     ]}
  end

  defp body({:subscribe, corr, name, from, credit, max_batch, incarnation, times?})
       when is_u32(corr) and is_name(name) and is_u32(credit) and is_u32(max_batch) and
              is_boolean(times?) and (is_nil(incarnation) or is_u64(incarnation)) do
    flags = if(incarnation, do: @incarnation_flag, else: 0) + times_flag(times?)
    inc = if incarnation, do: <<incarnation::64>>, else: <<>>

    {@subscribe,
     [<<corr::32, flags>>, name(name), inc, subscribe_from(from), <<credit::32, max_batch::32>>]}
  end

  defp body({:credit, corr, sub, credit}) when is_u32(corr) and is_u32(sub) and is_u32(credit),
    do: {@credit, [<<corr::32, sub::32, credit::32>>]}

  defp body({:unsubscribe, corr, sub}) when is_u32(corr) and is_u32(sub),
    do: {@unsubscribe, [<<corr::32, sub::32>>]}

  defp body({:ping, corr}) when is_u32(corr), do: {@ping, [<<corr::32>>]}

  defp body(
         {:hello_ok, corr, version,
          %{
            max_frame_size: max_frame_size,
            max_payload_size: max_payload_size,
            max_subscriptions: max_subscriptions,
            max_credit: max_credit,
            idle_timeout: idle_timeout
          }}
       )
       when is_u32(corr) and is_u16(version) and is_u32(max_frame_size) and
              is_u32(max_payload_size) and is_u32(max_subscriptions) and is_u32(max_credit) and
              (idle_timeout == :infinity or (is_u32(idle_timeout) and idle_timeout > 0)) do
    idle_timeout = if idle_timeout == :infinity, do: 0, else: idle_timeout

    {@hello_ok,
     [
       <<corr::32, version::16, max_frame_size::32, max_payload_size::32, max_subscriptions::32,
         max_credit::32, idle_timeout::32>>
     ]}
  end

  defp body({:ok, corr}) when is_u32(corr), do: {@ok, [<<corr::32>>]}

  defp body({:push_acks, count, acks}) when is_u32(count) and is_list(acks) do
    entries = encode_acks(acks, <<>>)

    if byte_size(entries) != count * @push_ack_size do
      raise ArgumentError,
            "expected #{count} acks, got #{div(byte_size(entries), @push_ack_size)}"
    end

    {@push_acks, [<<count::32>>, entries], 4 + byte_size(entries)}
  end

  defp body({:pull_ok, corr, seq, payload})
       when is_u32(corr) and is_u64(seq) and is_binary(payload),
       do: {@pull_ok, [<<corr::32, seq::64, byte_size(payload)::32>>, payload]}

  defp body({:empty, corr}) when is_u32(corr), do: {@empty, [<<corr::32>>]}

  defp body({:read_ok, corr, incarnation, lost, count, messages})
       when is_u32(corr) and is_u64(incarnation) and is_u64(lost) and is_u32(count) and
              is_list(messages) do
    head = [<<corr::32, incarnation::64, lost::64, count::32>>]
    {entries, size} = encode_messages(messages, count, head, 24)
    {@read_ok, entries, size}
  end

  defp body({:len_ok, corr, len}) when is_u32(corr) and is_u64(len),
    do: {@len_ok, [<<corr::32, len::64>>]}

  defp body({:info_ok, corr, info}) when is_u32(corr) and is_map(info),
    do: if(body = InfoFrame.body(corr, info), do: {@info_ok, body}, else: body(nil))

  defp body({:subscribed, corr, sub, incarnation})
       when is_u32(corr) and is_u32(sub) and is_u64(incarnation),
       do: {@subscribed, [<<corr::32, sub::32, incarnation::64>>]}

  defp body({:deliver, sub, lost, count, messages})
       when is_u32(sub) and is_u64(lost) and is_u32(count) and is_list(messages) do
    {entries, size} = encode_messages(messages, count, [<<sub::32, lost::64, count::32>>], 16)
    {@deliver, entries, size}
  end

  defp body({:sub_closed, sub, reason}) when is_u32(sub),
    do: {@sub_closed, [<<sub::32, ErrorCode.code(reason)::16>>]}

  defp body({:pong, corr}) when is_u32(corr), do: {@pong, [<<corr::32>>]}

  defp body({:error, corr, reason, message})
       when is_u32(corr) and is_binary(message) and byte_size(message) <= 0xFFFF do
    {@error, [<<corr::32, ErrorCode.code(reason)::16, byte_size(message)::16>>, message]}
  end

  defp body(frame) when elem(frame, 0) in @group_types, do: GroupFrame.body(frame) || body(nil)
  defp body(frame) when elem(frame, 0) in @timed_types, do: TimeFrame.body(frame) || body(nil)

  defp body(frame) do
    raise ArgumentError,
          "expected a Ringbus frame with every field in range, got: " <>
            inspect(frame, limit: 8, printable_limit: 64)
  end

  defp name(name), do: [<<byte_size(name)::16>> | name]

  defp push_batch_head(corr, mode, name, count),
    do: <<corr::32, push_flags(mode), byte_size(name)::16, name::binary, count::32>>

  defp push_flags(:ack), do: 0
  defp push_flags(:no_ack), do: @no_ack_flag

  defp tagged_flags(mode), do: Bitwise.bor(push_flags(mode), @tagged_flag)

  defp overflow(:drop_oldest), do: 0
  defp overflow(:reject), do: 1

  defp subscribe_from(:earliest), do: <<@from_earliest, 0::64>>
  defp subscribe_from(:latest), do: <<@from_latest, 0::64>>
  defp subscribe_from({:time, ms}) when is_u64(ms), do: <<@from_time, ms::64>>
  defp subscribe_from(seq), do: <<@from_seq, seq::64>>

  defp read_from({:time, ms}) when is_u64(ms), do: {@time_flag, ms}
  defp read_from(seq), do: {0, seq}

  defp times_flag(true), do: @times_flag
  defp times_flag(false), do: 0

  # The entries nest as [[[head, e1], e2], e3]: iodata in order, built without a reverse.
  defp encode_payloads(payloads, count, acc, size, seen \\ 0)

  defp encode_payloads([payload | rest], count, acc, size, seen) when is_binary(payload) do
    entry = [<<byte_size(payload)::32>>, payload]
    size = size + @batch_entry_overhead + byte_size(payload)
    encode_payloads(rest, count, [acc | entry], size, seen + 1)
  end

  defp encode_payloads([], count, acc, size, count), do: {acc, size}
  defp encode_payloads(list, count, _, _, seen), do: bad_list(list, count, seen, "payloads")

  defp encode_messages(messages, count, acc, size, seen \\ 0)

  defp encode_messages([{seq, payload} | rest], count, acc, size, seen)
       when is_u64(seq) and is_binary(payload) do
    entry = [<<seq::64, byte_size(payload)::32>>, payload]
    size = size + @message_overhead + byte_size(payload)
    encode_messages(rest, count, [acc | entry], size, seen + 1)
  end

  defp encode_messages([], count, acc, size, count), do: {acc, size}
  defp encode_messages(list, count, _, _, seen), do: bad_list(list, count, seen, "messages")

  # One binary, appended to in place: a frame may hold the acks of thousands
  # of pushes.
  defp encode_acks([{corr, {:ok, seq}} | rest], acc) when is_u32(corr) and is_u64(seq),
    do: encode_acks(rest, <<acc::binary, corr::32, 0::16, seq::64>>)

  defp encode_acks([{corr, {:error, reason}} | rest], acc) when is_u32(corr),
    do: encode_acks(rest, <<acc::binary, corr::32, ErrorCode.code(reason)::16, 0::64>>)

  defp encode_acks([], acc), do: acc
  defp encode_acks([entry | _], _acc), do: bad_list([entry], 1, 0, "acks")

  defp bad_list([], count, seen, what) do
    raise ArgumentError, "expected #{count} #{what}, got #{seen}"
  end

  defp bad_list([_ | _], count, seen, what) when seen >= count do
    raise ArgumentError, "expected #{count} #{what}, got more"
  end

  defp bad_list([entry | _], _count, _seen, what) do
    raise ArgumentError,
          "expected #{what} entries of the right shape, got: " <>
            inspect(entry, limit: 8, printable_limit: 64)
  end

  ## Decoding

  @doc """
  Decodes the first frame of `binary`.

  Returns `{:ok, frame, rest}` when `binary` starts with a whole frame,
  `{:more, missing}` when at least `missing` more bytes are needed, and
  `{:error, reason}` when the bytes are not a frame. The length prefix is
  checked against `max_frame_size` as soon as its four bytes are there.

      iex> Ringbus.Wire.Frame.decode(<<0, 0, 0, 5, 0x0D, 0, 0, 0, 9, "more">>, 1024)
      {:ok, {:ping, 9}, "more"}
      iex> Ringbus.Wire.Frame.decode(<<0, 0, 0, 5, 0x0D>>, 1024)
      {:more, 4}
      iex> Ringbus.Wire.Frame.decode(<<0x40, 0, 0, 0>>, 1024)
      {:error, :frame_too_large}
  """
  @spec decode(binary(), non_neg_integer()) ::
          {:ok, t(), binary()} | {:more, pos_integer()} | {:error, decode_error()}
  def decode(binary, max_frame_size) when is_binary(binary) and is_integer(max_frame_size) do
    case binary do
      <<length::32, _::binary>> when length > max_frame_size ->
        {:error, :frame_too_large}

      <<0::32, _::binary>> ->
        {:error, :empty_frame}

      <<length::32, frame::binary-size(length), rest::binary>> ->
        with {:ok, frame} <- decode_body(frame), do: {:ok, frame, rest}

      <<length::32, part::binary>> ->
        {:more, length - byte_size(part)}

      _ ->
        {:more, 4 - byte_size(binary)}
    end
  end

  @doc """
  Decodes the opcode and body of one frame, the bytes its length prefix counts.

  For decoders that have split the stream into frames already, such as
  `Ringbus.Wire.Decoder`. The bytes must be exactly one frame.

  With `:requests` or `:responses` as `direction`, an opcode of the other
  direction is `{:unknown_opcode, byte}`, whatever its body: a server takes
  only requests, a client only server frames.

  With an integer `pack_batches`, a `PUSH_BATCH` of more payloads than that
  has them as one `Ringbus.Wire.Entries` in the place of the list (the
  same frame otherwise, and the same errors).
  """
  @spec decode_body(binary(), direction(), non_neg_integer() | nil) ::
          {:ok, t()} | {:error, decode_error()}
  def decode_body(bytes, direction \\ :any, pack_batches \\ nil)

  def decode_body(<<opcode, _::binary>>, :requests, _pack) when opcode >= 0x80,
    do: {:error, {:unknown_opcode, opcode}}

  def decode_body(<<opcode, _::binary>>, :responses, _pack) when opcode < 0x80,
    do: {:error, {:unknown_opcode, opcode}}

  # A batch of more than `pack` payloads keeps them as `Ringbus.Wire.Entries`.
  def decode_body(<<@push_batch, corr::32, flags, rest::binary>>, _direction, pack)
      when is_integer(pack),
      do: decode_batch(corr, flags, rest, pack)

  def decode_body(<<opcode, body::binary>>, _direction, _pack), do: decode_op(opcode, body)
  def decode_body(<<>>, _direction, _pack), do: {:error, :empty_frame}

  defp decode_op(
         @hello,
         <<corr::32, magic::binary-size(4), version::16, flags::16, rest::binary>>
       ) do
    with :ok <- check(magic == @magic, :hello, :magic),
         {:ok, token, rest} <- short_binary(rest, :hello),
         :ok <- done(rest, :hello) do
      {:ok, {:hello, corr, version, flags, if(token == "", do: nil, else: token)}}
    end
  end

  defp decode_op(@create, <<corr::32, rest::binary>>) do
    # Version 6's ends with max_age.
    with {:ok, name, rest} <- name(rest, :create) do
      case rest do
        <<capacity::32, overflow, max_bytes::64, replicas, age::binary>>
        when byte_size(age) in [0, 8] ->
          with {:ok, overflow} <- overflow(overflow, :create) do
            v5 =
              {:create, corr, name, capacity, overflow, nil_if_zero(max_bytes),
               nil_if_zero(replicas)}

            if age == "",
              do: {:ok, v5},
              else: {:ok, Tuple.append(v5, nil_if_zero(:binary.decode_unsigned(age)))}
          end

        _ ->
          size_error(rest, if(byte_size(rest) > 18, do: 22, else: 14), :create)
      end
    end
  end

  defp decode_op(@delete, <<corr::32, rest::binary>>), do: name_only(:delete, corr, rest)

  defp decode_op(@push, <<corr::32, flags, rest::binary>>)
       when Bitwise.band(flags, @tagged_flag) != 0 do
    with {:ok, mode} <- ack_mode(Bitwise.bxor(flags, @tagged_flag), :push),
         {:ok, name, rest} <- name(rest, :push),
         {:ok, tag, rest} <- tag(rest, :push),
         {:ok, payload, rest} <- payload(rest, :push),
         :ok <- done(rest, :push) do
      {:ok, {:tagged_push, corr, mode, name, tag, payload}}
    end
  end

  defp decode_op(@push, <<corr::32, flags, rest::binary>>) do
    with {:ok, mode} <- ack_mode(flags, :push),
         {:ok, name, rest} <- name(rest, :push),
         {:ok, payload, rest} <- payload(rest, :push),
         :ok <- done(rest, :push) do
      {:ok, {:push, corr, mode, name, payload}}
    end
  end

  defp decode_op(@push_batch, <<corr::32, flags, rest::binary>>)
       when Bitwise.band(flags, @tagged_flag) != 0 do
    with {:ok, mode} <- ack_mode(Bitwise.bxor(flags, @tagged_flag), :push_batch),
         {:ok, name, rest} <- name(rest, :push_batch),
         {:ok, tag, rest} <- tag(rest, :push_batch),
         {:ok, count, rest} <- u32(rest, :push_batch),
         {:ok, payloads, rest} <- decode_payloads(rest, count, []),
         :ok <- done(rest, :push_batch) do
      {:ok, {:tagged_push_batch, corr, mode, name, tag, count, payloads}}
    end
  end

  defp decode_op(@push_batch, <<corr::32, flags, rest::binary>>) do
    with {:ok, mode} <- ack_mode(flags, :push_batch),
         {:ok, name, rest} <- name(rest, :push_batch),
         {:ok, count, rest} <- u32(rest, :push_batch),
         {:ok, payloads, rest} <- decode_payloads(rest, count, []),
         :ok <- done(rest, :push_batch) do
      {:ok, {:push_batch, corr, mode, name, count, payloads}}
    end
  end

  defp decode_op(@pull, <<corr::32, rest::binary>>), do: name_only(:pull, corr, rest)

  defp decode_op(@read, <<corr::32, flags, rest::binary>>)
       when Bitwise.band(flags, @time_flag + @times_flag) != 0 do
    with :ok <- check(flags < 8, :read, :flags),
         {:ok, name, rest} <- name(rest, :read),
         {:ok, inc, rest} <- stated(flags, rest, :read) do
      case rest do
        <<from::64, max::32>> ->
          from = if Bitwise.band(flags, @time_flag) != 0, do: {:time, from}, else: from
          {:ok, {:read, corr, name, from, max, inc, Bitwise.band(flags, @times_flag) != 0}}

        _ ->
          size_error(rest, 12, :read)
      end
    end
  end

  defp decode_op(@read, <<corr::32, flags, rest::binary>>) do
    with {:ok, stated?} <- incarnation_flag(flags, :read),
         {:ok, name, rest} <- name(rest, :read) do
      case {stated?, rest} do
        {true, <<inc::64, from::64, max::32>>} -> {:ok, {:read, corr, name, from, max, inc}}
        {true, _} -> size_error(rest, 20, :read)
        {false, <<from::64, max::32>>} -> {:ok, {:read, corr, name, from, max}}
        {false, _} -> size_error(rest, 12, :read)
      end
    end
  end

  defp decode_op(@len, <<corr::32, rest::binary>>), do: name_only(:len, corr, rest)
  defp decode_op(@info, <<corr::32, rest::binary>>), do: name_only(:info, corr, rest)

  defp decode_op(@subscribe, <<corr::32, flags, rest::binary>>)
       when Bitwise.band(flags, @times_flag) != 0 or
              (byte_size(rest) > 2 and
                 binary_part(rest, byte_size(rest) - 17, 1) == <<@from_time>>) do
    with :ok <- check(flags in [0, 1, 4, 5], :subscribe, :flags),
         {:ok, name, rest} <- name(rest, :subscribe),
         {:ok, inc, rest} <- stated(flags, rest, :subscribe) do
      case rest do
        <<kind, seq::64, credit::32, max_batch::32>> ->
          with {:ok, from} <- from(kind, seq) do
            times? = Bitwise.band(flags, @times_flag) != 0
            {:ok, {:subscribe, corr, name, from, credit, max_batch, inc, times?}}
          end

        _ ->
          size_error(rest, 17, :subscribe)
      end
    end
  end

  defp decode_op(@subscribe, <<corr::32, flags, rest::binary>>) do
    with {:ok, stated?} <- incarnation_flag(flags, :subscribe),
         {:ok, name, rest} <- name(rest, :subscribe) do
      case {stated?, rest} do
        {true, <<inc::64, kind, seq::64, credit::32, max_batch::32>>} ->
          with {:ok, from} <- from(kind, seq),
               do: {:ok, {:subscribe, corr, name, from, credit, max_batch, inc}}

        {true, _} ->
          size_error(rest, 25, :subscribe)

        {false, <<kind, seq::64, credit::32, max_batch::32>>} ->
          with {:ok, from} <- from(kind, seq),
               do: {:ok, {:subscribe, corr, name, from, credit, max_batch}}

        {false, _} ->
          size_error(rest, 17, :subscribe)
      end
    end
  end

  defp decode_op(@credit, <<corr::32, sub::32, credit::32>>),
    do: {:ok, {:credit, corr, sub, credit}}

  defp decode_op(@unsubscribe, <<corr::32, sub::32>>), do: {:ok, {:unsubscribe, corr, sub}}
  defp decode_op(@ping, <<corr::32>>), do: {:ok, {:ping, corr}}

  defp decode_op(
         @hello_ok,
         <<corr::32, version::16, max_frame_size::32, max_payload_size::32, max_subscriptions::32,
           max_credit::32, idle_timeout::32>>
       ) do
    limits = %{
      max_frame_size: max_frame_size,
      max_payload_size: max_payload_size,
      max_subscriptions: max_subscriptions,
      max_credit: max_credit,
      idle_timeout: if(idle_timeout == 0, do: :infinity, else: idle_timeout)
    }

    {:ok, {:hello_ok, corr, version, limits}}
  end

  defp decode_op(@ok, <<corr::32>>), do: {:ok, {:ok, corr}}

  defp decode_op(@push_acks, <<count::32, rest::binary>>) do
    with {:ok, acks, rest} <- decode_acks(rest, count, []),
         :ok <- done(rest, :push_acks) do
      {:ok, {:push_acks, count, acks}}
    end
  end

  defp decode_op(@pull_ok, <<corr::32, seq::64, rest::binary>>) do
    with {:ok, payload, rest} <- payload(rest, :pull_ok),
         :ok <- done(rest, :pull_ok) do
      {:ok, {:pull_ok, corr, seq, payload}}
    end
  end

  defp decode_op(@empty, <<corr::32>>), do: {:ok, {:empty, corr}}

  defp decode_op(@read_ok, <<corr::32, incarnation::64, lost::64, count::32, rest::binary>>) do
    with {:ok, messages, rest} <- decode_messages(rest, count, [], :read_ok),
         :ok <- done(rest, :read_ok) do
      {:ok, {:read_ok, corr, incarnation, lost, count, messages}}
    end
  end

  defp decode_op(@len_ok, <<corr::32, len::64>>), do: {:ok, {:len_ok, corr, len}}

  defp decode_op(@info_ok, body), do: InfoFrame.decode(body)

  defp decode_op(@subscribed, <<corr::32, sub::32, incarnation::64>>),
    do: {:ok, {:subscribed, corr, sub, incarnation}}

  defp decode_op(@deliver, <<sub::32, lost::64, count::32, rest::binary>>) do
    with {:ok, messages, rest} <- decode_messages(rest, count, [], :deliver),
         :ok <- done(rest, :deliver) do
      {:ok, {:deliver, sub, lost, count, messages}}
    end
  end

  defp decode_op(@sub_closed, <<sub::32, code::16>>) do
    with :ok <- check(code != 0, :sub_closed, :code),
         do: {:ok, {:sub_closed, sub, ErrorCode.reason(code)}}
  end

  defp decode_op(@pong, <<corr::32>>), do: {:ok, {:pong, corr}}

  defp decode_op(@error, <<corr::32, code::16, rest::binary>>) do
    with :ok <- check(code != 0, :error, :code),
         {:ok, message, rest} <- short_binary(rest, :error),
         :ok <- done(rest, :error) do
      {:ok, {:error, corr, ErrorCode.reason(code), message}}
    end
  end

  defp decode_op(opcode, body) when opcode in @group_opcodes, do: GroupFrame.decode(opcode, body)
  defp decode_op(opcode, body) when opcode in @timed_opcodes, do: TimeFrame.decode(opcode, body)

  # A known opcode whose fixed fields did not match: a fixed-size body of the
  # wrong size, or a variable one too short for its fixed part.
  for {type, opcode} <- @opcodes, type not in (@group_types ++ @timed_types ++ [:info_ok]) do
    case Keyword.fetch(@fixed_sizes, type) do
      {:ok, size} ->
        defp decode_op(unquote(opcode), body), do: size_error(body, unquote(size), unquote(type))

      :error ->
        defp decode_op(unquote(opcode), _body), do: {:error, {:truncated, unquote(type)}}
    end
  end

  defp decode_op(opcode, _body), do: {:error, {:unknown_opcode, opcode}}

  # PUSH_BATCH as the clauses above decode it, its entries walked without a
  # term per payload and kept whole when there are more than `pack`.
  defp decode_batch(corr, flags, rest, pack) do
    tagged? = Bitwise.band(flags, @tagged_flag) != 0
    flags = if tagged?, do: Bitwise.bxor(flags, @tagged_flag), else: flags

    with {:ok, mode} <- ack_mode(flags, :push_batch),
         {:ok, name, rest} <- name(rest, :push_batch),
         {:ok, tag, rest} <- if(tagged?, do: tag(rest, :push_batch), else: {:ok, nil, rest}),
         {:ok, count, rest} <- u32(rest, :push_batch),
         {:ok, entries, rest} <- entries(rest, count),
         :ok <- done(rest, :push_batch) do
      payloads = if count > pack, do: entries, else: Enum.to_list(entries)

      if tagged?,
        do: {:ok, {:tagged_push_batch, corr, mode, name, tag, count, payloads}},
        else: {:ok, {:push_batch, corr, mode, name, count, payloads}}
    end
  end

  defp entries(rest, count) do
    case Entries.take(rest, count) do
      {:ok, entries, rest} -> {:ok, entries, rest}
      :truncated -> {:error, {:truncated, :push_batch}}
    end
  end

  ## Field decoding

  defp name_only(type, corr, rest) do
    with {:ok, name, rest} <- name(rest, type),
         :ok <- done(rest, type),
         do: {:ok, {type, corr, name}}
  end

  defp name(<<size::16, _::binary>>, type) when size == 0 or size > @max_name,
    do: {:error, {:bad_field, type, :name}}

  defp name(<<size::16, name::binary-size(size), rest::binary>>, _type), do: {:ok, name, rest}
  defp name(_, type), do: {:error, {:truncated, type}}

  defp payload(<<size::32, payload::binary-size(size), rest::binary>>, _type),
    do: {:ok, payload, rest}

  defp payload(_, type), do: {:error, {:truncated, type}}

  defp short_binary(<<size::16, value::binary-size(size), rest::binary>>, _type),
    do: {:ok, value, rest}

  defp short_binary(_, type), do: {:error, {:truncated, type}}

  defp u32(<<value::32, rest::binary>>, _type), do: {:ok, value, rest}
  defp u32(_, type), do: {:error, {:truncated, type}}

  # A producer tag: the producer id, typed as a name, then n.
  defp tag(rest, type) do
    with {:ok, producer, rest} <- name(rest, type) do
      case rest do
        <<n::64, rest::binary>> -> {:ok, {producer, n}, rest}
        _ -> {:error, {:truncated, type}}
      end
    end
  end

  defp incarnation_flag(0, _type), do: {:ok, false}
  defp incarnation_flag(@incarnation_flag, _type), do: {:ok, true}
  defp incarnation_flag(_, type), do: {:error, {:bad_field, type, :flags}}

  defp ack_mode(0, _type), do: {:ok, :ack}
  defp ack_mode(@no_ack_flag, _type), do: {:ok, :no_ack}
  defp ack_mode(_, type), do: {:error, {:bad_field, type, :flags}}

  defp overflow(0, _type), do: {:ok, :drop_oldest}
  defp overflow(1, _type), do: {:ok, :reject}
  defp overflow(_, type), do: {:error, {:bad_field, type, :overflow}}

  defp from(@from_seq, seq), do: {:ok, seq}
  defp from(@from_earliest, 0), do: {:ok, :earliest}
  defp from(@from_latest, 0), do: {:ok, :latest}
  defp from(@from_time, ms), do: {:ok, {:time, ms}}
  defp from(_, _), do: {:error, {:bad_field, :subscribe, :from}}

  # Version 6's READ and SUBSCRIBE: the incarnation when the flag states one.
  defp stated(flags, rest, type) when Bitwise.band(flags, @incarnation_flag) != 0 do
    case rest do
      <<inc::64, rest::binary>> -> {:ok, inc, rest}
      _ -> {:error, {:truncated, type}}
    end
  end

  defp stated(_flags, rest, _type), do: {:ok, nil, rest}

  defp nil_if_zero(0), do: nil
  defp nil_if_zero(n), do: n

  defp check(true, _type, _field), do: :ok
  defp check(false, type, field), do: {:error, {:bad_field, type, field}}

  defp done(<<>>, _type), do: :ok
  defp done(_, type), do: {:error, {:trailing_bytes, type}}

  defp size_error(rest, fixed, type) when byte_size(rest) > fixed,
    do: {:error, {:trailing_bytes, type}}

  defp size_error(_rest, _fixed, type), do: {:error, {:truncated, type}}

  # Each iteration eats at least four bytes, so a lying count ends at the end of the body.
  defp decode_payloads(rest, 0, acc), do: {:ok, :lists.reverse(acc), rest}

  defp decode_payloads(<<size::32, payload::binary-size(size), rest::binary>>, left, acc),
    do: decode_payloads(rest, left - 1, [payload | acc])

  defp decode_payloads(_, _, _), do: {:error, {:truncated, :push_batch}}

  defp decode_messages(rest, 0, acc, _type), do: {:ok, :lists.reverse(acc), rest}

  defp decode_messages(
         <<seq::64, size::32, payload::binary-size(size), rest::binary>>,
         left,
         acc,
         type
       ),
       do: decode_messages(rest, left - 1, [{seq, payload} | acc], type)

  defp decode_messages(_, _, _, type), do: {:error, {:truncated, type}}

  defp decode_acks(rest, 0, acc), do: {:ok, :lists.reverse(acc), rest}

  defp decode_acks(<<corr::32, 0::16, seq::64, rest::binary>>, left, acc),
    do: decode_acks(rest, left - 1, [{corr, {:ok, seq}} | acc])

  defp decode_acks(<<corr::32, code::16, 0::64, rest::binary>>, left, acc),
    do: decode_acks(rest, left - 1, [{corr, {:error, ErrorCode.reason(code)}} | acc])

  defp decode_acks(<<_corr::32, _code::16, _seq::64, _::binary>>, _left, _acc),
    do: {:error, {:bad_field, :push_acks, :status}}

  defp decode_acks(_, _, _), do: {:error, {:truncated, :push_acks}}
end
