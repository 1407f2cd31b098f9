defmodule Ringbus.Server.GroupRequests do
  @moduledoc false
  # Version 5's consumer-group requests (docs/PROTOCOL.md, "Consumer
  # groups"), each one call of `Ringbus.Groups`, the Elixir API, so a group
  # behaves the same from either; this only maps frames to its arguments and
  # its answers to frames. `Ringbus.Server.Session` checks the right and
  # the version, and carries out a fetch that waits:
  #
  #   run(frame, config) -> a frame | {:frames, frames} | {:error, reason}
  #                         | {:error, reason, message} | {:wait, fun}
  #
  # `fun` is the fetch that waits, to run in a process of its own (so that
  # it holds up none of the connection's other requests) and returning the
  # frames that answer it. It names the connection, the process that runs
  # `run/2`, as the consumer's owner: when the connection ends, the
  # consumer's pending messages are due at once, as for any owner.

  alias Ringbus.Groups
  alias Ringbus.Wire.{Frame, GroupFrame}

  @header GroupFrame.messages_header_size()
  @message_overhead GroupFrame.message_overhead()
  # A timed message (version 6) carries its time too.
  @timed_overhead @message_overhead + 8

  @doc "The right a request needs, and the channel it is on."
  @spec access(tuple()) :: {:read | :write | :manage, binary()}
  def access({type, _corr, channel}) when type == :group_info, do: {:read, channel}

  def access(frame) when elem(frame, 0) in [:group_create, :group_delete],
    do: {:manage, elem(frame, 2)}

  def access(frame), do: {:write, elem(frame, 2)}

  @doc "Runs a group request; see the module's header."
  @spec run(tuple(), Ringbus.Server.Config.t()) :: term()
  def run(frame, config) do
    answer(frame, config)
  rescue
    # Ringbus.Groups' checks of what the frame's fields allow (max_pending 0).
    e in ArgumentError -> {:error, :bad_argument, Exception.message(e)}
  end

  defp answer(
         {:group_create, corr, channel, group, from, ack_wait, max_deliver, max_pending, dl},
         _
       ) do
    opts = [
      from: from,
      ack_wait: ack_wait,
      max_deliver: max_deliver,
      max_pending: max_pending,
      dead_letter: dl
    ]

    with :ok <- result(Groups.create(channel, group, opts)), do: {:ok, corr}
  end

  defp answer({:group_fetch, corr, channel, group, consumer, max, wait}, config),
    do: fetch(corr, {channel, group, consumer, max}, [timeout: wait], config)

  # Version 6: each message with its time.
  defp answer({:group_fetch_timed, corr, channel, group, consumer, max, wait}, config),
    do: fetch(corr, {channel, group, consumer, max}, [timeout: wait, times: true], config)

  defp answer({:group_ack, corr, channel, group, _count, seqs}, _config),
    do: counted(corr, Groups.ack(channel, group, seqs))

  defp answer({:group_nack, corr, channel, group, delay, _count, seqs}, _config),
    do: counted(corr, Groups.nack(channel, group, seqs, delay: delay))

  defp answer({:group_in_progress, corr, channel, group, _count, seqs}, _config),
    do: counted(corr, Groups.in_progress(channel, group, seqs))

  defp answer({:group_claim, corr, channel, group, consumer, _count, seqs}, config),
    do: messages(corr, Groups.claim(channel, group, consumer, seqs), config)

  defp answer({:group_autoclaim, corr, channel, group, consumer, min_idle, max}, config) do
    with :ok <- count(:max, max),
         do: messages(corr, Groups.autoclaim(channel, group, consumer, min_idle, max), config)
  end

  defp answer({:group_remove_consumer, corr, channel, group, consumer}, _config),
    do: counted(corr, Groups.remove_consumer(channel, group, consumer))

  defp answer({:group_delete, corr, channel, group}, _config) do
    with :ok <- result(Groups.delete(channel, group)), do: {:ok, corr}
  end

  defp answer({:group_info, corr, channel}, config) do
    with {:ok, groups} <- result(Groups.info(channel)) do
      frame = {:group_info_ok, corr, Enum.map(groups, &wire_names/1)}
      size = IO.iodata_length(Frame.encode(frame)) - Frame.length_prefix_size()

      if size <= config.max_frame_size,
        do: frame,
        else: {:error, :too_large, "the channel's groups take #{size} bytes, over max_frame_size"}
    end
  end

  defp fetch(corr, {channel, group, consumer, max}, opts, config) do
    with :ok <- count(:max, max) do
      fetch = &Groups.fetch(channel, group, consumer, max, [owner: &1] ++ opts)

      if opts[:timeout] == 0 do
        messages(corr, fetch.(self()), config)
      else
        owner = self()
        {:wait, fn -> finish(messages(corr, fetch.(owner), config), corr) end}
      end
    end
  end

  defp count(key, n) do
    max = GroupFrame.max_fetch()
    if n in 1..max, do: :ok, else: {:error, :bad_argument, "#{key} must be 1 to #{max}, got #{n}"}
  end

  # A dead-letter channel named by the Elixir API may be any term; the wire
  # carries names.
  defp wire_names(%{config: %{dead_letter: dl} = config} = group)
       when not is_binary(dl) and dl != nil,
       do: %{group | config: %{config | dead_letter: inspect(dl)}}

  defp wire_names(group), do: group

  # A waiting fetch's crash is the connection's to answer; its own errors
  # are frames already.
  defp finish({:frames, frames}, _corr), do: frames
  defp finish({:error, reason}, corr), do: [error(corr, reason, nil)]
  defp finish({:error, reason, message}, corr), do: [error(corr, reason, message)]

  @doc "The ERROR frame for a failed request (a waiting fetch's, which has no session)."
  @spec error(Frame.corr(), atom(), binary() | nil) :: Frame.t()
  def error(corr, reason, message),
    do: {:error, corr, reason, message || Ringbus.Wire.ErrorCode.describe(reason)}

  defp counted(corr, answer) do
    with {:ok, n} <- result(answer), do: {:group_count, corr, n}
  end

  # The messages in as many GROUP_MESSAGES frames as they need, each within
  # max_frame_size (its first message always), all but the last flagged.
  defp messages(corr, answer, config) do
    with {:ok, messages} <- result(answer),
         do: {:frames, split(messages, config, &{:group_messages, corr, &3, &1, &2}, [])}
  end

  # `frame.(count, messages, more?)` makes each frame.
  defp split(messages, config, frame, frames) do
    case fit(messages, config.max_frame_size - @header, 0, 0, []) do
      {n, taken, []} -> :lists.reverse(frames, [frame.(n, taken, false)])
      {n, taken, rest} -> split(rest, config, frame, [frame.(n, taken, true) | frames])
    end
  end

  defp fit([{_, payload, _} = m | rest], room, n, bytes, acc)
       when n == 0 or bytes + byte_size(payload) + @message_overhead <= room,
       do: fit(rest, room, n + 1, bytes + byte_size(payload) + @message_overhead, [m | acc])

  defp fit([{_, payload, _, _} = m | rest], room, n, bytes, acc)
       when n == 0 or bytes + byte_size(payload) + @timed_overhead <= room,
       do: fit(rest, room, n + 1, bytes + byte_size(payload) + @timed_overhead, [m | acc])

  defp fit(rest, _room, n, _bytes, acc), do: {n, :lists.reverse(acc), rest}

  ## Group subscriptions (version 7)
  #
  # The connection subscribes (`Ringbus.Groups.subscribe/4`), so it is the
  # subscriber and the consumer's owner: its end makes the consumer's
  # pending messages due at once. The session keeps `{channel, group,
  # consumer}` of each, to end it.

  @doc """
  Subscribes the calling connection to a group's consumer, with each
  message's delivery count (and time): `{:ok, sub, incarnation}` or
  `{:error, reason}`.
  """
  @spec subscribe({binary(), binary(), binary()}, pos_integer(), pos_integer(), boolean()) ::
          {:ok, Ringbus.subscription(), pos_integer()} | {:error, atom()}
  def subscribe({channel, group, consumer}, credit, max_batch, times?) do
    opts = [max_credit: credit, max_batch: max_batch, deliveries: true, times: times?]

    with {:ok, inc} <- Ringbus.incarnation(channel),
         {:ok, sub} <- Groups.subscribe(channel, group, consumer, opts),
         do: {:ok, sub, inc}
  end

  @doc """
  A group subscription ended by UNSUBSCRIBE: its consumer goes, so its
  pending messages are due at once, as when the connection closes.
  """
  @spec unsubscribed({binary(), binary(), binary()}) :: :ok
  def unsubscribed({channel, group, consumer}) do
    _ = Groups.remove_consumer(channel, group, consumer)
    :ok
  end

  @doc "The GROUP_DELIVER frames of a batch, each within `max_frame_size`."
  @spec deliveries(non_neg_integer(), [tuple()], Ringbus.Server.Config.t()) :: [Frame.t()]
  def deliveries(sub_id, messages, config),
    do: split(messages, config, fn n, taken, _more? -> {:group_deliver, sub_id, n, taken} end, [])

  defp result({:error, {reason, limit}}) when reason in [:too_many_groups, :too_many_consumers],
    do: {:error, :too_many_groups, "#{reason}: the limit is #{limit}"}

  defp result(answer), do: answer
end
