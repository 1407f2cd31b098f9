defmodule Ringbus.Groups.DeadLetter do
  @moduledoc false
  # The bytes of a dead letter (`Ringbus.Groups`, "Dead letters"), written
  # and read side by side: "rbdl", version 1, the seq, the delivery count,
  # the group, the channel, then the payload.

  @doc "A dead letter of `channel`'s message `seq`, delivered `deliveries` times by `group`."
  @spec encode(term(), binary(), non_neg_integer(), pos_integer(), binary()) :: binary()
  def encode(channel, group, seq, deliveries, payload) do
    name = if is_binary(channel), do: channel, else: inspect(channel)

    <<"rbdl", 1, seq::64, deliveries::32, byte_size(group)::16, group::binary,
      byte_size(name)::16, name::binary, payload::binary>>
  end

  @doc "A dead letter's fields, or `:error`."
  @spec decode(binary()) :: {:ok, map()} | :error
  def decode(
        <<"rbdl", 1, seq::64, deliveries::32, g::16, group::binary-size(g), n::16,
          channel::binary-size(n), payload::binary>>
      ),
      do:
        {:ok,
         %{seq: seq, deliveries: deliveries, group: group, channel: channel, payload: payload}}

  def decode(_other), do: :error
end
