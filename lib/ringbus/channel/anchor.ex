defmodule Ringbus.Channel.Anchor do
  @moduledoc false
  # A channel's lifetime as a process, for its subscriptions to monitor.
  #
  # Every subscription monitors its channel's anchor. Deleting the channel
  # stops the anchor with reason `:channel_deleted`, and the VM sends each
  # subscription a `:DOWN`: the channel keeps no list of its subscriptions,
  # and a subscribe writes to no shared table and links to no shared process.
  #
  # Why a monitor and not a link or a table: the VM keeps the monitors that
  # local processes hold on a process in a doubly linked list on that
  # process, so adding or removing one costs the same however many there
  # are, where links sit in a tree on both sides and a shared table is one
  # more contended write per subscribe (the `subscribe` rows of `mix
  # ringbus.bench backlog`).
  #
  # The anchor is linked to `Ringbus.Store`, which owns the channel's tables:
  # if the store stops or dies, its anchors die with it and every
  # subscription closes. The anchor holds no data and hibernates; nothing is
  # sent to it but `:sys` requests, which it answers (its state is `nil`),
  # and whatever else comes is dropped.

  @doc "Starts an anchor linked to the calling process."
  @spec start_link() :: pid()
  def start_link, do: :proc_lib.spawn_link(__MODULE__, :sleep, [self()])

  @doc "Stops `anchor` with `reason`: each subscription gets a `:DOWN` with it."
  @spec stop(pid(), term()) :: true
  def stop(anchor, reason), do: Process.exit(anchor, reason)

  @doc false
  def sleep(parent) do
    receive do
      {:system, from, request} ->
        :sys.handle_system_msg(request, from, parent, __MODULE__, [], nil)

      _stray ->
        sleep(parent)
    after
      0 -> :erlang.hibernate(__MODULE__, :sleep, [parent])
    end
  end

  ## :sys

  @doc false
  def system_continue(parent, _debug, nil), do: sleep(parent)

  @doc false
  def system_terminate(reason, _parent, _debug, nil), do: exit(reason)

  @doc false
  def system_get_state(nil), do: {:ok, nil}

  # There is no state to replace: a function that returns other than `nil`
  # fails the call, and the anchor goes on.
  @doc false
  def system_replace_state(fun, nil) do
    nil = fun.(nil)
    {:ok, nil, nil}
  end

  @doc false
  def system_code_change(nil, _module, _old, _extra), do: {:ok, nil}
end
