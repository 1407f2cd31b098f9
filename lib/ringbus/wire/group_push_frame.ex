defmodule Ringbus.Wire.GroupPushFrame do
  @moduledoc """
  Version 7's push subscription to a consumer group (docs/PROTOCOL.md,
  "Group subscriptions"), whose frames `Ringbus.Wire.GroupFrame` hands to
  this module:

      {:group_subscribe, corr, channel, group, consumer, credit, max_batch, times?}
      {:group_deliver, sub_id, count, messages}   # messages: [{seq, payload, deliveries}]
                                                  # or, times, [{seq, payload, deliveries, ms}]

  `GROUP_SUBSCRIBE` is answered by `SUBSCRIBED`; its messages come in
  `GROUP_DELIVER`, laid out as `GROUP_MESSAGES`' with the subscription id
  where the correlation id was and no `more` flag. Acks are `GROUP_ACK`,
  and the subscription ends with `UNSUBSCRIBE`.
  """

  alias Ringbus.Wire.GroupMessages

  @group_subscribe 0x1B
  @group_deliver 0x92

  # As SUBSCRIBE's: the deliveries carry each message's time.
  @subscribe_times 0x04
  # As GROUP_MESSAGES'.
  @deliver_times 0x02

  @max_name 255

  @type t ::
          {:group_subscribe, non_neg_integer(), binary(), binary(), binary(), non_neg_integer(),
           non_neg_integer(), boolean()}
          | {:group_deliver, non_neg_integer(), non_neg_integer(), [tuple()]}

  defguardp is_u32(x) when is_integer(x) and x >= 0 and x <= 0xFFFF_FFFF
  defguardp is_name(x) when is_binary(x) and byte_size(x) >= 1 and byte_size(x) <= @max_name
  defguardp is_id(x) when is_binary(x) and byte_size(x) >= 1 and byte_size(x) <= 0xFFFF

  @doc "The request frame types with their opcodes."
  @spec requests() :: keyword(byte())
  def requests, do: [group_subscribe: @group_subscribe]

  @doc "The server frame types with their opcodes."
  @spec responses() :: keyword(byte())
  def responses, do: [group_deliver: @group_deliver]

  @doc "`{opcode, body}` of a frame of this module, or nil when a field is out of range."
  @spec body(tuple()) :: {byte(), iodata()} | nil
  def body({:group_subscribe, corr, channel, group, consumer, credit, max_batch, times?})
      when is_u32(corr) and is_name(channel) and is_id(group) and is_id(consumer) and
             is_u32(credit) and is_u32(max_batch) and is_boolean(times?) do
    flags = if times?, do: @subscribe_times, else: 0

    {@group_subscribe,
     [<<corr::32, flags>>, id(channel), id(group), id(consumer), <<credit::32, max_batch::32>>]}
  end

  def body({:group_deliver, sub, count, messages})
      when is_u32(sub) and is_u32(count) and is_list(messages) do
    flags = if match?([{_, _, _, _} | _], messages), do: @deliver_times, else: 0
    {@group_deliver, [<<sub::32, flags, count::32>> | GroupMessages.encode(messages, count)]}
  end

  def body(_frame), do: nil

  defp id(binary), do: [<<byte_size(binary)::16>> | binary]

  @doc "Decodes the body (after the opcode) of a frame of this module."
  @spec decode(byte(), binary()) :: {:ok, tuple()} | {:error, term()}
  def decode(@group_subscribe, <<corr::32, flags, rest::binary>>) do
    with :ok <- check(flags in [0, @subscribe_times], :flags),
         {:ok, channel, rest} <- id(rest, :name),
         :ok <- check(byte_size(channel) <= @max_name, :name),
         {:ok, group, rest} <- id(rest, :group),
         {:ok, consumer, rest} <- id(rest, :consumer) do
      case rest do
        <<credit::32, max_batch::32>> ->
          times? = flags == @subscribe_times
          {:ok, {:group_subscribe, corr, channel, group, consumer, credit, max_batch, times?}}

        <<_::64, _::binary>> ->
          {:error, {:trailing_bytes, :group_subscribe}}

        _ ->
          {:error, {:truncated, :group_subscribe}}
      end
    end
  end

  def decode(@group_deliver, <<sub::32, flags, count::32, rest::binary>>) do
    with :ok <- check(flags in [0, @deliver_times], :flags, :group_deliver) do
      case GroupMessages.decode(rest, count, flags == @deliver_times) do
        {:ok, messages} -> {:ok, {:group_deliver, sub, count, messages}}
        {:error, {reason, _type}} -> {:error, {reason, :group_deliver}}
      end
    end
  end

  def decode(@group_subscribe, _body), do: {:error, {:truncated, :group_subscribe}}
  def decode(@group_deliver, _body), do: {:error, {:truncated, :group_deliver}}

  defp id(<<0::16, _::binary>>, field), do: {:error, {:bad_field, :group_subscribe, field}}
  defp id(<<size::16, value::binary-size(size), rest::binary>>, _), do: {:ok, value, rest}
  defp id(_rest, _field), do: {:error, {:truncated, :group_subscribe}}

  defp check(ok?, field, type \\ :group_subscribe)
  defp check(true, _field, _type), do: :ok
  defp check(false, field, type), do: {:error, {:bad_field, type, field}}
end
