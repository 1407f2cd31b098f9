defmodule Ringbus.Test.Internals do
  @moduledoc """
  The internal contracts that tests reach into, in one place: a subscription
  handle is `{pid, ref}`, and a channel name resolves to its
  `Ringbus.Channel` handle through `Ringbus.Store.fetch/1`.
  """

  @doc "The process behind a subscription handle."
  def subscription_pid({pid, ref}) when is_pid(pid) and is_reference(ref), do: pid

  @doc "The handle of an existing channel."
  def channel!(name) do
    {:ok, channel} = Ringbus.Store.fetch(name)
    channel
  end

  @doc """
  Creates a channel of a fresh name with `opts`, deleted when the calling
  test ends, and returns its handle.
  """
  def temp_channel!(opts) do
    name = {__MODULE__, make_ref()}
    :ok = Ringbus.create(name, opts)
    ExUnit.Callbacks.on_exit(fn -> Ringbus.delete(name) end)
    channel!(name)
  end

  @doc "The handle of a channel, or `{:error, :no_channel}`."
  def channel(name), do: Ringbus.Store.fetch(name)

  @doc """
  The index of the newest snapshot of replicated channel `name`'s Raft
  member on this node, from Ra's metrics table (refreshed on Ra's tick,
  every second); 0 when there is none.
  """
  def snapshot_index(name) do
    {:ok, %{replica: %{server: {local, _node}}}} = Ringbus.Store.fetch(name)

    case :ets.lookup(:ra_metrics, local) do
      [{_, _term, index, _applied, _commit, _written, _latency}] when is_integer(index) -> index
      _ -> 0
    end
  end
end
