defmodule Ringbus.Application do
  @moduledoc false
  # Ringbus.Supervisor (rest_for_one)
  # ├── Ringbus.Store               owns every ETS table; links to each
  # │                               channel's Ringbus.Channel.Anchor, which its
  # │                               subscriptions monitor
  # └── Ringbus.Cluster.Supervisor  the cluster layer (see its moduledoc);
  #                                 restarts with the store, whose channels
  #                                 it announces
  #
  # Subscriptions belong to no supervisor: each is started by its subscriber
  # and ends with it, or with its channel's anchor.

  use Application

  @impl true
  def start(_type, _args) do
    Supervisor.start_link([Ringbus.Store, Ringbus.Cluster.Supervisor],
      strategy: :rest_for_one,
      name: Ringbus.Supervisor
    )
  end
end
