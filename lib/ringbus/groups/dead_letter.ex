defmodule Ringbus.Groups.DeadLetter do
  @moduledoc false
  # A dead letter's bytes (`Ringbus.Groups`, "Dead letters"): its seq,
  # deliveries, group and channel, then the payload.

  @doc "The dead letter of message `seq` of `channel`'s `group`."
  @spec encode(term(), binary(), non_neg_integer(), pos_integer(), binary()) :: binary()
  def encode(channel, group, seq, deliveries, payload) do
    name = if is_binary(channel), do: channel, else: inspect(channel)

    <<"rbdl", 1, seq::64, deliveries::32, byte_size(group)::16, group::binary,
      byte_size(name)::16, name::binary, payload::binary>>
  end

  @doc "`encode/5`'s fields, or `:error`."
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
