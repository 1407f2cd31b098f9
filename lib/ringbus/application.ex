defmodule Ringbus.Application do
  @moduledoc false
  # Ringbus.Supervisor (rest_for_one)
  # ├── Ringbus.Store                             owns every ETS table
  # ├── Ringbus.Channel.Subscriptions             Registry of subscriptions
  # └── Ringbus.Channel.SubscriptionOwner         every subscription links to it
  #
  # rest_for_one: if the table owner ever restarts, the subscriptions that read
  # its tables restart after it.

  use Application

  @impl true
  def start(_type, _args) do
    children = [
      Ringbus.Store,
      {Registry, keys: :duplicate, name: Ringbus.Channel.Subscriptions},
      Ringbus.Channel.SubscriptionOwner
    ]

    Supervisor.start_link(children, strategy: :rest_for_one, name: Ringbus.Supervisor)
  end
end
