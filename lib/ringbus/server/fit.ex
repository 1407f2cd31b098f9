defmodule Ringbus.Server.Fit do
  @moduledoc false
  # How many messages of a READ answer or a delivery go in one frame: those
  # whose payloads and per-message overhead fit in the payload room, at
  # least one (`max_payload_size` leaves room for the largest header).

  alias Ringbus.Wire.{Frame, TimeFrame}

  # Guards compare with them.
  @message_overhead Frame.message_overhead()
  @timed_overhead TimeFrame.message_overhead()

  @doc """
  Takes messages (`{seq, payload}`, or `{seq, payload, ms}` with their
  times) while they fit in `max` bytes, at least one: their count, them,
  and the rest.
  """
  @spec fit([tuple()], pos_integer()) :: {non_neg_integer(), [tuple()], [tuple()]}
  def fit(messages, max), do: fit(messages, max, 0, 0, [])

  defp fit([{_, payload} = message | rest], max, count, bytes, acc)
       when count == 0 or bytes + byte_size(payload) + @message_overhead <= max,
       do:
         fit(rest, max, count + 1, bytes + byte_size(payload) + @message_overhead, [message | acc])

  defp fit([{_, payload, _} = message | rest], max, count, bytes, acc)
       when count == 0 or bytes + byte_size(payload) + @timed_overhead <= max,
       do:
         fit(rest, max, count + 1, bytes + byte_size(payload) + @timed_overhead, [message | acc])

  defp fit(rest, _max, count, _bytes, acc), do: {count, :lists.reverse(acc), rest}
end
