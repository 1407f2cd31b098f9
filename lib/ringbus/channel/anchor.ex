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
  # The anchor is a `Ringbus.Sentinel` linked to `Ringbus.Store`, which
  # owns the channel's tables: if the store stops or dies, its anchors die
  # with it and every subscription closes.

  alias Ringbus.Sentinel

  @doc "Starts an anchor linked to the calling process."
  @spec start_link() :: pid()
  def start_link, do: Sentinel.start_link()

  @doc "Stops `anchor` with `reason`: each subscription gets a `:DOWN` with it."
  @spec stop(pid(), term()) :: true
  def stop(anchor, reason), do: Process.exit(anchor, reason)
end
