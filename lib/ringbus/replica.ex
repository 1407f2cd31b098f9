defmodule Ringbus.Replica do
  @moduledoc false
  # Replicated channels for `Ringbus`: what its public functions do when a
  # channel's handle has `replica` set. Writes (push, push_many, pull) go
  # to the channel's writer on this node and through Ra; reads stay on the
  # ring, in the caller. See lib/ringbus/replica/README.md.

  alias Ringbus.{Channel, Options}
  alias Ringbus.Channel.Ring
  alias Ringbus.Replica.{Catalogue, Reporter}

  @default_timeout 5_000
  # A create or delete waits on each member this long at most.
  @manage_timeout 15_000

  @doc "What a write waits for its commit when its caller names no timeout (ms)."
  @spec default_timeout() :: pos_integer()
  def default_timeout, do: @default_timeout

  @doc """
  Creates replicated channel `name` on this node and the first
  `replicas - 1` nodes of `Node.list/0`, and waits for its leader.
  `stamp` is the cluster's claim on the name, kept in the handle so that
  every member announces the channel alike. Returns the members' nodes;
  `{:error, :timeout, nodes}` when the members exist and elected no leader
  in time.
  """
  @spec create(term(), Channel.options(), pos_integer(), term()) ::
          {:ok, [node()]}
          | {:error, :exists | :node_down | :node_busy}
          | {:error, :timeout, [node()]}
  def create(name, opts, replicas, stamp) do
    nodes = Enum.take([node() | Node.list()], replicas)

    if length(nodes) < replicas do
      {:error, :node_down}
    else
      replica = name |> handle(nodes) |> Map.put(:stamp, stamp)
      # Drawn once, kept in every member's catalogue: a restart keeps it.
      opts = Keyword.put(opts, :incarnation, Ring.new_incarnation())
      create_members(name, opts, replica, nodes, [])
    end
  end

  defp create_members(name, opts, replica, [node | rest], done) do
    member = %{replica | server: {replica.cluster, node}}

    case Catalogue.create(node, name, opts, member, @manage_timeout) do
      :ok ->
        create_members(name, opts, replica, rest, [node | done])

      error ->
        for n <- done, do: Catalogue.delete(n, name, @manage_timeout)
        error
    end
  end

  defp create_members(_name, _opts, replica, [], _done) do
    :ok = :ra.trigger_election(replica.server)
    nodes = for {_, n} <- replica.members, do: n

    case :ra.members(replica.server, @manage_timeout) do
      {:ok, _members, _leader} -> {:ok, nodes}
      _ -> {:error, :timeout, nodes}
    end
  end

  # Every member derives the same names from the channel's: Ra's server
  # names are atoms, one per replicated channel.
  defp handle(name, nodes) do
    hash =
      :crypto.hash(:sha256, :erlang.term_to_binary(name))
      |> Base.url_encode64(padding: false)
      |> binary_part(0, 22)

    server = String.to_atom("ringbus_" <> hash)

    %{
      cluster: server,
      server: {server, node()},
      writer: String.to_atom("ringbus_w_" <> hash),
      members: for(n <- nodes, do: {server, n})
    }
  end

  @doc "Deletes replicated channel `name` on every member."
  @spec delete(Channel.t(), term()) :: :ok | {:error, :node_down | :node_busy}
  def delete(%Channel{replica: replica}, name) do
    results =
      for {_server, node} <- replica.members,
          do: Catalogue.delete(node, name, @manage_timeout)

    case Enum.find(results, &(&1 not in [:ok, {:error, :no_channel}])) do
      nil -> :ok
      error -> error
    end
  end

  @doc """
  Makes `node` a member of replicated channel `name` (whose handle this
  node holds): its ring, Ra server and writer there, then Ra's membership
  change (`:ra.add_member/3`), then every member's catalogue. The new
  member catches up from the leader by snapshot and log. Returns the
  members' nodes.
  """
  @spec add_member(Channel.t(), term(), node()) ::
          {:ok, [node()]}
          | {:error, :already_member | :node_down | :node_busy | :timeout | term()}
  def add_member(%Channel{replica: replica} = channel, name, node) do
    id = {replica.cluster, node}

    cond do
      id in replica.members ->
        {:error, :already_member}

      node not in Node.list() ->
        {:error, :node_down}

      true ->
        members = replica.members ++ [id]
        member = %{replica | members: members, server: id}

        with :ok <- Catalogue.create(node, name, opts(channel), member, @manage_timeout),
             :ok <- change(:add_member, replica.server, id, fn -> undo_add(node, name) end) do
          put_members(name, members)
        end
    end
  end

  @doc """
  Takes `node`'s member out of replicated channel `name`: Ra's membership
  change (`:ra.remove_member/3`), then its writer, server, data and ring on
  `node`, then the other members' catalogues. Returns the members' nodes.
  """
  @spec remove_member(Channel.t(), term(), node()) ::
          {:ok, [node()]}
          | {:error, :not_member | :last_member | :node_down | :node_busy | :timeout | term()}
  def remove_member(%Channel{replica: replica}, name, node) do
    id = {replica.cluster, node}

    cond do
      id not in replica.members ->
        {:error, :not_member}

      replica.members == [id] ->
        {:error, :last_member}

      node != node() and node not in Node.list() ->
        {:error, :node_down}

      true ->
        # Asked of a member that stays, which knows the leader after.
        [stays | _] = replica.members -- [id]

        with :ok <- change(:remove_member, stays, id, fn -> :ok end) do
          _ = Catalogue.delete(node, name, @manage_timeout)
          put_members(name, replica.members -- [id])
        end
    end
  end

  # One membership change through the leader. A timeout leaves it unknown:
  # it may commit later, so nothing is undone then.
  defp change(fun, server, id, undo) do
    case apply(:ra, fun, [server, id, @manage_timeout]) do
      {:ok, _index, _leader} ->
        :ok

      {:timeout, _leader} ->
        {:error, :timeout}

      {:error, reason} ->
        undo.()
        {:error, reason}
    end
  end

  defp undo_add(node, name) do
    _ = Catalogue.delete(node, name, @manage_timeout)
    :ok
  end

  # Every member records the membership, so that its restarts keep it.
  defp put_members(name, members) do
    results =
      for {_, node} <- members, do: Catalogue.put_members(node, name, members, @manage_timeout)

    case Enum.find(results, &(&1 != :ok)) do
      nil -> {:ok, for({_, node} <- members, do: node)}
      error -> error
    end
  end

  # What a member's catalogue keeps, read back from the handle.
  defp opts(channel) do
    [
      capacity: channel.capacity,
      overflow: channel.overflow,
      max_bytes: channel.max_bytes,
      max_age: channel.max_age,
      incarnation: channel.incarnation
    ]
  end

  @doc """
  Pushes `payloads` as one batch through Ra. Options: `:producer`
  (`{id, n}`, the dedup tag) and `:timeout` (ms, default 5000).
  """
  @spec push(Channel.t(), [binary()], non_neg_integer(), keyword()) ::
          {:ok, non_neg_integer()}
          | {:error, :full | :too_large | :stale_tag | :node_busy | :timeout}
  # The options of a plain push (`Ringbus.push/2`): nothing to validate.
  def push(channel, payloads, bytes, []) when is_list(payloads),
    do: call(channel, {:push, nil, payloads, bytes}, @default_timeout)

  def push(channel, payloads, bytes, timeout: timeout)
      when is_list(payloads) and is_integer(timeout) and timeout > 0,
      do: call(channel, {:push, nil, payloads, bytes}, timeout)

  def push(channel, payloads, bytes, opts) do
    opts = Options.validate!(opts, [producer: nil, timeout: @default_timeout], "push")

    Options.check!(
      :producer,
      opts[:producer],
      &(&1 == nil or match?({_, n} when is_integer(n), &1)),
      "a tuple {producer_id, integer}"
    )

    Options.check!(:timeout, opts[:timeout], &Options.positive?/1, "a positive integer")
    # The log and the machine take a list; a packed batch is listed here.
    payloads = if is_list(payloads), do: payloads, else: Enum.to_list(payloads)
    call(channel, {:push, opts[:producer], payloads, bytes}, opts[:timeout])
  end

  @doc """
  Pushes `payload` under the Redis stream ID `given` (`t:Ringbus.Channel.Ids.given/0`)
  through Ra: the machine decides its ID (machine version 6; under an
  older version in effect, refused `:badarg`). Answers `{:ok, seq, id}`.
  """
  @spec push_id(Channel.t(), binary(), Ringbus.Channel.Ids.given(), pos_integer() | nil) ::
          {:ok, non_neg_integer(), Ringbus.Channel.Ids.id()}
          | {:error, atom()}
  def push_id(channel, payload, given, timeout),
    do:
      call(
        channel,
        {:push_id, given, payload, byte_size(payload)},
        timeout || @default_timeout
      )

  @doc """
  Sets the channel's last Redis stream ID (XSETID) through Ra: `:ok`, or
  `{:error, :below_top}` when below the newest message's.
  """
  @spec set_id(Channel.t(), Ringbus.Channel.Ids.id(), pos_integer() | nil) ::
          :ok | {:error, atom()}
  def set_id(channel, id, timeout), do: call(channel, {:set_id, id}, timeout || @default_timeout)

  @doc "Takes the oldest message out, through Ra."
  @spec pull(Channel.t()) ::
          {:ok, non_neg_integer(), binary()} | :empty | {:error, :node_busy | :timeout}
  def pull(channel), do: call(channel, :pull, @default_timeout)

  @doc """
  Removes the oldest messages `trim` names (`Ringbus.Channel.Trim`), as
  one command through Ra however many it removes; answers how many.
  """
  @spec trim(Channel.t(), Ringbus.Channel.Trim.t()) ::
          {:ok, non_neg_integer()} | {:error, :node_busy | :timeout | :no_channel}
  def trim(channel, trim), do: call(channel, {:trim, trim}, @default_timeout)

  @doc """
  Deletes the messages held under `seqs` (`Ringbus.Channel.Deletes`), as
  one command through Ra; answers how many it deleted.
  """
  @spec delete_messages(Channel.t(), [non_neg_integer()]) ::
          {:ok, non_neg_integer()} | {:error, :node_busy | :timeout | :no_channel | :badarg}
  def delete_messages(channel, seqs) when is_list(seqs),
    do: call(channel, {:delete, seqs}, @default_timeout)

  @doc """
  Runs a consumer group request (`Ringbus.Group.request()`) through Ra:
  every member's machine applies it to its own groups, and this answers
  what it answered (`room` bounds its payloads).
  """
  @spec group(Channel.t(), term(), pos_integer() | :infinity, pos_integer() | nil) :: term()
  def group(channel, request, room, timeout),
    do: call(channel, {:group, room, request}, timeout || @default_timeout)

  @doc """
  Many batches (the server's), each through Ra on its own, in one
  command; one answer per batch. Once one answers `:node_busy` (no leader
  took it in time), the rest answer it too, untried.
  """
  @spec push_batches(Channel.t(), [{[binary()], non_neg_integer(), non_neg_integer()}]) ::
          {:ok, [term()]} | {:error, :timeout}
  def push_batches(channel, batches) do
    tasks = for {payloads, _count, bytes} <- batches, do: {payloads, bytes}
    # One at a time keeps each batch whole and the batches in order.
    results =
      Enum.reduce_while(tasks, {[], tasks}, fn {payloads, bytes}, {acc, [_ | left]} ->
        case call(channel, {:push, nil, payloads, bytes}, @default_timeout) do
          {:error, :timeout} = timeout ->
            {:halt, timeout}

          # Not done, so the rest are not tried: each would wait as this one did.
          {:error, :node_busy} = busy ->
            {:halt, {Enum.map(left, fn _ -> busy end) ++ [busy | acc], []}}

          result ->
            {:cont, {[result | acc], left}}
        end
      end)

    case results do
      {:error, _} = error -> error
      {list, _left} -> {:ok, Enum.reverse(list)}
    end
  end

  defp call(%Channel{replica: %{writer: writer}}, request, timeout) do
    case Process.whereis(writer) do
      nil ->
        # Nothing was sent: the channel is being deleted, or restarting.
        {:error, :no_channel}

      pid ->
        ref = :erlang.monitor(:process, pid, [{:alias, :reply_demonitor}])
        send(pid, {:ringbus_replica, ref, request, System.monotonic_time(:millisecond) + timeout})

        receive do
          {^ref, answer} -> answer
          {:DOWN, ^ref, _, _, _} -> {:error, :timeout}
        after
          timeout ->
            Process.demonitor(ref, [:flush])

            receive do
              {^ref, answer} -> answer
            after
              0 -> {:error, :timeout}
            end
        end
    end
  end

  @doc """
  The ring's figures and the member's: `replicas`, `members` (nodes),
  `role`, `term`, `commit_index`, `applied_index`, `leader` (a node, or
  nil). Ra's figures are read from its tables, as of its last tick;
  `replication` is each member's `Ringbus.Replica.Member` figures, as the
  reporters last told this node (`Ringbus.Replica.Reporter`).
  """
  @spec info(Channel.t()) :: map()
  def info(%Channel{replica: replica} = channel) do
    {local, _node} = replica.server
    role = lookup(:ra_state, local, 2, :stopped)

    {term, applied, commit} =
      case :ets.lookup(:ra_metrics, local) do
        [{_, term, _snapshot, applied, commit, _written, _latency}] -> {term, applied, commit}
        _ -> {0, 0, 0}
      end

    leader = leader(channel)

    channel
    |> Ring.info()
    |> Map.merge(%{
      replicas: length(replica.members),
      members: for({_, n} <- replica.members, do: n),
      role: role,
      term: term,
      commit_index: commit,
      applied_index: applied,
      leader: leader,
      replication: Reporter.members(replica)
    })
  end

  @doc "The node of the channel's leader as this member's Ra knows it, or nil."
  @spec leader(Channel.t()) :: node() | nil
  def leader(%Channel{replica: replica}) do
    case :ra_leaderboard.lookup_leader(replica.cluster) do
      {_, node} -> node
      _ -> nil
    end
  end

  defp lookup(table, key, pos, default) do
    :ets.lookup_element(table, key, pos)
  rescue
    ArgumentError -> default
  end
end
