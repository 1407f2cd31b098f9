defmodule Ringbus.Application do
  @moduledoc false
  # Ringbus.Supervisor
  # └── Ringbus.Store          owns every ETS table; links to each channel's
  #                            Ringbus.Channel.Anchor, which its subscriptions
  #                            monitor
  #
  # Subscriptions belong to no supervisor: each is started by its subscriber
  # and ends with it, or with its channel's anchor.

  use Application

  @impl true
  def start(_type, _args) do
    Supervisor.start_link([Ringbus.Store], strategy: :one_for_one, name: Ringbus.Supervisor)
  end
end
