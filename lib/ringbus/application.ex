defmodule Ringbus.Application do
  @moduledoc false
  # Ringbus.Supervisor (rest_for_one)
  # ├── Ringbus.Store               owns every ETS table; links to each
  # │                               channel's Ringbus.Channel.Anchor, which its
  # │                               subscriptions monitor
  # ├── Ringbus.Store.Sweep         every second, expires what is older than
  # │                               max_age in idle memory channels (bounded
  # │                               work a sweep); app env :expiry_sweep
  # ├── Ringbus.Group.TableOwner    owns the consumer groups of the channels
  # │                               this node holds (Ringbus.Release.node_children/0),
  # │                               before the replicated channels, whose
  # │                               machines put their groups in it
  # ├── Ringbus.Replica.Supervisor  Ra and the replicated channels of this
  # │                               node (lib/ringbus/replica/README.md);
  # │                               restarts with the store, and remakes
  # │                               their rings from their logs
  # ├── Ringbus.Cluster.Supervisor  the cluster layer (see its moduledoc);
  # │                               restarts with the store, whose channels
  # │                               it announces
  # ├── Ringbus.Server.Directory    the servers listening on this node (a Registry)
  # └── in a release: the channels, servers and HTTP endpoint its runtime
  #     configuration declares (`Ringbus.Release`)
  #
  # Subscriptions belong to no supervisor: each is started by its subscriber
  # and ends with it, or with its channel's anchor. Children stop in reverse:
  # the HTTP endpoint, then the servers (each connection answers what it has
  # read and says shutting_down), then the store.

  use Application

  @impl true
  def start(_type, _args) do
    children =
      [Ringbus.Store, {Ringbus.Store.Sweep, Application.get_env(:ringbus, :expiry_sweep, [])}] ++
        Ringbus.Release.node_children() ++
        [Ringbus.Replica.Supervisor, Ringbus.Cluster.Supervisor, Ringbus.Server.Directory] ++
        Ringbus.Release.children(Application.get_env(:ringbus, :release))

    Supervisor.start_link(children, strategy: :rest_for_one, name: Ringbus.Supervisor)
  end
end
