defmodule Ringbus.Resp.GroupHome do
  @moduledoc false
  # Where the consumer group commands run their work: at the node that
  # homes the stream, on its group table (`Ringbus.Resp.Groups`), so that
  # a group is one group across the cluster, whichever node a consumer is
  # connected to. `run/5` goes through `Ringbus.at_home/2`: in the caller
  # when this node homes the stream, else in the link at the home, which
  # runs it at once (ETS and the local ring only: nothing there waits). A
  # cluster error answers as any call on another node's stream does:
  # `-TRYAGAIN` or `-CLUSTERDOWN` (not done), `-TIMEOUT` (may be done).

  alias Ringbus.Resp.{Errors, Groups}

  @doc """
  Runs `module.function(table, key, args...)` at the home of stream `key`
  and returns what it returns, or `none` when no stream is named `key`.
  A reply it ends with (`Errors.fail!/2`) ends the command here too.
  """
  @spec run(binary(), module(), atom(), list(), term()) :: term()
  def run(key, module, function, args, none) do
    case Ringbus.at_home(key, {__MODULE__, :at_home, [module, function, args]}) do
      {:ok, {:ok, result}} -> result
      {:ok, {:failed, reply}} -> Errors.answer!(reply)
      {:error, :no_channel} -> none
      {:error, reason} -> Errors.fail!(reason, key)
    end
  end

  @doc false
  # At the home, with the stream's name and incarnation (`Ringbus.at_home/2`).
  def at_home(key, incarnation, module, function, args) do
    t = Groups.table()
    Groups.fresh(t, key, incarnation)
    {:ok, apply(module, function, [t, key | args])}
  catch
    :throw, {Errors, reply} -> {:failed, reply}
  end
end
