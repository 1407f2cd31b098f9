defmodule Ringbus.Sentinel do
  @moduledoc false
  # A process that stands for something else's lifetime and does nothing
  # but exist: a channel's anchor (`Ringbus.Channel.Anchor`), this node's
  # member of the cluster's group (`Ringbus.Cluster.Member`). Others monitor
  # it, join it to a group, or stop it. It holds no data and hibernates;
  # nothing is sent to it but `:sys` requests, which it answers (its state
  # is `nil`), and whatever else comes is dropped.

  @doc """
  Starts a sentinel linked to the calling process; it runs `init` (in
  itself) before it answers `start_link/1`.
  """
  @spec start_link((() -> term())) :: pid()
  def start_link(init \\ fn -> :ok end) do
    parent = self()
    pid = :proc_lib.spawn_link(__MODULE__, :init, [parent, init])
    receive do: ({__MODULE__, ^pid} -> pid)
  end

  @doc false
  def init(parent, init) do
    init.()
    send(parent, {__MODULE__, self()})
    sleep(parent)
  end

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
  # fails the call, and the sentinel goes on.
  @doc false
  def system_replace_state(fun, nil) do
    nil = fun.(nil)
    {:ok, nil, nil}
  end

  @doc false
  def system_code_change(nil, _module, _old, _extra), do: {:ok, nil}
end
