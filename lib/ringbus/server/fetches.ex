defmodule Ringbus.Server.Fetches do
  @moduledoc false
  # The GROUP_FETCHes of one binary connection that wait (version 5), as
  # data: those the session has answered `{:wait, fun}` for and the
  # connection is yet to start, and those waiting in a process of their
  # own, by pid. At most `Ringbus.Wire.Frame.max_waiting_fetches/0` at once,
  # both kinds counted; `Ringbus.Server.BinaryProtocol` starts them, takes
  # their answers and kills those still waiting when the connection ends.

  alias Ringbus.Server.GroupRequests
  alias Ringbus.Wire.{Frame, GroupFrame}

  defstruct starts: [], pids: %{}, count: 0

  @type t :: %__MODULE__{}
  @type start :: {Frame.corr(), (() -> [Frame.t()])}

  @spec new() :: t()
  def new, do: %__MODULE__{}

  @doc "A fetch of `corr` to start, or `:full` at the bound."
  @spec add(t(), Frame.corr(), (() -> [Frame.t()])) :: {:ok, t()} | :full
  def add(%__MODULE__{count: count} = fetches, corr, fun) do
    if count < GroupFrame.max_waiting_fetches(),
      do: {:ok, %{fetches | starts: [{corr, fun} | fetches.starts], count: count + 1}},
      else: :full
  end

  @doc "The fetches to start, oldest first."
  @spec take_starts(t()) :: {[start()], t()}
  def take_starts(%__MODULE__{starts: starts} = fetches),
    do: {:lists.reverse(starts), %{fetches | starts: []}}

  @doc "The fetch of `corr` waits in process `pid`."
  @spec started(t(), pid(), Frame.corr()) :: t()
  def started(%__MODULE__{} = fetches, pid, corr),
    do: %{fetches | pids: Map.put(fetches.pids, pid, corr)}

  @doc """
  A fetch's process ended: with its answer (`{:ok, frames}`) or not (any
  other reason, answered `internal`). The frames to write; none for a
  process that is not one of these fetches (or answered already).
  """
  @spec finished(t(), pid(), {:ok, [Frame.t()]} | term()) :: {[Frame.t()], t()}
  def finished(%__MODULE__{} = fetches, pid, result) do
    case Map.pop(fetches.pids, pid) do
      {nil, _} ->
        {[], fetches}

      {corr, pids} ->
        fetches = %{fetches | pids: pids, count: fetches.count - 1}

        case result do
          {:ok, frames} ->
            {frames, fetches}

          reason ->
            message = "the fetch failed: #{inspect(reason)}"
            {[GroupRequests.error(corr, :internal, message)], fetches}
        end
    end
  end

  @doc "The processes of the fetches waiting."
  @spec pids(t()) :: [pid()]
  def pids(%__MODULE__{pids: pids}), do: Map.keys(pids)
end
