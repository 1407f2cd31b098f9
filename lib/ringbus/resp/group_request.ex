defmodule Ringbus.Resp.GroupRequest do
  @moduledoc false
  # How the consumer group commands (`GroupCommands`, `ClaimCommands`,
  # `StreamAdmin`) reach a stream's groups: each maps its arguments onto a
  # request of `Ringbus.Group` (seqs, `Ringbus.Resp.Entry.position/2` and
  # `entry/1` of the IDs given) and runs it as the operation `{:group,
  # request}` through `Ringbus.run/3`: here when this node homes the stream,
  # else at its home through the cluster's link, in one round trip. The
  # answer comes stamped with the stream's incarnation, whose tag the IDs
  # of the reply carry. A cluster error answers as any call on another
  # node's stream does: `-TRYAGAIN` or `-CLUSTERDOWN` (not done), `-TIMEOUT`
  # (may be done).

  alias Ringbus.Resp.{Entry, Errors}

  @doc """
  Runs `request` on the groups of stream `key` and returns `reply.(tag,
  answer)`, or `none` when no stream is named `key`. Other errors of the
  channel API end the command (`Ringbus.Resp.Errors.fail!/2`).
  """
  @spec run(binary(), Ringbus.Group.request(), term(), (Entry.tag(), term() -> term())) :: term()
  def run(key, request, none, reply) do
    case Ringbus.run(key, {:stamped, {:group, request}}) do
      {:ok, incarnation, answer} -> reply.(Entry.tag(incarnation), answer)
      {:error, :no_channel} -> none
      {:error, reason} -> Errors.fail!(reason, key)
    end
  end

  @doc "Whether stream `key` has group `group`: false when there is no such stream."
  @spec group?(binary(), binary()) :: boolean()
  def group?(key, group), do: run(key, {:info, group}, false, fn _tag, info -> ok?(info) end)

  defp ok?({:ok, _}), do: true
  defp ok?({:error, :no_group}), do: false
end
