defmodule Ringbus.Wire.GroupFrame do
  @moduledoc """
  The consumer-group frames of protocol version 5 (docs/PROTOCOL.md,
  "Consumer groups"), which `Ringbus.Wire.Frame` encodes and decodes
  through this module: each layout is written and read here, side by side.

  ## Requests

      {:group_create, corr, channel, group, from, ack_wait, max_deliver, max_pending, dead_letter}
                                  # from: seq | :earliest | :latest; max_deliver: pos | :infinity;
                                  # dead_letter: name | nil
      {:group_fetch, corr, channel, group, consumer, max, wait}
      {:group_fetch_timed, corr, channel, group, consumer, max, wait}   # version 6
      {:group_ack, corr, channel, group, count, seqs}
      {:group_nack, corr, channel, group, delay, count, seqs}
      {:group_in_progress, corr, channel, group, count, seqs}
      {:group_claim, corr, channel, group, consumer, count, seqs}
      {:group_autoclaim, corr, channel, group, consumer, min_idle, max}
      {:group_remove_consumer, corr, channel, group, consumer}
      {:group_delete, corr, channel, group}
      {:group_info, corr, channel}

  ## Server frames

      {:group_messages, corr, more?, count, messages}  # messages: [{seq, payload, deliveries}]
                                  # or, version 6, [{seq, payload, deliveries, ms}] (the times flag)
      {:group_count, corr, n}
      {:group_info_ok, corr, groups}                   # groups: as Ringbus.Groups.info/1 has them

  Version 7's group subscription frames, `{:group_subscribe, ...}` and
  `{:group_deliver, ...}`, are laid out in `Ringbus.Wire.GroupPushFrame`.

  Version 6: `GROUP_CREATE` may start `from` `{:time, ms}` (from_kind 3),
  and `GROUP_FETCH_TIMED` is `GROUP_FETCH` answered by `GROUP_MESSAGES`
  with the times flag (0x02), each message with the time it was stored.

  `group` and `consumer` are 1 to 65,535 bytes (`bytes16`). A group's
  `delivered` of -1 (none yet) travels as 2^64 - 1.
  """

  alias Ringbus.Wire.{GroupMessages, GroupPushFrame}

  # A channel name's longest, as Ringbus.Wire.Frame has it (the wire
  # depends on nothing, and Frame depends on this module).
  @max_name 255
  @none 0xFFFF_FFFF_FFFF_FFFF

  @group_create 0x10
  @group_fetch 0x11
  @group_ack 0x12
  @group_nack 0x13
  @group_in_progress 0x14
  @group_claim 0x15
  @group_autoclaim 0x16
  @group_remove_consumer 0x17
  @group_delete 0x18
  @group_info 0x19
  @group_fetch_timed 0x1A

  @group_messages 0x8D
  @group_count 0x8E
  @group_info_ok 0x8F

  @requests [
              group_create: @group_create,
              group_fetch: @group_fetch,
              group_ack: @group_ack,
              group_nack: @group_nack,
              group_in_progress: @group_in_progress,
              group_claim: @group_claim,
              group_autoclaim: @group_autoclaim,
              group_remove_consumer: @group_remove_consumer,
              group_delete: @group_delete,
              group_info: @group_info,
              group_fetch_timed: @group_fetch_timed
            ] ++ GroupPushFrame.requests()

  @responses [
               group_messages: @group_messages,
               group_count: @group_count,
               group_info_ok: @group_info_ok
             ] ++ GroupPushFrame.responses()
  @push_types Keyword.keys(GroupPushFrame.requests() ++ GroupPushFrame.responses())
  @push_opcodes Keyword.values(GroupPushFrame.requests() ++ GroupPushFrame.responses())

  # The most messages one GROUP_FETCH or GROUP_AUTOCLAIM asks for, and the
  # fetches one connection has waiting.
  @max_fetch 1000
  @max_waiting_fetches 64

  @more_flag 0x01
  @times_flag 0x02
  @from_seq 0
  @from_earliest 1
  @from_latest 2
  @from_time 3

  # A message in GROUP_MESSAGES: seq, deliveries, payload length.
  @message_overhead 8 + 4 + 4
  # GROUP_MESSAGES' opcode, corr, flags and count.
  @messages_header 1 + 4 + 1 + 4

  @type corr :: 0..0xFFFF_FFFF

  @typedoc "A group frame's type, its first element: a key of `requests/0` or `responses/0`."
  @type type :: atom()
  @type message :: {non_neg_integer(), binary(), pos_integer()}

  @type t ::
          {:group_create, corr(), binary(), binary(), non_neg_integer() | :earliest | :latest,
           pos_integer(), pos_integer() | :infinity, pos_integer(), binary() | nil}
          | {:group_fetch, corr(), binary(), binary(), binary(), non_neg_integer(),
             non_neg_integer()}
          | {:group_ack | :group_in_progress, corr(), binary(), binary(), non_neg_integer(),
             [non_neg_integer()]}
          | {:group_nack, corr(), binary(), binary(), non_neg_integer(), non_neg_integer(),
             [non_neg_integer()]}
          | {:group_claim, corr(), binary(), binary(), binary(), non_neg_integer(),
             [non_neg_integer()]}
          | {:group_autoclaim, corr(), binary(), binary(), binary(), non_neg_integer(),
             non_neg_integer()}
          | {:group_remove_consumer, corr(), binary(), binary(), binary()}
          | {:group_delete, corr(), binary(), binary()}
          | {:group_info, corr(), binary()}
          | {:group_messages, corr(), boolean(), non_neg_integer(), [message()]}
          | {:group_count, corr(), non_neg_integer()}
          | {:group_info_ok, corr(), [map()]}
          | GroupPushFrame.t()

  defguardp is_u32(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF
  defguardp is_u64(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF_FFFF_FFFF
  defguardp is_name(x) when is_binary(x) and byte_size(x) >= 1 and byte_size(x) <= @max_name
  defguardp is_id(x) when is_binary(x) and byte_size(x) >= 1 and byte_size(x) <= 0xFFFF

  @doc "The request frame types with their opcodes."
  @spec requests() :: [{atom(), byte()}]
  def requests, do: @requests

  @doc "The server frame types with their opcodes."
  @spec responses() :: [{atom(), byte()}]
  def responses, do: @responses

  @doc """
  The most messages a `GROUP_FETCH` or `GROUP_AUTOCLAIM` may ask for, 1,000;
  more is answered `bad_argument`.
  """
  @spec max_fetch() :: pos_integer()
  def max_fetch, do: @max_fetch

  @doc """
  The most `GROUP_FETCH`es that wait at once on one connection, 64; one more
  is answered `too_many_fetches`.
  """
  @spec max_waiting_fetches() :: pos_integer()
  def max_waiting_fetches, do: @max_waiting_fetches

  @doc "The bytes a message takes in `GROUP_MESSAGES` besides its payload: 16."
  @spec message_overhead() :: pos_integer()
  def message_overhead, do: @message_overhead

  @doc "The bytes of `GROUP_MESSAGES` besides its messages (no length prefix): 10."
  @spec messages_header_size() :: pos_integer()
  def messages_header_size, do: @messages_header

  ## Encoding

  @doc "`{opcode, body}` of a group frame, or nil when it is not one in range."
  @spec body(tuple()) :: {byte(), iodata()} | nil
  def body(frame) when elem(frame, 0) in @push_types, do: GroupPushFrame.body(frame)

  def body({:group_create, corr, channel, group, from, ack_wait, max_deliver, max_pending, dl})
      when is_u32(corr) and is_name(channel) and is_id(group) and
             (from in [:earliest, :latest] or is_u64(from) or
                (is_tuple(from) and tuple_size(from) == 2 and elem(from, 0) == :time and
                   is_u64(elem(from, 1)))) and is_u32(ack_wait) and
             ack_wait > 0 and
             (max_deliver == :infinity or (is_u32(max_deliver) and max_deliver > 0)) and
             is_u32(max_pending) and (is_nil(dl) or is_name(dl)) do
    max_deliver = if max_deliver == :infinity, do: 0, else: max_deliver

    {@group_create,
     [
       head(corr, channel, group),
       from(from),
       <<ack_wait::32, max_deliver::32, max_pending::32>>,
       id(dl || "")
     ]}
  end

  def body({:group_fetch, corr, channel, group, consumer, max, wait})
      when is_u32(corr) and is_name(channel) and is_id(group) and is_id(consumer) and
             is_u32(max) and is_u32(wait),
      do: {@group_fetch, [head(corr, channel, group), id(consumer), <<max::32, wait::32>>]}

  def body({:group_fetch_timed, corr, channel, group, consumer, max, wait}) do
    with {@group_fetch, body} <- body({:group_fetch, corr, channel, group, consumer, max, wait}),
         do: {@group_fetch_timed, body}
  end

  def body({:group_ack, corr, channel, group, count, seqs})
      when is_u32(corr) and is_name(channel) and is_id(group),
      do: seqs_body(@group_ack, [head(corr, channel, group)], count, seqs)

  def body({:group_nack, corr, channel, group, delay, count, seqs})
      when is_u32(corr) and is_name(channel) and is_id(group) and is_u32(delay),
      do: seqs_body(@group_nack, [head(corr, channel, group), <<delay::32>>], count, seqs)

  def body({:group_in_progress, corr, channel, group, count, seqs})
      when is_u32(corr) and is_name(channel) and is_id(group),
      do: seqs_body(@group_in_progress, [head(corr, channel, group)], count, seqs)

  def body({:group_claim, corr, channel, group, consumer, count, seqs})
      when is_u32(corr) and is_name(channel) and is_id(group) and is_id(consumer),
      do: seqs_body(@group_claim, [head(corr, channel, group), id(consumer)], count, seqs)

  def body({:group_autoclaim, corr, channel, group, consumer, min_idle, max})
      when is_u32(corr) and is_name(channel) and is_id(group) and is_id(consumer) and
             is_u32(min_idle) and is_u32(max),
      do:
        {@group_autoclaim, [head(corr, channel, group), id(consumer), <<min_idle::32, max::32>>]}

  def body({:group_remove_consumer, corr, channel, group, consumer})
      when is_u32(corr) and is_name(channel) and is_id(group) and is_id(consumer),
      do: {@group_remove_consumer, [head(corr, channel, group), id(consumer)]}

  def body({:group_delete, corr, channel, group})
      when is_u32(corr) and is_name(channel) and is_id(group),
      do: {@group_delete, [head(corr, channel, group)]}

  def body({:group_info, corr, channel}) when is_u32(corr) and is_name(channel),
    do: {@group_info, [<<corr::32>>, id(channel)]}

  def body({:group_messages, corr, more?, count, messages})
      when is_u32(corr) and is_boolean(more?) and is_u32(count) and is_list(messages) do
    flags = if more?, do: @more_flag, else: 0
    flags = if match?([{_, _, _, _} | _], messages), do: flags + @times_flag, else: flags
    {@group_messages, [<<corr::32, flags, count::32>> | GroupMessages.encode(messages, count)]}
  end

  def body({:group_count, corr, n}) when is_u32(corr) and is_u64(n),
    do: {@group_count, [<<corr::32, n::64>>]}

  def body({:group_info_ok, corr, groups}) when is_u32(corr) and is_list(groups) do
    {count, body} = each(groups, &group/1)
    {@group_info_ok, [<<corr::32, count::16>> | body]}
  end

  def body(_frame), do: nil

  defp head(corr, channel, group), do: [<<corr::32>>, id(channel), id(group)]

  defp id(binary), do: [<<byte_size(binary)::16>> | binary]

  defp from(:earliest), do: <<@from_earliest, 0::64>>
  defp from(:latest), do: <<@from_latest, 0::64>>
  defp from({:time, ms}), do: <<@from_time, ms::64>>
  defp from(seq), do: <<@from_seq, seq::64>>

  defp seqs_body(opcode, head, count, seqs) when is_u32(count) and is_list(seqs),
    do: {opcode, [head, <<count::32>> | seqs(seqs, count, 0, <<>>)]}

  defp seqs_body(_opcode, _head, _count, _seqs), do: nil

  defp seqs([seq | rest], count, n, acc) when is_u64(seq),
    do: seqs(rest, count, n + 1, <<acc::binary, seq::64>>)

  defp seqs([], count, count, acc), do: [acc]
  defp seqs(_seqs, count, _n, _acc), do: raise(ArgumentError, "expected #{count} seqs")

  # A list of at most a u16's items, counted as it is encoded.
  defp each(items, fun) do
    {count, body} =
      Enum.reduce(items, {0, []}, fn item, {n, acc} -> {n + 1, [acc | fun.(item)]} end)

    if count > 0xFFFF, do: raise(ArgumentError, "expected at most 65535 entries, got #{count}")
    {count, body}
  end

  defp group(%{name: name, config: config, consumers: consumers} = g) when is_id(name) do
    {n, body} = each(consumers, &consumer/1)
    dead_letter = config.dead_letter || ""
    max_deliver = if config.max_deliver == :infinity, do: 0, else: config.max_deliver
    delivered = if g.delivered < 0, do: @none, else: g.delivered

    [
      id(name),
      <<delivered::64, g.pending::64, g.lag::64, g.redelivered::64, g.acked::64, g.dead::64,
        g.lost::64, g.dropped::64, g.held::64, config.ack_wait::32, max_deliver::32,
        config.max_pending::32>>,
      id(dead_letter),
      <<n::16>>
      | body
    ]
  end

  defp consumer(%{name: name, pending: pending, idle_ms: idle}) when is_id(name),
    do: [id(name), <<pending::64, idle::64>>]

  ## Decoding

  @doc """
  Decodes the body (after the opcode) of a group frame: `{:ok, frame}` or
  `{:error, reason}` as `Ringbus.Wire.Frame.decode_body/3` has them.
  """
  @spec decode(byte(), binary()) :: {:ok, t()} | {:error, term()}
  def decode(opcode, body) when opcode in @push_opcodes, do: GroupPushFrame.decode(opcode, body)

  def decode(@group_create, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_create) do
      case rest do
        <<kind, seq::64, ack_wait::32, max_deliver::32, max_pending::32, rest::binary>> ->
          with {:ok, from} <- from(kind, seq),
               :ok <- check(ack_wait > 0, :group_create, :ack_wait),
               {:ok, dead_letter, rest} <- dead_letter(rest),
               :ok <- done(rest, :group_create) do
            max_deliver = if max_deliver == 0, do: :infinity, else: max_deliver

            {:ok,
             {:group_create, corr, channel, group, from, ack_wait, max_deliver, max_pending,
              dead_letter}}
          end

        _ ->
          {:error, {:truncated, :group_create}}
      end
    end
  end

  def decode(@group_fetch, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_fetch),
         {:ok, consumer, rest} <- id(rest, :group_fetch, :consumer),
         {:ok, [max, wait]} <- fixed(rest, :group_fetch) do
      {:ok, {:group_fetch, corr, channel, group, consumer, max, wait}}
    end
  end

  def decode(@group_fetch_timed, body) do
    case decode(@group_fetch, body) do
      {:ok, fetch} -> {:ok, put_elem(fetch, 0, :group_fetch_timed)}
      {:error, reason} -> {:error, put_elem(reason, 1, :group_fetch_timed)}
    end
  end

  def decode(@group_ack, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_ack),
         {:ok, count, seqs} <- seqs(rest, :group_ack),
         do: {:ok, {:group_ack, corr, channel, group, count, seqs}}
  end

  def decode(@group_nack, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_nack),
         <<delay::32, rest::binary>> <- rest,
         {:ok, count, seqs} <- seqs(rest, :group_nack) do
      {:ok, {:group_nack, corr, channel, group, delay, count, seqs}}
    else
      {:error, _} = error -> error
      _ -> {:error, {:truncated, :group_nack}}
    end
  end

  def decode(@group_in_progress, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_in_progress),
         {:ok, count, seqs} <- seqs(rest, :group_in_progress),
         do: {:ok, {:group_in_progress, corr, channel, group, count, seqs}}
  end

  def decode(@group_claim, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_claim),
         {:ok, consumer, rest} <- id(rest, :group_claim, :consumer),
         {:ok, count, seqs} <- seqs(rest, :group_claim),
         do: {:ok, {:group_claim, corr, channel, group, consumer, count, seqs}}
  end

  def decode(@group_autoclaim, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_autoclaim),
         {:ok, consumer, rest} <- id(rest, :group_autoclaim, :consumer),
         {:ok, [min_idle, max]} <- fixed(rest, :group_autoclaim) do
      {:ok, {:group_autoclaim, corr, channel, group, consumer, min_idle, max}}
    end
  end

  def decode(@group_remove_consumer, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_remove_consumer),
         {:ok, consumer, rest} <- id(rest, :group_remove_consumer, :consumer),
         :ok <- done(rest, :group_remove_consumer),
         do: {:ok, {:group_remove_consumer, corr, channel, group, consumer}}
  end

  def decode(@group_delete, <<corr::32, rest::binary>>) do
    with {:ok, channel, group, rest} <- channel_group(rest, :group_delete),
         :ok <- done(rest, :group_delete),
         do: {:ok, {:group_delete, corr, channel, group}}
  end

  def decode(@group_info, <<corr::32, rest::binary>>) do
    with {:ok, channel, rest} <- channel(rest, :group_info),
         :ok <- done(rest, :group_info),
         do: {:ok, {:group_info, corr, channel}}
  end

  def decode(@group_messages, <<corr::32, flags, count::32, rest::binary>>) do
    with :ok <- check(flags in 0..(@more_flag + @times_flag), :group_messages, :flags),
         {:ok, messages} <- GroupMessages.decode(rest, count, flags >= @times_flag) do
      {:ok, {:group_messages, corr, rem(flags, 2) == @more_flag, count, messages}}
    end
  end

  def decode(@group_count, <<corr::32, n::64>>), do: {:ok, {:group_count, corr, n}}
  def decode(@group_count, body), do: size_error(body, 12, :group_count)

  def decode(@group_info_ok, <<corr::32, count::16, rest::binary>>) do
    with {:ok, groups, rest} <- decode_each(rest, count, &decode_group/1, []),
         :ok <- done(rest, :group_info_ok),
         do: {:ok, {:group_info_ok, corr, groups}}
  end

  def decode(opcode, _body) do
    {type, ^opcode} = List.keyfind(@requests ++ @responses, opcode, 1)
    {:error, {:truncated, type}}
  end

  defp channel(rest, type) do
    case id(rest, type, :name) do
      {:ok, channel, rest} when byte_size(channel) <= @max_name -> {:ok, channel, rest}
      {:ok, _long, _rest} -> {:error, {:bad_field, type, :name}}
      error -> error
    end
  end

  defp channel_group(rest, type) do
    with {:ok, channel, rest} <- channel(rest, type),
         {:ok, group, rest} <- id(rest, type, :group),
         do: {:ok, channel, group, rest}
  end

  defp id(<<0::16, _::binary>>, type, field), do: {:error, {:bad_field, type, field}}

  defp id(<<size::16, value::binary-size(size), rest::binary>>, _type, _field),
    do: {:ok, value, rest}

  defp id(_rest, type, _field), do: {:error, {:truncated, type}}

  defp dead_letter(<<0::16, rest::binary>>), do: {:ok, nil, rest}

  defp dead_letter(rest) do
    case id(rest, :group_create, :dead_letter) do
      {:ok, name, _rest} when byte_size(name) > @max_name ->
        {:error, {:bad_field, :group_create, :dead_letter}}

      other ->
        other
    end
  end

  # Two u32s, the body's last fields.
  defp fixed(<<a::32, b::32>>, _type), do: {:ok, [a, b]}
  defp fixed(rest, type), do: size_error(rest, 8, type)

  # A count, then that many seqs, the body's last fields.
  defp seqs(<<count::32, rest::binary>>, type) do
    if byte_size(rest) == count * 8,
      do: {:ok, count, for(<<seq::64 <- rest>>, do: seq)},
      else: size_error(rest, count * 8, type)
  end

  defp seqs(_rest, type), do: {:error, {:truncated, type}}

  defp from(@from_seq, seq), do: {:ok, seq}
  defp from(@from_earliest, 0), do: {:ok, :earliest}
  defp from(@from_latest, 0), do: {:ok, :latest}
  defp from(@from_time, ms), do: {:ok, {:time, ms}}
  defp from(_, _), do: {:error, {:bad_field, :group_create, :from}}

  defp decode_each(rest, 0, _fun, acc), do: {:ok, :lists.reverse(acc), rest}

  defp decode_each(rest, left, fun, acc) do
    with {:ok, item, rest} <- fun.(rest), do: decode_each(rest, left - 1, fun, [item | acc])
  end

  defp decode_group(rest) do
    with {:ok, name, rest} <- id(rest, :group_info_ok, :name),
         <<delivered::64, pending::64, lag::64, redelivered::64, acked::64, dead::64, lost::64,
           dropped::64, held::64, ack_wait::32, max_deliver::32, max_pending::32,
           rest::binary>> <- rest,
         {:ok, dead_letter, rest} <- optional_id(rest),
         <<count::16, rest::binary>> <- rest,
         {:ok, consumers, rest} <- decode_each(rest, count, &decode_consumer/1, []) do
      group = %{
        name: name,
        delivered: if(delivered == @none, do: -1, else: delivered),
        pending: pending,
        lag: lag,
        redelivered: redelivered,
        acked: acked,
        dead: dead,
        lost: lost,
        dropped: dropped,
        held: held,
        config: %{
          ack_wait: ack_wait,
          max_deliver: if(max_deliver == 0, do: :infinity, else: max_deliver),
          max_pending: max_pending,
          dead_letter: dead_letter
        },
        consumers: consumers
      }

      {:ok, group, rest}
    else
      {:error, _} = error -> error
      _ -> {:error, {:truncated, :group_info_ok}}
    end
  end

  defp optional_id(<<0::16, rest::binary>>), do: {:ok, nil, rest}
  defp optional_id(rest), do: id(rest, :group_info_ok, :dead_letter)

  defp decode_consumer(rest) do
    case id(rest, :group_info_ok, :consumer) do
      {:ok, name, <<pending::64, idle::64, rest::binary>>} ->
        {:ok, %{name: name, pending: pending, idle_ms: idle}, rest}

      {:ok, _name, _rest} ->
        {:error, {:truncated, :group_info_ok}}

      error ->
        error
    end
  end

  defp check(true, _type, _field), do: :ok
  defp check(false, type, field), do: {:error, {:bad_field, type, field}}

  defp done(<<>>, _type), do: :ok
  defp done(_rest, type), do: {:error, {:trailing_bytes, type}}

  defp size_error(rest, fixed, type) when byte_size(rest) > fixed,
    do: {:error, {:trailing_bytes, type}}

  defp size_error(_rest, _fixed, type), do: {:error, {:truncated, type}}
end
