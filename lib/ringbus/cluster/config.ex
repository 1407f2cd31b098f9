defmodule Ringbus.Cluster.Config do
  @moduledoc false
  # The cluster's options, checked once when the cluster layer starts. They
  # come from the application environment (`config :ringbus, :cluster, ...`)
  # and are documented in `Ringbus.Cluster`.

  alias Ringbus.Options

  @defaults [
    join: [],
    call_timeout: 5,
    reply_timeout: 100,
    busy_timeout: 100,
    create_timeout: 1_000,
    max_buffer_bytes: 4 * 1024 * 1024,
    batch_bytes: 256 * 1024,
    reconnect_interval: 250
  ]

  @enforce_keys Keyword.keys(@defaults)
  defstruct @enforce_keys

  @type t :: %__MODULE__{
          join: [node()],
          call_timeout: pos_integer(),
          reply_timeout: pos_integer(),
          busy_timeout: pos_integer(),
          create_timeout: pos_integer(),
          max_buffer_bytes: pos_integer(),
          batch_bytes: pos_integer(),
          reconnect_interval: pos_integer()
        }

  @doc "Checks cluster options and fills in the defaults; raises `ArgumentError` on bad ones."
  @spec new!(keyword()) :: t()
  def new!(opts) do
    opts = Options.validate!(opts, @defaults, "cluster")
    Options.check!(:join, opts[:join], &nodes?/1, "a list of node names (atoms)")

    # Every key but :join is a positive integer.
    for key <- Keyword.keys(@defaults) -- [:join] do
      Options.check!(key, opts[key], &Options.positive?/1, "a positive integer")
    end

    struct!(__MODULE__, opts)
  end

  @doc "The options of the application environment, checked."
  @spec from_env() :: t()
  def from_env, do: new!(Application.get_env(:ringbus, :cluster, []))

  @doc "Whether `value` is a list of node names."
  @spec nodes?(term()) :: boolean()
  def nodes?(value), do: is_list(value) and Enum.all?(value, &(is_atom(&1) and &1 != nil))
end
