defmodule Ringbus.HTTP.Health do
  @moduledoc false
  # The answers of `GET /health` and `GET /ready`, as functions of data.
  # Liveness: the endpoint answers, so the VM runs. Readiness: a server
  # listens (`Ringbus.Server.Directory`) and, when the node was told to join
  # a cluster (`config :ringbus, :cluster, join: ...`, `RINGBUS_JOIN`), it
  # is connected to one of those nodes (joining one is meeting them all).

  @doc "Why the node is not ready, or `:ok`."
  @spec ready([map()], [node()], [node()]) :: :ok | {:error, String.t()}
  def ready(servers, join, members) do
    join = join -- [node()]

    cond do
      servers == [] ->
        {:error, "no server is listening"}

      join != [] and not Enum.any?(join, &(&1 in members)) ->
        {:error, "not joined to the cluster: none of #{Enum.join(join, ", ")} is connected"}

      true ->
        :ok
    end
  end

  @doc "`ready/3` on this node's servers, its cluster configuration and members."
  @spec ready() :: :ok | {:error, String.t()}
  def ready do
    join = Keyword.get(Application.get_env(:ringbus, :cluster, []), :join, [])
    ready(Ringbus.Server.Directory.servers(), join, Ringbus.Cluster.members())
  end
end
