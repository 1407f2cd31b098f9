defmodule Ringbus.Cluster.Router do
  @moduledoc false
  # The cluster side of `Ringbus`'s dispatch: `Ringbus` runs a channel of
  # this node itself and hands everything else here. A name resolves to its
  # home with one read of the directory table; the request then goes
  # through the link to that node (`Ringbus.Cluster.Links.call/4`), which
  # answers, or says `{:error, :node_down}` / `{:error, :node_busy}` (not
  # carried out) or `{:error, :timeout}` (unknown), within a bounded wait.

  alias Ringbus.Store
  alias Ringbus.Cluster.{Directory, Links}

  @doc "Runs `op` on channel `name` at its home, or `{:error, :no_channel}` when none has it."
  # `timeout` (ms) bounds the call instead of the link's timeouts when given.
  @spec request(term(), term(), pos_integer() | nil) :: term()
  def request(name, op, timeout \\ nil) do
    case Directory.remote_home(name) do
      {:ok, home} when home != node() -> Links.call(home, name, op, timeout)
      _ -> {:error, :no_channel}
    end
  end

  @doc "Creates channel `name` at `home` (this node when `nil`)."
  @spec create(term(), keyword(), node() | nil) ::
          :ok | {:error, :exists | Ringbus.node_error()}
  def create(name, opts, home) when home in [nil, node()], do: Directory.create(name, opts)

  def create(name, opts, home),
    do: Links.call(home, name, {:create, opts}, create_timeout(home))

  @doc "Deletes channel `name` at its home."
  @spec delete(term()) :: :ok | {:error, :no_channel | Ringbus.node_error()}
  def delete(name) do
    with {:error, :no_channel} <- Store.fetch(name),
         {:ok, home} when home != node() <- Directory.remote_home(name) do
      Links.call(home, name, :delete, create_timeout(home))
    else
      {:ok, _channel_or_self} -> Directory.delete(name)
      :error -> {:error, :no_channel}
    end
  end

  @doc "Returns credit to a subscription homed on another node."
  @spec ack({pid(), reference()}, pos_integer()) :: :ok | {:error, :no_subscription}
  def ack({pid, _ref} = sub, count), do: Links.ack(node(pid), sub, count)

  @doc "Ends a subscription homed on another node."
  @spec unsubscribe({pid(), reference()}) :: :ok | {:error, :no_subscription | :node_busy}
  def unsubscribe({pid, _ref} = sub), do: Links.unsubscribe(node(pid), sub)

  @doc "The node that homes `name`: this one, another, or none."
  @spec home(term()) :: {:ok, node()} | {:error, :no_channel}
  def home(name) do
    case Store.fetch(name) do
      {:ok, _channel} ->
        {:ok, node()}

      {:error, :no_channel} ->
        case Directory.remote_home(name) do
          {:ok, home} -> {:ok, home}
          :error -> {:error, :no_channel}
        end
    end
  end

  # A create waits for the home's two rounds, each bounded by the home's
  # create timeout, plus the way there and back.
  defp create_timeout(_home), do: 2 * Ringbus.Cluster.Config.from_env().create_timeout + 100
end
