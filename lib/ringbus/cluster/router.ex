defmodule Ringbus.Cluster.Router do
  @moduledoc false
  # The cluster side of `Ringbus`'s dispatch: `Ringbus` runs a channel of
  # this node itself and hands everything else here. A name resolves to its
  # home with one read of the directory table; the request then goes
  # through the link to that node (`Ringbus.Cluster.Links.call/4`), which
  # answers, or says `{:error, :node_down}` / `{:error, :node_busy}` (not
  # carried out) or `{:error, :timeout}` (unknown), within a bounded wait.
  #
  # A replicated channel has members instead of one home. A non-member
  # sends a write to its leader as a member last said (`Home` answers a
  # replicated write with the leader it then knows), else, as it sends a
  # read, to the first member (in the order the channel was created with,
  # its creator first) whose link is up. A member runs reads on its ring and
  # hands writes to its writer, which sends them to the Ra leader; so writes
  # wait the replica layer's default, not the link's.

  alias Ringbus.{Op, Store}
  alias Ringbus.Cluster.{Directory, Links}

  @doc "Runs `op` on channel `name` at its home, or `{:error, :no_channel}` when none has it."
  # `timeout` (ms) bounds the call instead of the link's timeouts when given.
  @spec request(term(), term(), pos_integer() | nil) :: term()
  def request(name, op, timeout \\ nil) do
    case Directory.remote_entry(name) do
      {:ok, home, opts} when home != node() ->
        case Keyword.fetch(opts, :members) do
          {:ok, members} -> replicated(name, members, op, timeout)
          :error -> Links.call(home, name, op, timeout)
        end

      _ ->
        {:error, :no_channel}
    end
  end

  # A replicated write commits on a majority's disks before it is answered.
  @write_timeout 5_000

  defp replicated(name, members, op, timeout) do
    if Op.write?(op) do
      case Links.call(writer(name, members), name, op, timeout || @write_timeout) do
        {:led, leader, answer} ->
          if leader, do: Directory.put_leader(name, leader)
          answer

        answer ->
          answer
      end
    else
      Links.call(member(members), name, op, timeout)
    end
  end

  # The leader as last known, while its link is up; else any member.
  defp writer(name, members) do
    leader = Directory.leader(name)

    if leader != nil and leader != node() and leader in members and
         leader in Links.nodes([:up]),
       do: leader,
       else: member(members)
  end

  # The first member whose link is up, else the first one (whose link then
  # answers node_busy or node_down). Never this node: a member has the ring.
  defp member(members) do
    up = Links.nodes([:up])
    others = members -- [node()]
    Enum.find(others, List.first(others, node()), &(&1 in up))
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
         {:ok, home, opts} when home != node() <- Directory.remote_entry(name) do
      home = if members = opts[:members], do: member(members), else: home
      Links.call(home, name, :delete, create_timeout(home))
    else
      {:ok, _channel_or_self} -> Directory.delete(name)
      :error -> {:error, :no_channel}
    end
  end

  @doc """
  Claims `name` for a replicated channel cluster-wide; see
  `Ringbus.Cluster.Directory.claim/1`.
  """
  @spec claim(term()) :: {:ok, term()} | {:error, :exists | :node_busy}
  def claim(name), do: Directory.claim(name)

  @doc "Settles a claim: announces the replicated channel or releases its name."
  @spec claimed(term(), keyword(), term(), term()) :: term()
  def claimed(name, opts, stamp, result), do: Directory.claimed(name, opts, stamp, result)

  @doc "Tells every node that replicated channel `name` is deleted."
  @spec deleted(term(), term()) :: :ok
  def deleted(name, stamp), do: Directory.deleted(name, stamp)

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
        case Directory.remote_entry(name) do
          {:ok, home, _opts} -> {:ok, home}
          :error -> {:error, :no_channel}
        end
    end
  end

  # A create waits for the home's two rounds, each bounded by the home's
  # create timeout, plus the way there and back.
  defp create_timeout(_home), do: 2 * Ringbus.Cluster.Config.from_env().create_timeout + 100
end
