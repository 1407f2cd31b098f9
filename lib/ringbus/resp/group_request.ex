defmodule Ringbus.Resp.GroupRequest do
  @moduledoc false
  # How the consumer group commands (`GroupCommands`, `ClaimCommands`,
  # `StreamAdmin`) reach a stream's groups: each maps its arguments onto a
  # request of `Ringbus.Group` (seqs,
  # the IDs given as `Ringbus.Group.ByIds` takes them) and runs it as the
  # operation `{:ids, {:group, request}}` through `Ringbus.run/3`: here when
  # this node homes the stream, else at its home through the cluster's
  # link, in one round trip; the answer gives IDs for seqs. A cluster error
  # answers as any call on another
  # node's stream does: `-TRYAGAIN` or `-CLUSTERDOWN` (not done), `-TIMEOUT`
  # (may be done).

  alias Ringbus.Resp.Errors

  @doc """
  Runs `request` on the groups of stream `key` and returns `reply.(answer)`,
  or `none` when no stream is named `key`. Other errors of the channel API
  end the command (`Ringbus.Resp.Errors.fail!/2`). Messages come with
  their IDs, `{seq, payload, id}`, and other seqs as IDs (`Ringbus.Group.ByIds`).
  """
  @spec run(binary(), Ringbus.Group.request(), term(), (term() -> term())) :: term()
  def run(key, request, none, reply) do
    # Stamped, so that the request's own errors are told from the stream's.
    case Ringbus.run(key, {:stamped, {:ids, {:group, request}}}) do
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
