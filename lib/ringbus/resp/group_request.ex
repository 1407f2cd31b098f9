defmodule Ringbus.Resp.GroupRequest do
  @moduledoc false
  # How the consumer group commands (`GroupCommands`, `ClaimCommands`,
  # `StreamAdmin`) reach a stream's groups: each maps its arguments onto a
  # request of `Ringbus.Group` (seqs,
  # `Ringbus.Resp.StreamIds` of the IDs given) and runs it as the operation
  # `{:group, request}` through `Ringbus.run/3`: here when this node homes
  # the stream, else at its home through the cluster's link, in one round
  # trip; a request that answers messages, as `{:ids, {:group, request}}`,
  # so that they come with their IDs. A cluster error answers as any call on another
  # node's stream does: `-TRYAGAIN` or `-CLUSTERDOWN` (not done), `-TIMEOUT`
  # (may be done).

  alias Ringbus.Resp.Errors

  @doc """
  Runs `request` on the groups of stream `key` and returns `reply.(answer)`,
  or `none` when no stream is named `key`. Other errors of the channel API
  end the command (`Ringbus.Resp.Errors.fail!/2`). A request whose answer
  is messages gets them with their IDs, `{seq, payload, id}`.
  """
  @spec run(binary(), Ringbus.Group.request(), term(), (term() -> term())) :: term()
  def run(key, request, none, reply) do
    op = if elem(request, 0) in [:read, :history, :claim, :autoclaim, :take], do: {:ids, {:group, request}}, else: {:group, request}

    # Stamped, so that the request's own errors are told from the stream's.
    case Ringbus.run(key, {:stamped, op}) do
      {:ok, _incarnation, answer} -> reply.(answer)
      {:error, :no_channel} -> none
      {:error, reason} -> Errors.fail!(reason, key)
    end
  end

  @doc "Whether stream `key` has group `group`: false when there is no such stream."
  @spec group?(binary(), binary()) :: boolean()
  def group?(key, group), do: run(key, {:info, group}, false, &ok?/1)

  defp ok?({:ok, _}), do: true
  defp ok?({:error, :no_group}), do: false
end
