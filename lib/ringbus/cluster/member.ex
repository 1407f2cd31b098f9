defmodule Ringbus.Cluster.Member do
  @moduledoc false
  # The process that stands for this node in the members group
  # (`Links.members_group()`), started and linked by `Ringbus.Cluster.Members`.
  #
  # `Members` cannot be the member itself: OTP 25's `:pg` crashes on the exit
  # of a process that both monitors the scope and is a member
  # (erlang/otp#7625), which logged an error at every stop. So this process
  # joins the group and then does nothing but exist, answering `:sys` (its
  # state is `nil`); whatever else comes is dropped.

  alias Ringbus.Cluster.Links

  @doc "Starts the member linked to the caller, once it has joined the group."
  @spec start_link() :: pid()
  def start_link do
    parent = self()
    pid = :proc_lib.spawn_link(__MODULE__, :init, [parent])
    receive do: ({:member, ^pid} -> pid)
  end

  @doc false
  def init(parent) do
    :ok = :pg.join(Links.scope(), Links.members_group(), self())
    send(parent, {:member, self()})
    loop(parent)
  end

  defp loop(parent) do
    receive do
      {:system, from, request} ->
        :sys.handle_system_msg(request, from, parent, __MODULE__, [], nil)

      _stray ->
        loop(parent)
    end
  end

  ## :sys

  @doc false
  def system_continue(parent, _debug, nil), do: loop(parent)

  @doc false
  def system_terminate(reason, _parent, _debug, nil), do: exit(reason)

  @doc false
  def system_get_state(nil), do: {:ok, nil}

  # There is no state to replace: a function that returns other than `nil`
  # fails the call, and the member goes on.
  @doc false
  def system_replace_state(fun, nil) do
    nil = fun.(nil)
    {:ok, nil, nil}
  end

  @doc false
  def system_code_change(nil, _module, _old, _extra), do: {:ok, nil}
end
