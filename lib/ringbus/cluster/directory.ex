defmodule Ringbus.Cluster.Directory do
  @moduledoc false
  # Where every channel lives. Each node is the authority on the channels it
  # homes (its `Ringbus.Store`, with the options and stamp each was created
  # with, kept here); the table `:ringbus_cluster_directory` holds what the
  # other nodes said they home, `{name, home, opts, stamp, incarnation}`, and
  # callers read it directly to resolve a name. This process is the table's
  # owner and serialises every create and delete of this node and every
  # directory message from the others.
  #
  # Creating. A create runs on the channel's home, in two rounds through
  # the links:
  #
  #   1. Claim: the home stamps the claim `{os_time, node}` and asks every
  #      node whose link is up. A node votes `:exists` if it has the name,
  #      or knows a claim on it with a smaller stamp; otherwise it grants the
  #      claim (dropping its own, smaller-stamp-loses, if it had one). Any
  #      `:exists` makes the create `{:error, :exists}`; all grants make it
  #      happen. Of two claims made at once, the one with the smaller stamp
  #      is granted by every node, the other is refused by at least the
  #      winner: one winner, and the other gets `{:error, :exists}`.
  #   2. Announce: the home creates the channel in its store and sends it to
  #      every node, and answers `:ok` once the voters have it, so a name
  #      created anywhere resolves everywhere by the time `create` returns.
  #
  # Both rounds together wait `create_timeout` at most: a claim that times
  # out answers `{:error, :node_busy}` and is released, an announce that
  # times out answers `:ok` (the channel exists). Busy and down nodes do not
  # vote, so a silent node cannot stop creates elsewhere; two creates of one
  # name on both sides of a partition are resolved when it heals (below).
  #
  # Converging. When a link comes up, both sides send the channels they home,
  # with their incarnation (made when this process starts, i.e. when Ringbus
  # starts). The receiver replaces what it had for that node, and:
  #
  #   - a channel it had for that node, now missing, under the same
  #     incarnation was deleted meanwhile: dropped;
  #   - one missing under an older incarnation was lost in a restart: the
  #     receiver asks the node to recreate it, empty (channels live in
  #     memory), with its old options and stamp;
  #   - two homes for one name (created on both sides of a partition): the
  #     smaller stamp wins everywhere, and the loser's home deletes its copy,
  #     as `:global` resolves a name registered twice.
  #
  # A node that is down keeps its entries, so its channels answer
  # `{:error, :node_down}` rather than `{:error, :no_channel}`.

  use GenServer

  alias Ringbus.Store
  alias Ringbus.Cluster.Links

  @table :ringbus_cluster_directory

  @doc false
  def child_spec(config),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [config]}}

  @spec start_link(Ringbus.Cluster.Config.t()) :: GenServer.on_start()
  def start_link(config),
    do:
      GenServer.start_link(__MODULE__, config,
        name: __MODULE__,
        spawn_opt: [message_queue_data: :off_heap]
      )

  ## Callers

  @doc "The node that homes `name` if it is another one, by a read of the table."
  @spec remote_home(term()) :: {:ok, node()} | :error
  def remote_home(name) do
    {:ok, :ets.lookup_element(@table, name, 2)}
  rescue
    ArgumentError -> :error
  end

  @doc "Creates channel `name` here; see the moduledoc for how."
  @spec create(term(), keyword()) :: :ok | {:error, :exists | :node_busy}
  def create(name, opts), do: GenServer.call(__MODULE__, {:create, name, opts}, :infinity)

  @doc "Deletes channel `name`, homed here."
  @spec delete(term()) :: :ok | {:error, :no_channel}
  def delete(name), do: GenServer.call(__MODULE__, {:delete, name}, :infinity)

  @doc "The channels of other nodes, by home."
  @spec remote_channels() :: %{node() => non_neg_integer()}
  def remote_channels do
    @table
    |> :ets.select([{{:_, :"$1", :_, :_, :_}, [], [:"$1"]}])
    |> Enum.frequencies()
  rescue
    ArgumentError -> %{}
  end

  ## Links

  @doc "A create or delete another node asked for; the answer goes to `link`."
  @spec remote(pid(), reference(), term()) :: :ok
  def remote(link, ref, request), do: notify({:ringbus_remote, link, ref, request})

  @doc "A directory message from `node`."
  @spec peer(node(), term()) :: :ok
  def peer(node, message), do: notify({:ringbus_dir, node, message})

  @doc "The link to `node` is up (or has room again): send it our channels."
  @spec link_up(node()) :: :ok
  def link_up(node), do: notify({:ringbus_link_up, node})

  @doc "The link to `node` has stopped."
  @spec link_down(node()) :: :ok
  def link_down(node), do: notify({:ringbus_link_down, node})

  # A link outlives the directory for a moment when the cluster layer stops.
  defp notify(message) do
    if pid = Process.whereis(__MODULE__), do: send(pid, message)
    :ok
  end

  ## Process

  @impl true
  def init(config) do
    :ets.new(@table, [:named_table, :protected, :set, read_concurrency: true])

    state = %{
      incarnation: {System.os_time(:microsecond), :erlang.unique_integer()},
      create_timeout: config.create_timeout,
      # name => {opts, stamp}: the channels homed here.
      own: %{},
      # name => {:own, stamp, id} | {:granted, stamp, node}
      claims: %{},
      # id => the create in progress
      pending: %{}
    }

    {:ok, state}
  end

  @impl true
  def handle_call({:create, name, opts}, from, state),
    do: {:noreply, create(state, name, opts, {:call, from})}

  def handle_call({:delete, name}, _from, state) do
    {answer, state} = delete_own(state, name)
    {:reply, answer, state}
  end

  @impl true
  def handle_info({:ringbus_remote, link, ref, {:create, name, opts}}, state),
    do: {:noreply, create(state, name, opts, {:link, link, ref})}

  def handle_info({:ringbus_remote, link, ref, {:delete, name}}, state) do
    {answer, state} = delete_own(state, name)
    send(link, {:ringbus_reply, ref, answer})
    {:noreply, state}
  end

  def handle_info({:ringbus_dir, node, message}, state),
    do: {:noreply, message(state, node, message)}

  def handle_info({:ringbus_link_up, node}, state) do
    own = for {name, {opts, stamp}} <- state.own, do: {name, opts, stamp}
    Links.cast(node, {:dir, {:sync, state.incarnation, own}})
    {:noreply, state}
  end

  def handle_info({:ringbus_link_down, node}, state) do
    claims = Map.reject(state.claims, &match?({_, {:granted, _, ^node}}, &1))

    state =
      Enum.reduce(state.pending, %{state | claims: claims}, fn {id, _}, state ->
        heard(state, id, node)
      end)

    {:noreply, state}
  end

  def handle_info({:create_timeout, id}, state) do
    case state.pending do
      %{^id => %{round: :claim}} -> {:noreply, abort(state, id, {:error, :node_busy})}
      %{^id => %{round: :announce}} -> {:noreply, finish(state, id, :ok)}
      _ -> {:noreply, state}
    end
  end

  ## Creating and deleting here

  defp create(state, name, opts, reply_to) do
    if taken?(state, name) or Map.has_key?(state.claims, name) do
      reply(reply_to, {:error, :exists})
      state
    else
      create = %{
        id: make_ref(),
        name: name,
        opts: opts,
        stamp: {System.os_time(:microsecond), node()},
        reply_to: reply_to,
        timer: nil
      }

      case Links.nodes([:up]) do
        [] -> commit(state, create)
        voters -> claim(state, create, voters)
      end
    end
  end

  defp claim(state, create, voters) do
    for node <- voters,
        do: Links.cast(node, {:dir, {:claim, create.name, create.stamp, create.id}})

    timer = Process.send_after(self(), {:create_timeout, create.id}, state.create_timeout)

    create =
      Map.merge(create, %{
        round: :claim,
        voters: voters,
        waiting: MapSet.new(voters),
        timer: timer
      })

    %{
      state
      | claims: Map.put(state.claims, create.name, {:own, create.stamp, create.id}),
        pending: Map.put(state.pending, create.id, create)
    }
  end

  # Every voter granted the claim (`create` is no longer pending): create
  # the channel, then announce it.
  defp commit(state, create) do
    state = %{state | claims: Map.delete(state.claims, create.name)}

    case Store.create(create.name, create.opts) do
      :ok ->
        state = %{state | own: Map.put(state.own, create.name, {create.opts, create.stamp})}
        add = {:add, create.name, create.opts, create.stamp, state.incarnation, create.id}
        links = Links.states()
        for {node, _} <- links, do: Links.cast(node, {:dir, add})

        case for({node, :up} <- links, do: node) do
          [] ->
            done(state, create, :ok)

          up ->
            timer =
              create.timer ||
                Process.send_after(self(), {:create_timeout, create.id}, state.create_timeout)

            create = Map.merge(create, %{round: :announce, waiting: MapSet.new(up), timer: timer})
            %{state | pending: Map.put(state.pending, create.id, create)}
        end

      error ->
        done(state, create, error)
    end
  end

  # `node` voted for the claim, or has the announced channel, or is gone.
  defp heard(state, id, node) do
    case state.pending do
      %{^id => %{waiting: waiting} = create} ->
        create = %{create | waiting: MapSet.delete(waiting, node)}
        pending = Map.delete(state.pending, id)

        cond do
          MapSet.size(create.waiting) > 0 -> %{state | pending: Map.put(pending, id, create)}
          create.round == :claim -> commit(%{state | pending: pending}, create)
          create.round == :announce -> done(%{state | pending: pending}, create, :ok)
        end

      _ ->
        state
    end
  end

  defp abort(state, id, answer) do
    {create, pending} = Map.pop(state.pending, id)
    for node <- create.voters, do: Links.cast(node, {:dir, {:release, create.name, create.stamp}})

    claims =
      if match?({:own, _, ^id}, state.claims[create.name]),
        do: Map.delete(state.claims, create.name),
        else: state.claims

    done(%{state | claims: claims, pending: pending}, create, answer)
  end

  defp finish(state, id, answer) do
    {create, pending} = Map.pop(state.pending, id)
    done(%{state | pending: pending}, create, answer)
  end

  defp done(state, create, answer) do
    if create.timer, do: Process.cancel_timer(create.timer)
    reply(create.reply_to, answer)
    state
  end

  defp delete_own(state, name) do
    answer = Store.delete(name)

    case Map.pop(state.own, name) do
      {{_opts, stamp}, own} ->
        for {node, _} <- Links.states(), do: Links.cast(node, {:dir, {:del, name, stamp}})
        {answer, %{state | own: own}}

      {nil, _} ->
        {answer, state}
    end
  end

  defp taken?(state, name) do
    Map.has_key?(state.own, name) or :ets.member(@table, name) or
      match?({:ok, _}, Store.fetch(name))
  end

  defp reply({:call, from}, answer), do: GenServer.reply(from, answer)
  defp reply({:link, link, ref}, answer), do: send(link, {:ringbus_reply, ref, answer})

  ## Messages from other nodes

  defp message(state, node, {:claim, name, stamp, id}) do
    {vote, state} = vote(state, node, name, stamp)
    Links.cast(node, {:dir, {:vote, id, vote}})
    state
  end

  defp message(state, node, {:vote, id, :ok}) do
    case state.pending do
      %{^id => %{round: :claim}} -> heard(state, id, node)
      _ -> state
    end
  end

  defp message(state, _node, {:vote, id, :exists}) do
    case state.pending do
      %{^id => %{round: :claim}} -> abort(state, id, {:error, :exists})
      _ -> state
    end
  end

  defp message(state, node, {:release, name, stamp}) do
    case state.claims do
      %{^name => {:granted, ^stamp, ^node}} -> %{state | claims: Map.delete(state.claims, name)}
      _ -> state
    end
  end

  defp message(state, node, {:add, name, opts, stamp, incarnation, id}) do
    state = add(state, node, name, opts, stamp, incarnation)
    if id, do: Links.cast(node, {:dir, {:added, id}})
    state
  end

  defp message(state, node, {:added, id}) do
    case state.pending do
      %{^id => %{round: :announce}} -> heard(state, id, node)
      _ -> state
    end
  end

  defp message(state, node, {:del, name, stamp}) do
    :ets.match_delete(@table, {name, node, :_, stamp, :_})
    state
  end

  defp message(state, node, {:sync, incarnation, entries}) do
    names = MapSet.new(entries, &elem(&1, 0))

    lost =
      for {name, ^node, opts, stamp, had} <- :ets.match_object(@table, {:_, node, :_, :_, :_}),
          not MapSet.member?(names, name),
          reduce: [] do
        lost ->
          if had == incarnation do
            # Deleted while we were apart.
            :ets.delete(@table, name)
            lost
          else
            [{name, opts, stamp} | lost]
          end
      end

    state =
      Enum.reduce(entries, state, fn {name, opts, stamp}, state ->
        add(state, node, name, opts, stamp, incarnation)
      end)

    if lost != [], do: Links.cast(node, {:dir, {:recreate, lost}})
    state
  end

  # Channels this node homed before it restarted: back, empty.
  defp message(state, _node, {:recreate, entries}) do
    Enum.reduce(entries, state, fn {name, opts, stamp}, state ->
      if taken?(state, name) or Map.has_key?(state.claims, name),
        do: state,
        else: recreate(state, name, opts, stamp)
    end)
  end

  defp message(state, _node, _unknown), do: state

  defp recreate(state, name, opts, stamp) do
    case Store.create(name, opts) do
      :ok ->
        add = {:add, name, opts, stamp, state.incarnation, nil}
        for {node, _} <- Links.states(), do: Links.cast(node, {:dir, add})
        %{state | own: Map.put(state.own, name, {opts, stamp})}

      {:error, :exists} ->
        state
    end
  end

  defp vote(state, node, name, stamp) do
    cond do
      taken?(state, name) ->
        {:exists, state}

      true ->
        case state.claims[name] do
          {_, better, _} when better < stamp ->
            {:exists, state}

          {:own, _, id} ->
            # Ours is younger: it loses.
            state = abort(state, id, {:error, :exists})
            {:ok, grant(state, name, stamp, node)}

          _none_or_younger ->
            {:ok, grant(state, name, stamp, node)}
        end
    end
  end

  defp grant(state, name, stamp, node),
    do: %{state | claims: Map.put(state.claims, name, {:granted, stamp, node})}

  # A channel `node` homes. Of two homes for one name, the smaller stamp wins.
  defp add(state, node, name, opts, stamp, incarnation) do
    state = drop_claim(state, name)

    cond do
      Map.has_key?(state.own, name) ->
        {_opts, own_stamp} = state.own[name]

        if stamp < own_stamp do
          {_answer, state} = delete_own(state, name)
          :ets.insert(@table, {name, node, opts, stamp, incarnation})
          state
        else
          state
        end

      true ->
        case :ets.lookup(@table, name) do
          [{_, other, _, other_stamp, _}] when other != node and other_stamp < stamp ->
            state

          _ ->
            :ets.insert(@table, {name, node, opts, stamp, incarnation})
            state
        end
    end
  end

  # A channel was created under a claim: the grant is spent, and a claim of
  # ours on the same name has lost.
  defp drop_claim(state, name) do
    case state.claims[name] do
      {:own, _, id} -> abort(state, id, {:error, :exists})
      {:granted, _, _} -> %{state | claims: Map.delete(state.claims, name)}
      nil -> state
    end
  end
end
