defmodule Ringbus.Replica.Commands do
  @moduledoc false
  # The group commit of a replicated channel's writer, as functions: the
  # requests it has queued become as few machine commands as their order
  # allows, and each command's reply becomes one answer per request. Pure.
  #
  # A run of pushes is one `{:push_batches, [{tag, payloads}]}` (each batch
  # decided on its own, so one refusal refuses no other); a run of pulls is
  # one `{:pull, n}`, whose messages go to the pullers in order; a trim is
  # one `{:trim, trim}`, however many messages it removes, a delete one
  # `{:delete, seqs}`; a run of group requests is one `{:groups, [{room,
  # request}]}`, one answer each; a push under a Redis stream ID is one
  # `{:push_id, given, payload}` and an XSETID one `{:set_id, id}` (rare:
  # each alone). Order is
  # kept: a caller waits for each answer, so its requests are never in one
  # queue together, and requests of different callers are not ordered.

  # Bounds on one command, so that one log entry stays small enough to
  # write and replicate at once.
  @max_requests 512
  @max_bytes 4 * 1024 * 1024

  @typedoc "A queued request: who to answer, and what."
  @type request ::
          {reply_to :: term(),
           {:push, term(), [binary()], non_neg_integer()}
           | :pull
           | {:trim, map()}
           | {:push_id, term(), binary(), non_neg_integer()}
           | {:set_id, term()}
           | {:delete, [non_neg_integer()]}
           | {:group, pos_integer() | :infinity, term()}}

  @typedoc "A machine command, and who to answer, in order."
  @type command :: {term(), [term()]}

  @doc "Groups `requests` (oldest first) into commands, oldest first."
  @spec group([request()]) :: [command()]
  def group(requests), do: group(requests, [])

  defp group([], acc), do: :lists.reverse(acc)

  defp group([{_to, {:push, _, _, _}} | _] = requests, acc) do
    {batches, to, rest} = pushes(requests, [], [], 0, 0)
    group(rest, [{{:push_batches, batches}, to} | acc])
  end

  defp group([{_to, :pull} | _] = requests, acc) do
    {to, rest} = pulls(requests, [], 0)
    group(rest, [{{:pull, length(to)}, to} | acc])
  end

  defp group([{to, {op, _} = command} | rest], acc) when op in [:trim, :delete],
    do: group(rest, [{command, [to]} | acc])

  defp group([{to, {:push_id, given, payload, _bytes}} | rest], acc),
    do: group(rest, [{{:push_id, given, payload}, [to]} | acc])

  defp group([{to, {:set_id, id}} | rest], acc), do: group(rest, [{{:set_id, id}, [to]} | acc])

  defp group([{_to, {:group, _, _}} | _] = requests, acc) do
    {to, group_requests, rest} = group_requests(requests, [], [], 0)
    group(rest, [{{:groups, group_requests}, to} | acc])
  end

  defp group_requests([{to, {:group, room, request}} | rest], tos, acc, n)
       when n < @max_requests,
       do: group_requests(rest, [to | tos], [{room, request} | acc], n + 1)

  defp group_requests(rest, tos, acc, _n),
    do: {:lists.reverse(tos), :lists.reverse(acc), rest}

  defp pushes([{to, {:push, tag, payloads, bytes}} | rest], batches, tos, n, size)
       when n < @max_requests and (n == 0 or size + bytes <= @max_bytes),
       do: pushes(rest, [{tag, payloads} | batches], [to | tos], n + 1, size + bytes)

  defp pushes(rest, batches, tos, _n, _size),
    do: {:lists.reverse(batches), :lists.reverse(tos), rest}

  defp pulls([{to, :pull} | rest], tos, n) when n < @max_requests,
    do: pulls(rest, [to | tos], n + 1)

  defp pulls(rest, tos, _n), do: {:lists.reverse(tos), rest}

  @doc """
  The answer to each request of a command, from the machine's reply: a
  push gets `{:ok, seq}` or `{:error, reason}` (one under an ID `{:ok,
  seq, id}`); a pull `{:ok, seq, payload}` or `:empty`.
  """
  @spec answers(term(), [term()], term()) :: [{term(), term()}]
  def answers({:push_batches, _}, tos, replies) when is_list(replies),
    do: Enum.zip(tos, replies)

  def answers({:pull, _}, tos, {:ok, messages}) when is_list(messages),
    do: pulled(tos, messages, [])

  def answers({op, _}, [to], {:ok, count}) when op in [:trim, :delete], do: [{to, {:ok, count}}]
  def answers({:push_id, _, _}, [to], reply), do: [{to, reply}]
  def answers({:set_id, _}, [to], reply), do: [{to, reply}]

  def answers({:groups, _}, tos, {:groups, replies}) when is_list(replies),
    do: Enum.zip(tos, replies)

  def answers(_command, tos, {:error, _} = error), do: for(to <- tos, do: {to, error})

  defp pulled([to | tos], [{seq, payload} | messages], acc),
    do: pulled(tos, messages, [{to, {:ok, seq, payload}} | acc])

  defp pulled([to | tos], [], acc), do: pulled(tos, [], [{to, :empty} | acc])
  defp pulled([], _messages, acc), do: :lists.reverse(acc)
end
