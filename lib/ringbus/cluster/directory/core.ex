defmodule Ringbus.Cluster.Directory.Core do
  @moduledoc false
  # The decisions of `Ringbus.Cluster.Directory`, as pure functions in Ra's
  # style (`ra_server.erl`): `handle/3` takes the state, one event and what
  # the process read of the world for it, and returns the new state and the
  # effects the process carries out, in order. Nothing here sends, stores,
  # reads ETS or starts a timer.
  #
  # Kept whole: one state machine whose events (claims, syncs, relays,
  # replicated members, forgets) all apply the same stamp and claim rules to
  # the same state; the tests drive it event by event as one.
  #
  # Each node is the authority on the channels it homes (`own`: name =>
  # {opts, stamp}, mirrored by its `Ringbus.Store`); `remote` holds what the
  # other nodes said they home, name => {home, opts, stamp, incarnation},
  # and the process mirrors it into the table callers read
  # (`{:put_entry, entry}`, `{:drop_entry, name}`).
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
  # A create of a name that is claimed (by a create of ours in its vote, a
  # replicated create's held claim, or a claim granted to another node) is
  # neither refused nor run: it waits until the claim is settled, then runs
  # (answering `{:error, :exists}` if the channel was made), so `:exists`
  # only ever means a channel exists. It waits `create_timeout` at most,
  # then answers `{:error, :node_busy}`: not created.
  #
  # Both rounds together wait `create_timeout` at most: a claim that times
  # out answers `{:error, :node_busy}` and is released, an announce that
  # times out answers `:ok` (the channel exists). Busy and down nodes do not
  # vote, so a silent node cannot stop creates elsewhere; two creates of one
  # name on both sides of a partition are resolved when it heals (below).
  #
  # Converging. When a link comes up, both sides send the channels they home,
  # with their incarnation (made when the process starts, i.e. when Ringbus
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
  # The winner may be down, and unable to tell the loser: so a node that
  # keeps another home for a name a node says it homes tells that node the
  # home it keeps (`:homes`), and a new link also carries what the sender
  # knows of the nodes it has no link to, so that a node that restarted
  # while a home was down learns its channels (they answer `node_down`, not
  # `no_channel`). Such second-hand entries are taken only for homes the
  # receiver has no link to (a linked home's own word wins), not over an
  # entry of the same home, and not for a node forgotten here (below)
  # until it syncs again.
  #
  # Replicated channels. A replicated channel has members rather than one
  # home: its creator claims the name as above (`{:claim, ...}`), holds
  # the claim (`{:held, stamp, id}`, which refuses every other claim) while
  # the replica layer makes the members, then announces it as its own
  # with `members:` in its options (`{:claimed, ...}`), or releases the
  # claim; the process watches the claim's caller, and gives the claim up
  # (`{:abandon, name, stamp}`) if it dies first. Every member's store holds its ring, so every member lists it
  # in its syncs (`world.replicated`) under the creator's stamp: equal
  # stamps never conflict, an entry points at the member that spoke last,
  # and callers pick among `members:` anyway. Such an entry missing from a
  # sync is never recreated (its log, not the directory, brings it back);
  # its delete is announced by whichever member ran it (`{:deleted, ...}`).
  #
  # A node that is down keeps its entries, so its channels answer
  # `{:error, :node_down}` rather than `{:error, :no_channel}`, until an
  # operator forgets it (`{:forget, node, connected?, reply_to}`): its
  # entries and the claims it was granted are dropped here, so its names can
  # be created again. Refused while the node is connected or has a link up.
  #
  # Directory messages between nodes (each sent as `{:send, node, message}`):
  #
  #   {:claim, name, stamp, id}      may `name` be created under `stamp`?
  #   {:vote, id, :ok | :exists}     the answer
  #   {:release, name, stamp}        the claim is given up
  #   {:add, name, opts, stamp, incarnation, id | nil}   a channel of the
  #                                  sender; with an id, answered {:added, id}
  #   {:del, name, stamp}            the sender deleted its channel
  #   {:sync, incarnation, [{name, opts, stamp}]}   every channel of the sender
  #   {:recreate, [{name, opts, stamp}]}   channels the receiver homed before
  #                                  it restarted
  #   {:homes, [{name, home, opts, stamp, incarnation}]}   channels of other
  #                                  nodes, as the sender knows them

  @typedoc "Where an answer goes; the process knows its shape, the core does not."
  @type reply_to :: term()

  @typedoc "What `{:create_channel, ...}` is for, handed back with its result."
  @type purpose :: {:commit, map()} | {:recreate, stamp()}

  @type stamp :: {integer(), node()}
  @type link_state :: :up | :busy | :down

  @typedoc """
  What the process read for one event: the nodes with a link and its state,
  and whether the local store holds a name (the one fact the core does not
  keep itself, read only when needed).
  """
  @type world :: %{
          required(:links) => [{node(), link_state()}],
          required(:stored?) => (term() -> boolean()),
          # The replicated channels of the local store: [{name, opts, stamp}].
          optional(:replicated) => (() -> [{term(), keyword(), stamp()}])
        }

  @type event ::
          {:create, name :: term(), opts :: keyword(), reply_to(), id :: reference(), stamp()}
          | {:delete, name :: term(), reply_to(), answer :: term()}
          | {:peer, node(), message :: term()}
          | {:link_up, node()}
          | {:link_down, node()}
          | {:timeout, id :: reference() | {:queued, reference()}}
          | {:forget, node(), connected? :: boolean(), reply_to()}
          | {:created, name :: term(), opts :: keyword(), purpose(), result :: term()}
          | {:claim, name :: term(), reply_to(), id :: reference(), stamp()}
          | {:claimed, name :: term(), opts :: keyword(), stamp(), reply_to(), result :: term()}
          | {:deleted, name :: term(), stamp(), reply_to()}
          | {:announce, name :: term(), opts :: keyword(), stamp(), reply_to()}
          | {:abandon, name :: term(), stamp()}

  @type effect ::
          {:send, node(), message :: term()}
          | {:reply, reply_to(), answer :: term()}
          | {:start_timer, id :: reference() | {:queued, reference()}, ms :: pos_integer()}
          | {:cancel_timer, id :: reference() | {:queued, reference()}}
          | {:put_entry, {term(), node(), keyword(), stamp(), term()}}
          | {:drop_entry, name :: term()}
          | {:create_channel, name :: term(), opts :: keyword(), purpose()}
          | {:delete_channel, name :: term()}

  @type t :: %{
          incarnation: term(),
          create_timeout: pos_integer(),
          own: %{term() => {keyword(), stamp()}},
          claims: %{
            term() =>
              {:own, stamp(), reference()}
              | {:held, stamp(), reference()}
              | {:granted, stamp(), node()}
          },
          pending: %{reference() => map()},
          queued: %{term() => [event()]},
          remote: %{term() => {node(), keyword(), stamp(), term()}},
          forgotten: MapSet.t(node()),
          world: world() | nil,
          effects: [effect()]
        }

  @doc "A directory with no channels, claims or creates."
  @spec new(term(), pos_integer()) :: t()
  def new(incarnation, create_timeout) do
    %{
      incarnation: incarnation,
      create_timeout: create_timeout,
      own: %{},
      claims: %{},
      # id => the create in progress
      pending: %{},
      # name => the creates (events) waiting, oldest first, while it is claimed
      queued: %{},
      remote: %{},
      # Nodes forgotten since they last synced: what others relay of them is ignored.
      forgotten: MapSet.new(),
      # Only while an event is handled:
      world: nil,
      effects: []
    }
  end

  @doc """
  Handles one event. The process must carry out the effects in order; the
  result of `{:create_channel, name, opts, purpose}` comes back at once as
  the event `{:created, name, opts, purpose, result}`, before the rest.
  A `:delete` event comes after the store deleted the channel, with the
  store's answer.
  """
  @spec handle(t(), event(), world()) :: {t(), [effect()]}
  def handle(state, event, world) do
    state = %{state | world: world, effects: []} |> event(event) |> drain()
    {%{state | world: nil, effects: []}, :lists.reverse(state.effects)}
  end

  ## Events

  # A replicated channel's name: claimed as a create's, then held for the
  # caller, who makes the members and comes back with `:claimed`.
  defp event(state, {:claim, name, reply_to, id, stamp}),
    do: event(state, {:create, name, :hold, reply_to, id, stamp})

  defp event(state, {:claimed, name, opts, stamp, reply_to, result}) do
    case state.claims do
      %{^name => {:held, ^stamp, id}} ->
        state = %{state | claims: Map.delete(state.claims, name)}

        create = %{
          id: id,
          name: name,
          opts: opts,
          stamp: stamp,
          reply_to: reply_to,
          timer?: false
        }

        if result == :ok do
          event(state, {:created, name, opts, {:commit, create}, :ok})
        else
          state
          |> send_all({:release, name, stamp})
          |> emit({:reply, reply_to, result})
        end

      _lost ->
        emit(state, {:reply, reply_to, {:error, :exists}})
    end
  end

  defp event(state, {:deleted, name, stamp, reply_to}) do
    {_, own} = Map.pop(state.own, name)

    %{state | own: own}
    |> send_all({:del, name, stamp})
    |> emit({:reply, reply_to, :ok})
  end

  # A replicated channel's members changed: every node learns the new ones.
  defp event(state, {:announce, name, opts, stamp, reply_to}) do
    own =
      if is_map_key(state.own, name), do: Map.put(state.own, name, {opts, stamp}), else: state.own

    state =
      case state.remote do
        %{^name => {home, _, ^stamp, incarnation}} ->
          put_entry(%{state | own: own}, name, home, opts, stamp, incarnation)

        _ ->
          %{state | own: own}
      end

    state
    |> send_all({:add, name, opts, stamp, state.incarnation, nil})
    |> emit({:reply, reply_to, :ok})
  end

  defp event(state, {:create, name, opts, reply_to, id, stamp} = create) do
    cond do
      taken?(state, name) ->
        emit(state, {:reply, reply_to, {:error, :exists}})

      # Another create of the name is under way: this one waits for it.
      Map.has_key?(state.claims, name) ->
        queue(state, name, create)

      true ->
        start(state, opts, reply_to, id, name, stamp)
    end
  end

  defp event(state, {:delete, name, reply_to, answer}) do
    state |> forget_own(name) |> emit({:reply, reply_to, answer})
  end

  # The caller of a claim is gone: the claim is given up wherever it is.
  defp event(state, {:abandon, name, stamp}) do
    state = %{state | queued: unqueue(state.queued, name, &(elem(&1, 5) == stamp))}

    state =
      case Enum.find(state.pending, fn {_, c} -> c.name == name and c.stamp == stamp end) do
        {id, %{round: :claim}} -> abort(state, id, {:error, :node_down})
        _ -> state
      end

    case state.claims do
      %{^name => {:held, ^stamp, _}} ->
        send_all(%{state | claims: Map.delete(state.claims, name)}, {:release, name, stamp})

      _ ->
        state
    end
  end

  defp event(state, {:created, name, opts, {:commit, create}, result}) do
    case result do
      :ok ->
        state = %{state | own: Map.put(state.own, name, {opts, create.stamp})}
        state = send_all(state, {:add, name, opts, create.stamp, state.incarnation, create.id})

        case for({node, :up} <- state.world.links, do: node) do
          [] ->
            done(state, create, :ok)

          up ->
            state =
              if create.timer?,
                do: state,
                else: emit(state, {:start_timer, create.id, state.create_timeout})

            create = Map.merge(create, %{round: :announce, waiting: MapSet.new(up), timer?: true})
            %{state | pending: Map.put(state.pending, create.id, create)}
        end

      error ->
        done(state, create, error)
    end
  end

  defp event(state, {:created, name, opts, {:recreate, stamp}, :ok}) do
    state = send_all(state, {:add, name, opts, stamp, state.incarnation, nil})
    %{state | own: Map.put(state.own, name, {opts, stamp})}
  end

  defp event(state, {:created, _name, _opts, {:recreate, _stamp}, {:error, :exists}}), do: state

  defp event(state, {:peer, node, message}), do: message(state, node, message)

  defp event(state, {:link_up, node}) do
    own = for {name, {opts, stamp}} <- state.own, do: {name, opts, stamp}
    replicated = for {name, _, _} = r <- replicated(state), not is_map_key(state.own, name), do: r
    state = emit(state, {:send, node, {:sync, state.incarnation, own ++ replicated}})

    # What we know of nodes we have no link to: a node that restarted
    # meanwhile learns their channels, which answer node_down, not no_channel.
    case for(
           {name, {home, _, _, _} = entry} <- state.remote,
           home != node,
           not linked?(state, home),
           do: homed(name, entry)
         ) do
      [] -> state
      homes -> emit(state, {:send, node, {:homes, homes}})
    end
  end

  defp event(state, {:link_down, node}) do
    claims = Map.reject(state.claims, &match?({_, {:granted, _, ^node}}, &1))

    Enum.reduce(state.pending, %{state | claims: claims}, fn {id, _}, state ->
      heard(state, id, node)
    end)
  end

  defp event(state, {:forget, node, connected?, reply_to}) do
    linked? = Enum.any?(state.world.links, fn {n, link} -> n == node and link != :down end)

    if connected? or linked? or node == node() do
      emit(state, {:reply, reply_to, {:error, :node_up}})
    else
      names = for {name, {^node, _, _, _}} <- state.remote, do: name
      state = Enum.reduce(names, state, &emit(&2, {:drop_entry, &1}))
      claims = Map.reject(state.claims, &match?({_, {:granted, _, ^node}}, &1))

      %{
        state
        | remote: Map.drop(state.remote, names),
          claims: claims,
          forgotten: MapSet.put(state.forgotten, node)
      }
      |> emit({:reply, reply_to, {:ok, length(names)}})
    end
  end

  defp event(state, {:timeout, {:queued, id}}) do
    Enum.reduce(state.queued, state, fn {name, creates}, state ->
      case List.keyfind(creates, id, 4) do
        {:create, _, _, reply_to, ^id, _} ->
          queued = unqueue(state.queued, name, &(elem(&1, 4) == id))
          emit(%{state | queued: queued}, {:reply, reply_to, {:error, :node_busy}})

        nil ->
          state
      end
    end)
  end

  defp event(state, {:timeout, id}) do
    case state.pending do
      %{^id => %{round: :claim}} -> abort(state, id, {:error, :node_busy})
      %{^id => %{round: :announce}} -> finish(state, id, :ok)
      _ -> state
    end
  end

  ## Creating and deleting here

  defp start(state, opts, reply_to, id, name, stamp) do
    create = %{id: id, name: name, opts: opts, stamp: stamp, reply_to: reply_to, timer?: false}

    case for({node, :up} <- state.world.links, do: node) do
      [] -> commit(state, create)
      voters -> claim(state, create, voters)
    end
  end

  # Creates of one name wait, in order, while another create of it (a claim
  # of ours, held or in its vote, or one granted to another node) is under
  # way, each at most `create_timeout`, then `{:error, :node_busy}`: so none
  # is answered `:exists` for a channel that may never be made.
  defp queue(state, name, {:create, _name, _opts, _reply_to, id, _stamp} = create) do
    queued = Map.update(state.queued, name, [create], &(&1 ++ [create]))
    emit(%{state | queued: queued}, {:start_timer, {:queued, id}, state.create_timeout})
  end

  defp unqueue(queued, name, drop?) do
    case Map.fetch(queued, name) do
      {:ok, creates} ->
        case Enum.reject(creates, drop?) do
          [] -> Map.delete(queued, name)
          creates -> Map.put(queued, name, creates)
        end

      :error ->
        queued
    end
  end

  # After every event: the creates waiting on a name no longer claimed run,
  # oldest first, until one claims it again or goes to the store (whose
  # answer, an event of its own, drains the rest).
  defp drain(state) do
    Enum.reduce(Map.keys(state.queued), state, &drain(&2, &1))
  end

  defp drain(state, name) do
    case state.queued do
      %{^name => [{:create, _, _, _, id, _} = create | rest]} ->
        if Map.has_key?(state.claims, name) or creating?(state, name) do
          state
        else
          queued =
            if rest == [],
              do: Map.delete(state.queued, name),
              else: %{state.queued | name => rest}

          %{state | queued: queued}
          |> emit({:cancel_timer, {:queued, id}})
          |> event(create)
          |> drain(name)
        end

      _ ->
        state
    end
  end

  defp creating?(state, name),
    do: Enum.any?(state.effects, &match?({:create_channel, ^name, _, _}, &1))

  defp claim(state, create, voters) do
    state =
      Enum.reduce(voters, state, fn node, state ->
        emit(state, {:send, node, {:claim, create.name, create.stamp, create.id}})
      end)

    state = emit(state, {:start_timer, create.id, state.create_timeout})

    create =
      Map.merge(create, %{
        round: :claim,
        voters: voters,
        waiting: MapSet.new(voters),
        timer?: true
      })

    %{
      state
      | claims: Map.put(state.claims, create.name, {:own, create.stamp, create.id}),
        pending: Map.put(state.pending, create.id, create)
    }
  end

  # Every voter granted the claim (`create` is no longer pending): create
  # the channel, then announce it (when the store's answer comes back).
  defp commit(%{} = state, %{opts: :hold} = create) do
    claims = Map.put(state.claims, create.name, {:held, create.stamp, create.id})
    done(%{state | claims: claims}, create, {:ok, create.stamp})
  end

  defp commit(state, create) do
    state = %{state | claims: Map.delete(state.claims, create.name)}
    emit(state, {:create_channel, create.name, create.opts, {:commit, create}})
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

    state =
      Enum.reduce(create.voters, state, fn node, state ->
        emit(state, {:send, node, {:release, create.name, create.stamp}})
      end)

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
    state = if create.timer?, do: emit(state, {:cancel_timer, create.id}), else: state
    emit(state, {:reply, create.reply_to, answer})
  end

  # The store no longer has `name`: if it was one of ours, tell every node.
  defp forget_own(state, name) do
    case Map.pop(state.own, name) do
      {{_opts, stamp}, own} -> send_all(%{state | own: own}, {:del, name, stamp})
      {nil, _} -> state
    end
  end

  defp replicated(state), do: Map.get(state.world, :replicated, fn -> [] end).()

  defp taken?(state, name) do
    Map.has_key?(state.own, name) or Map.has_key?(state.remote, name) or
      state.world.stored?.(name)
  end

  ## Messages from other nodes

  defp message(state, node, {:claim, name, stamp, id}) do
    {vote, state} = vote(state, node, name, stamp)
    emit(state, {:send, node, {:vote, id, vote}})
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
    state = state |> add(node, name, opts, stamp, incarnation) |> older(node, [name])
    if id, do: emit(state, {:send, node, {:added, id}}), else: state
  end

  defp message(state, node, {:added, id}) do
    case state.pending do
      %{^id => %{round: :announce}} -> heard(state, id, node)
      _ -> state
    end
  end

  defp message(state, node, {:del, name, stamp}) do
    case state.remote do
      %{^name => {^node, _opts, ^stamp, _incarnation}} ->
        drop_entry(state, name)

      %{^name => {_home, opts, ^stamp, _incarnation}} ->
        if node in Keyword.get(opts, :members, []), do: drop_entry(state, name), else: state

      _ ->
        state
    end
  end

  defp message(state, node, {:sync, incarnation, entries}) do
    names = MapSet.new(entries, &elem(&1, 0))
    state = %{state | forgotten: MapSet.delete(state.forgotten, node)}

    {state, lost} =
      for {name, {^node, opts, stamp, had}} <- state.remote,
          not MapSet.member?(names, name),
          reduce: {state, []} do
        {state, lost} ->
          cond do
            # Deleted while we were apart.
            had == incarnation -> {drop_entry(state, name), lost}
            # Its members' logs bring it back, not a recreate.
            Keyword.has_key?(opts, :members) -> {state, lost}
            true -> {state, [{name, opts, stamp} | lost]}
          end
      end

    state =
      Enum.reduce(entries, state, fn {name, opts, stamp}, state ->
        add(state, node, name, opts, stamp, incarnation)
      end)

    state = older(state, node, Enum.map(entries, &elem(&1, 0)))
    if lost != [], do: emit(state, {:send, node, {:recreate, lost}}), else: state
  end

  # Channels of nodes the sender has no link to, as we know them. One whose
  # home the receiver is linked to is left to that home's own word, and one
  # it knows another entry of the same home for, to that entry.
  defp message(state, _node, {:homes, entries}) do
    Enum.reduce(entries, state, fn {name, home, opts, stamp, incarnation}, state ->
      cond do
        linked?(state, home) or home in state.forgotten -> state
        match?(%{^name => {^home, _, _, _}}, state.remote) -> state
        true -> add(state, home, name, opts, stamp, incarnation)
      end
    end)
  end

  # Channels this node homed before it restarted: back, empty.
  # A claim of ours on such a name (its create declared again at boot, say)
  # is younger than the channel and loses to it, `{:error, :exists}` once
  # the channel is back; a claim granted to another node stays, and loses
  # when the channel's announce reaches that node.
  defp message(state, _node, {:recreate, entries}) do
    Enum.reduce(entries, state, fn {name, opts, stamp}, state ->
      case {taken?(state, name), state.claims[name]} do
        {true, _} ->
          state

        {false, {:own, _, id}} ->
          state
          |> emit({:create_channel, name, opts, {:recreate, stamp}})
          |> abort(id, {:error, :exists})

        {false, _} ->
          emit(state, {:create_channel, name, opts, {:recreate, stamp}})
      end
    end)
  end

  defp message(state, _node, _unknown), do: state

  defp vote(state, node, name, stamp) do
    cond do
      taken?(state, name) ->
        {:exists, state}

      true ->
        case state.claims[name] do
          {_, better, _} when better < stamp ->
            {:exists, state}

          # Granted everywhere already: its members are being made.
          {:held, _, _} ->
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

    case state do
      # The same replicated channel, announced by a member: its members now.
      %{own: %{^name => {_opts, ^stamp}}} ->
        if Keyword.has_key?(opts, :members),
          do: %{state | own: Map.put(state.own, name, {opts, stamp})},
          else: state

      %{own: %{^name => {_opts, own_stamp}}} ->
        if stamp < own_stamp do
          state
          |> emit({:delete_channel, name})
          |> forget_own(name)
          |> put_entry(name, node, opts, stamp, incarnation)
        else
          state
        end

      %{remote: %{^name => {other, _, other_stamp, _}}}
      when other != node and other_stamp < stamp ->
        state

      _ ->
        put_entry(state, name, node, opts, stamp, incarnation)
    end
  end

  # Of `names`, which `node` says it homes, those we keep for another home
  # under a smaller stamp: `node` must hear of that home, or it keeps its
  # copy while we point elsewhere (the other home may be down, and tell it
  # nothing).
  defp older(state, node, names) do
    homes =
      for name <- names,
          {home, _, _, _} = entry <- [state.remote[name]],
          home != node,
          do: homed(name, entry)

    if homes == [], do: state, else: emit(state, {:send, node, {:homes, homes}})
  end

  defp homed(name, {home, opts, stamp, incarnation}), do: {name, home, opts, stamp, incarnation}

  defp linked?(state, node),
    do: Enum.any?(state.world.links, fn {n, link} -> n == node and link != :down end)

  # A channel was created under a claim: the grant is spent, and a claim of
  # ours on the same name has lost.
  defp drop_claim(state, name) do
    case state.claims[name] do
      {:own, _, id} -> abort(state, id, {:error, :exists})
      {:granted, _, _} -> %{state | claims: Map.delete(state.claims, name)}
      # Its members are being made; `:claimed` settles it.
      {:held, _, _} -> state
      nil -> state
    end
  end

  ## Effects

  defp put_entry(state, name, node, opts, stamp, incarnation) do
    state = %{state | remote: Map.put(state.remote, name, {node, opts, stamp, incarnation})}
    emit(state, {:put_entry, {name, node, opts, stamp, incarnation}})
  end

  defp drop_entry(state, name),
    do: emit(%{state | remote: Map.delete(state.remote, name)}, {:drop_entry, name})

  # To every node with a link, up or not (a busy or down link holds it or
  # drops it; the directory resyncs on the next link up).
  defp send_all(state, message) do
    Enum.reduce(state.world.links, state, fn {node, _}, state ->
      emit(state, {:send, node, message})
    end)
  end

  defp emit(state, effect), do: %{state | effects: [effect | state.effects]}
end
