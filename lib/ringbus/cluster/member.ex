defmodule Ringbus.Cluster.Member do
  @moduledoc false
  # The process that stands for this node in the members group
  # (`Links.members_group()`), started and linked by `Ringbus.Cluster.Members`.
  #
  # `Members` cannot be the member itself: OTP 25's `:pg` crashes on the exit
  # of a process that both monitors the scope and is a member
  # (erlang/otp#7625), which logged an error at every stop. So this process
  # joins the group and then does nothing but exist: a `Ringbus.Sentinel`.

  alias Ringbus.Sentinel
  alias Ringbus.Cluster.Links

  @doc "Starts the member linked to the caller, once it has joined the group."
  @spec start_link() :: pid()
  def start_link,
    do:
      Sentinel.start_link(fn -> :ok = :pg.join(Links.scope(), Links.members_group(), self()) end)
end
