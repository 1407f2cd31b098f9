defmodule Ringbus.Cluster.Links do
  @moduledoc false
  # The table of links, one row per remote node, and everything a caller
  # does with a link: find it, read its state, hand it a request and wait for
  # the answer within a bound.
  #
  # A row is `{node, link_pid | nil, counters, {call_timeout, reply_timeout},
  # calls}`. The counters are an `:atomics` array the link writes (its
  # state, the bytes it holds, batches sent, drops, suspensions) and that
  # callers and `cluster_info/0` read without asking the link anything.
  # `calls` is a `:counters` array the callers bump themselves, one slot per
  # outcome of a call (answered, refused, timed out), so counting takes no
  # process. Both belong to the node, not to one link process, so they count
  # across reconnections.
  #
  # A caller never waits on a remote process. It sends its request to the
  # local link (a local send, which cannot block) and waits for the answer
  # on a monitor alias. A link that is busy or down is refused before
  # anything is sent. The alias is deactivated when the caller gives up, so
  # a late answer is dropped by the runtime instead of landing in the
  # caller's mailbox; the receive matches the fresh monitor reference, which
  # the runtime finds without scanning the mailbox.
  #
  # Three outcomes, never a false one. Each request carries a one-slot
  # `:atomics` flag that the caller and the link settle with
  # compare-and-swap, so that exactly one of them decides its fate:
  #
  #   queued -> sent      the link puts it in a batch (back to queued if
  #                       the distribution buffer refused the batch)
  #   queued -> gave_up   the caller stopped waiting first: the link drops
  #                       it unsent, and the caller answers `node_busy`
  #   sent -> gave_up     no answer in time: `{:error, :timeout}`, the
  #                       outcome is unknown
  #   sent -> answered    a subscribe's answer is on its way (the link
  #                       routes the subscription only then)
  #
  # A request waits at most `call_timeout` to leave this node, and once it
  # has left, until `reply_timeout` after the call began for its answer.
  #
  # The table is owned by `Ringbus.Cluster.Members`, which starts the links.
  # Each link writes its own row as it starts, before it can take a message
  # from its peer, so that whatever it tells the directory finds it here;
  # `Members` clears the row when the link is gone.

  @table :ringbus_cluster_links
  @scope :ringbus_cluster

  # Counter indices.
  @state 1
  @queued 2
  @batches 3
  @drops 4
  @suspensions 5
  # The creation of the peer node's incarnation the link talks to.
  @creation 6
  @size 6

  # Call outcome indices, in `calls`.
  @calls_ok 1
  @calls_refused 2
  @calls_timeout 3

  @down 0
  @up 1
  @busy 2

  # A request's flag.
  @r_queued 0
  @r_sent 1
  @r_gave_up 2
  @r_answered 3

  @typedoc "The figures of one link, as `Ringbus.cluster_info/0` shows them."
  @type info :: %{
          state: :up | :busy | :down,
          queued_bytes: non_neg_integer(),
          batches: non_neg_integer(),
          drops: non_neg_integer(),
          suspensions: non_neg_integer(),
          calls_ok: non_neg_integer(),
          calls_refused: non_neg_integer(),
          calls_timeout: non_neg_integer()
        }

  @doc "The `:pg` scope of the cluster layer."
  @spec scope() :: atom()
  def scope, do: @scope

  @doc "The `:pg` group of every node's cluster layer."
  @spec members_group() :: term()
  def members_group, do: :ringbus_members

  @doc "The `:pg` group of the links, on every node, that talk to `node`."
  @spec group(node()) :: term()
  def group(node), do: {:ringbus_link, node}

  ## The table (its owner, Members)

  @doc "Creates the table; the calling process owns it."
  @spec new_table() :: :ok
  def new_table do
    :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
    :ok
  end

  @doc "The counters of `node`'s link, made the first time a link to it starts."
  @spec counters(node()) :: :atomics.atomics_ref()
  def counters(node) do
    case :ets.lookup(@table, node) do
      [{_, _, counters, _, _}] -> counters
      [] -> :atomics.new(@size, signed: false)
    end
  end

  @doc "Records `node`'s link process (`nil` once it is gone) and the timeouts of its callers."
  @spec put(node(), pid() | nil, :atomics.atomics_ref(), Ringbus.Cluster.Config.t()) :: :ok
  def put(node, pid, counters, config) do
    timeouts = {config.call_timeout, config.reply_timeout}

    # The row is made once per node (by its first link), and its call
    # counters kept from then on.
    unless :ets.update_element(@table, node, [{2, pid}, {3, counters}, {4, timeouts}]) do
      calls = :counters.new(3, [:write_concurrency])
      :ets.insert(@table, {node, pid, counters, timeouts, calls})
    end

    :ok
  end

  ## Request flags (the link)

  @doc """
  Claims a request for a batch: `true` if it may be sent, `false` if its
  caller gave up before (it is then dropped).
  """
  @spec claim(:atomics.atomics_ref()) :: boolean()
  def claim(flag), do: :atomics.compare_exchange(flag, 1, @r_queued, @r_sent) in [:ok, @r_sent]

  @doc "Gives back a claimed request that did not leave after all (a refused batch)."
  @spec unclaim(:atomics.atomics_ref()) :: :ok
  def unclaim(flag) do
    _ = :atomics.compare_exchange(flag, 1, @r_sent, @r_queued)
    :ok
  end

  @doc "Whether a subscribe's caller still waits: if so, it will get the answer."
  @spec deliver?(:atomics.atomics_ref()) :: boolean()
  def deliver?(flag), do: :atomics.compare_exchange(flag, 1, @r_sent, @r_answered) == :ok

  ## Counters (the link)

  @doc "Sets a link's state."
  @spec set_state(:atomics.atomics_ref(), :up | :busy | :down) :: :ok
  def set_state(counters, :up), do: :atomics.put(counters, @state, @up)
  def set_state(counters, :busy), do: :atomics.put(counters, @state, @busy)
  def set_state(counters, :down), do: :atomics.put(counters, @state, @down)

  @doc "Records the incarnation of the peer node, as the creation in its link's pid."
  @spec set_peer(:atomics.atomics_ref(), pid()) :: :ok
  def set_peer(counters, peer), do: :atomics.put(counters, @creation, creation(peer))

  @doc "Sets the bytes a link holds."
  @spec set_queued(:atomics.atomics_ref(), non_neg_integer()) :: :ok
  def set_queued(counters, bytes), do: :atomics.put(counters, @queued, bytes)

  @doc "Counts a batch sent, `n` items dropped or a suspension avoided."
  @spec count(:atomics.atomics_ref(), :batches | :drops | :suspensions, pos_integer()) :: :ok
  def count(counters, :batches, n), do: :atomics.add(counters, @batches, n)
  def count(counters, :drops, n), do: :atomics.add(counters, @drops, n)
  def count(counters, :suspensions, n), do: :atomics.add(counters, @suspensions, n)

  ## Reading

  @doc "Every link's figures, by node."
  @spec info() :: %{node() => info()}
  def info do
    for {node, _pid, counters, _, calls} <- :ets.tab2list(@table), into: %{} do
      {node,
       %{
         state: state_name(:atomics.get(counters, @state)),
         queued_bytes: :atomics.get(counters, @queued),
         batches: :atomics.get(counters, @batches),
         drops: :atomics.get(counters, @drops),
         suspensions: :atomics.get(counters, @suspensions),
         calls_ok: :counters.get(calls, @calls_ok),
         calls_refused: :counters.get(calls, @calls_refused),
         calls_timeout: :counters.get(calls, @calls_timeout)
       }}
    end
  rescue
    ArgumentError -> %{}
  end

  @doc "The nodes whose links are in one of `states` now."
  @spec nodes([:up | :busy | :down]) :: [node()]
  def nodes(states), do: for({node, state} <- states(), state in states, do: node)

  @doc "The nodes that have a link process, with its state."
  @spec states() :: [{node(), :up | :busy | :down}]
  def states do
    for {node, pid, counters, _, _} <- :ets.tab2list(@table),
        is_pid(pid),
        do: {node, state_name(:atomics.get(counters, @state))}
  rescue
    ArgumentError -> []
  end

  @doc "Hands `item` to `node`'s link for its next batch; dropped if it has none."
  @spec cast(node(), term()) :: :ok
  def cast(node, item) do
    case :ets.lookup(@table, node) do
      [{_, pid, _, _, _}] when is_pid(pid) -> send(pid, {:ringbus_cast, item})
      _ -> :ok
    end

    :ok
  end

  ## Callers

  @doc """
  Runs `op` on channel `name` at `node` through the link and returns its
  answer; `{:error, :node_down}` or `{:error, :node_busy}` when the request
  did not leave this node (so it was certainly not carried out);
  `{:error, :timeout}` when it left and no answer came in time (it may or
  may not have been carried out). Waits at most the link's `call_timeout`
  for the request to leave and its `reply_timeout` in all, or `timeout` ms
  for both when given. Counts the outcome in the node's `calls`.
  """
  @spec call(node(), term(), term(), pos_integer() | nil) :: term()
  def call(node, name, op, timeout \\ nil) do
    case lookup(node) do
      {:up, pid, {call_timeout, reply_timeout}, calls} ->
        {leave, reply} = if timeout, do: {timeout, timeout}, else: {call_timeout, reply_timeout}
        counted(await_call(pid, name, op, leave, max(leave, reply)), calls)

      {:busy, _, _, calls} ->
        counted({:error, :node_busy}, calls)

      {:down, _, _, calls} ->
        counted({:error, :node_down}, calls)
    end
  end

  # A node with no row yet (never linked) has nothing to count in.
  defp counted(answer, nil), do: answer

  defp counted(answer, calls) do
    slot =
      case answer do
        {:error, reason} when reason in [:node_busy, :node_down] -> @calls_refused
        {:error, :timeout} -> @calls_timeout
        _answered -> @calls_ok
      end

    :counters.add(calls, slot, 1)
    answer
  end

  @doc """
  Returns credit to subscription `sub` at `node`. Credit is never refused
  while the link lives: a busy link adds it up until it can send it. A
  subscription of a node that is down, or of an incarnation of it before
  a restart, has ended with it: `{:error, :no_subscription}`.
  """
  @spec ack(node(), {pid(), reference()}, pos_integer()) :: :ok | {:error, :no_subscription}
  def ack(node, {sub_pid, _} = sub, count) do
    case :ets.lookup(@table, node) do
      [{_, pid, counters, _, _}] when is_pid(pid) ->
        if :atomics.get(counters, @state) != @down and
             :atomics.get(counters, @creation) == creation(sub_pid) do
          send(pid, {:ringbus_link_ack, sub, count})
          :ok
        else
          {:error, :no_subscription}
        end

      _ ->
        {:error, :no_subscription}
    end
  rescue
    ArgumentError -> {:error, :no_subscription}
  end

  # A pid's external form ends with its node's creation, which changes
  # when the node restarts under the same name.
  defp creation(pid) do
    binary = :erlang.term_to_binary(pid)
    skip = byte_size(binary) - 4
    <<_::binary-size(skip), creation::32>> = binary
    creation
  end

  @doc """
  Ends subscription `sub` at `node`: once this returns `:ok`, the link
  forwards no more of its batches. The subscription itself stops when the
  link's message reaches its node. `{:error, :node_busy}` when the link did
  not take the request within `call_timeout`: it then drops it, and the
  subscription goes on. Settled with a flag, as a call's request is.
  """
  @spec unsubscribe(node(), {pid(), reference()}) ::
          :ok | {:error, :no_subscription | :node_busy}
  def unsubscribe(node, sub) do
    case lookup(node) do
      {:down, _, _, _} ->
        {:error, :no_subscription}

      {_up_or_busy, pid, {call_timeout, _reply_timeout}, _} ->
        flag = :atomics.new(1, signed: false)
        ref = :erlang.monitor(:process, pid, [{:alias, :demonitor}])
        send(pid, {:ringbus_unsubscribe, ref, sub, flag})

        # A link that stops ends the subscriptions it routes.
        case answer(ref, flag, call_timeout, fn -> unsubscribe_late(ref, flag) end) do
          {:error, reason} when reason in [:node_down, :timeout] -> {:error, :no_subscription}
          reply -> reply
        end
    end
  end

  # Not taken by the link in time: given up, unless the link took it just now.
  defp unsubscribe_late(ref, flag) do
    case :atomics.compare_exchange(flag, 1, @r_queued, @r_gave_up) do
      :ok -> give_up(ref, {:error, :node_busy})
      @r_sent -> answered(ref, flag)
    end
  end

  defp lookup(node) do
    case :ets.lookup(@table, node) do
      [{_, pid, counters, timeouts, calls}] when is_pid(pid) ->
        {state_name(:atomics.get(counters, @state)), pid, timeouts, calls}

      [{_, nil, _, _, calls}] ->
        {:down, nil, nil, calls}

      [] ->
        {:down, nil, nil, nil}
    end
  rescue
    # No table: the cluster layer is not running.
    ArgumentError -> {:down, nil, nil, nil}
  end

  defp await_call(pid, name, op, leave, reply) do
    flag = :atomics.new(1, signed: false)
    ref = :erlang.monitor(:process, pid, [{:alias, :demonitor}])
    send(pid, {:ringbus_call, ref, name, op, flag})
    answer(ref, flag, leave, fn -> left_or_not(ref, flag, reply - leave) end)
  end

  # The link's answer, or what its end means, or `timed_out`'s after `timeout`.
  defp answer(ref, flag, timeout, timed_out) do
    receive do
      {^ref, answer} ->
        Process.demonitor(ref, [:flush])
        answer

      {:DOWN, ^ref, _, _, _} ->
        link_gone(flag)
    after
      timeout -> timed_out.()
    end
  end

  # `call_timeout` has passed: a request still queued is given up (the link
  # drops it); one that left gets the rest of `reply_timeout`.
  defp left_or_not(ref, flag, rest) do
    case :atomics.compare_exchange(flag, 1, @r_queued, @r_gave_up) do
      :ok ->
        give_up(ref, {:error, :node_busy})

      @r_answered ->
        answered(ref, flag)

      @r_sent ->
        answer(ref, flag, rest, fn -> no_answer(ref, flag) end)
    end
  end

  # `reply_timeout` has passed. The link may have given the request back
  # meanwhile (a refused batch), or be handing over a subscribe's answer.
  defp no_answer(ref, flag) do
    case :atomics.compare_exchange(flag, 1, @r_sent, @r_gave_up) do
      :ok -> give_up(ref, {:error, :timeout})
      @r_answered -> answered(ref, flag)
      @r_queued -> left_or_not(ref, flag, 0)
    end
  end

  # The link settled the flag and sends the answer right after.
  defp answered(ref, flag), do: answer(ref, flag, :infinity, fn -> :ok end)

  defp give_up(ref, error) do
    Process.demonitor(ref, [:flush])

    # An answer may have come in just before the alias was deactivated.
    receive do
      {^ref, answer} -> answer
    after
      0 -> error
    end
  end

  # The link stopped: a request it never sent was not carried out.
  defp link_gone(flag) do
    if :atomics.get(flag, 1) == @r_queued, do: {:error, :node_down}, else: {:error, :timeout}
  end

  defp state_name(@up), do: :up
  defp state_name(@busy), do: :busy
  defp state_name(@down), do: :down
end
