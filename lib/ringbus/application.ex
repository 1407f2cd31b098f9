defmodule Ringbus.Application do
  @moduledoc false
  # Ringbus.Supervisor (rest_for_one)
  # ├── Ringbus.Store                             owns every ETS table
  # └── Ringbus.Channel.SubscriptionOwner         every subscription links to it
  #                                               and registers in its table
  #
  # rest_for_one: if the table owner ever restarts, the subscriptions that read
  # its tables restart after it.

  use Application

  @impl true
  def start(_type, _args) do
    children = [
      Ringbus.Store,
      Ringbus.Channel.SubscriptionOwner
    ]

    Supervisor.start_link(children, strategy: :rest_for_one, name: Ringbus.Supervisor)
  end
end
