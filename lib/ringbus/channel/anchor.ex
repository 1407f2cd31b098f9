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
  # local processes hold on a process in a doubly linked list on that process,
  # so adding or removing one costs the same however many there are; links
  # sit in a tree on both sides. Measured per process start in a burst of
  # 160k, added to a process that only monitors its caller: a link to one
  # shared process 0.65 µs, two inserts into one shared table 0.72 µs, a
  # monitor of one shared process 0.21-0.32 µs; at 10k none of them added
  # more than 0.06 µs (separate runs vary by 20-30%). The subscribe burst of
  # `mix ringbus.bench backlog` took 1,114 ms at 160k with the link and the
  # table, and 732-876 ms with this monitor, both started by
  # `GenServer.start/3` (`Subscription.start/3` says why it no longer is).
  #
  # The anchor is linked to `Ringbus.Store`, which owns the channel's tables:
  # if the store stops or dies, its anchors die with it and every
  # subscription closes. The anchor holds no data and hibernates; nothing is
  # sent to it, and whatever comes anyway is dropped.

  @doc "Starts an anchor linked to the calling process."
  @spec start_link() :: pid()
  def start_link, do: :proc_lib.spawn_link(__MODULE__, :sleep, [])

  @doc "Stops `anchor` with `reason`: each subscription gets a `:DOWN` with it."
  @spec stop(pid(), term()) :: true
  def stop(anchor, reason), do: Process.exit(anchor, reason)

  @doc false
  def sleep do
    receive do
      _stray -> sleep()
    after
      0 -> :erlang.hibernate(__MODULE__, :sleep, [])
    end
  end
end
