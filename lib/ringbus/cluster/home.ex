defmodule Ringbus.Cluster.Home do
  @moduledoc false
  # What another node asks of a channel homed here, run by the link that
  # brought the request: a channel operation goes to `Ringbus.Op.run/3`, as
  # `Ringbus` hands it for a local caller, with the link's room bounding the
  # answer. Creates and deletes are the directory's, which answers them in
  # its own time; everything else answers at once.
  #
  # The link is the subscriber of every subscription a remote node takes
  # here: the subscription sends it the batches, which it forwards in its
  # next batch to the node of the real subscriber. So a subscription ends
  # when its link does, as a local one ends with its subscriber.
  #
  # What waits on other processes (a replicated channel's writes and
  # deletes, through Ra; a survey) a link must not wait on, so it is
  # `{:async, fun}`: the link runs `fun` in a process of its own and
  # forwards its result as the answer.

  alias Ringbus.{Op, Replica, Store}
  alias Ringbus.Channel.Subscription
  alias Ringbus.Cluster.Directory

  @doc """
  Makes `node` a member of replicated channel `name` (`:add_member`) or
  takes it out (`:remove_member`), on this member: the replica layer makes
  the change, then every node is told the new members.
  """
  @spec membership(Ringbus.Channel.t(), term(), :add_member | :remove_member, node()) ::
          :ok | {:error, term()}
  def membership(%{replica: replica} = channel, name, change, node) do
    result =
      case change do
        :add_member -> Replica.add_member(channel, name, node)
        :remove_member -> Replica.remove_member(channel, name, node)
      end

    with {:ok, nodes} <- result do
      opts = [capacity: channel.capacity, overflow: channel.overflow]
      opts = [members: nodes] ++ opts ++ [max_bytes: channel.max_bytes]
      Directory.announce(name, opts, Map.get(replica, :stamp))
    end
  end

  @typedoc """
  A request from another node, as `Ringbus.Cluster.Router` sends it: a
  channel operation (`Ringbus.Op.t()`; a subscribe comes without its
  subscriber, which is the link here), or one of the directory's.
  """
  @type op ::
          Op.t()
          | {:subscribe, keyword()}
          | {:create, keyword()}
          | :delete

  @doc """
  Runs `op` on channel `name` for `link`, whose answers may carry at most
  `room` bytes (`Ringbus.Op.answer_bytes/1`): `{:reply, answer}`, or
  `{:directory, request}` when the directory must answer it, or
  `{:async, fun}` when the answer waits on other processes: the link runs
  `fun` in a process of its own, whose result is the answer.
  """
  @spec run(term(), op(), pid(), pos_integer()) ::
          {:reply, term()} | {:directory, term()} | {:async, (() -> term())}
  def run(name, {:create, opts}, _link, _room), do: {:directory, {:create, name, opts}}

  def run(name, :delete, _link, _room) do
    case Store.fetch(name) do
      {:ok, %{replica: replica} = channel} when replica != nil ->
        {:async, fn -> delete_replicated(channel, name) end}

      _ ->
        {:directory, {:delete, name}}
    end
  end

  # A membership change, asked of this member by a node that is not one.
  def run(name, {change, node}, _link, _room) when change in [:add_member, :remove_member] do
    case Store.fetch(name) do
      {:ok, %{replica: nil}} -> {:reply, {:error, :not_replicated}}
      {:ok, channel} -> {:async, fn -> membership(channel, name, change, node) end}
      error -> {:reply, error}
    end
  end

  # The link subscribes for its node's subscriber, to whom it forwards batches.
  def run(name, {:subscribe, opts}, link, room),
    do: run(name, {:subscribe, opts, link}, link, room)

  def run(name, op, _link, room) do
    case Store.fetch(name) do
      {:ok, channel} ->
        case Op.run(channel, op, room) do
          {:reply, answer} -> {:reply, answer}
          {:wait, fun} -> {:async, fn -> led(channel, op, still_there(fun)) end}
        end

      error ->
        {:reply, error}
    end
  rescue
    # The channel was deleted while the request ran.
    ArgumentError -> {:reply, {:error, :no_channel}}
  end

  # A replicated write's answer names the leader as this member knows it
  # after the write, so that the asking node's router sends the next one there.
  defp led(%{replica: replica} = channel, op, answer) when replica != nil do
    if Op.write?(op), do: {:led, Replica.leader(channel), answer}, else: answer
  end

  defp led(_memory, _op, answer), do: answer

  defp still_there(fun) do
    fun.()
  rescue
    ArgumentError -> {:error, :no_channel}
  end

  # Every member drops it, then every node forgets its entry.
  defp delete_replicated(%{replica: replica} = channel, name) do
    with :ok <- Replica.delete(channel, name),
         do: Directory.deleted(name, Map.get(replica, :stamp))
  end

  @doc """
  Ends a subscription homed here without waiting for it: it may have a
  backlog to get through first, and the link must not wait on it.
  """
  @spec unsubscribe(Subscription.t()) :: :ok
  def unsubscribe(sub) do
    spawn(fn -> Subscription.stop(sub) end)
    :ok
  end

  @doc "Returns credit to a subscription homed here."
  @spec ack(Subscription.t(), pos_integer()) :: :ok
  def ack(sub, count) do
    Subscription.ack(sub, count)
    :ok
  end
end
