defmodule Ringbus.Chaos.History do
  @moduledoc """
  A Jepsen-style history of what test clients did, recorded in ETS.

  Every operation a client makes is two entries, its invocation and its
  completion, each `{process, type, op, value, time}`:

    * `process` - who made it (a producer's or consumer's id);
    * `type` - `:invoke`, then `:ok` (done), `:fail` (certainly not done)
      or `:info` (unknown: `{:error, :timeout}`, a dropped connection);
    * `op` and `value` - what it was, and its result (see
      `Ringbus.Chaos.Workload` for the ops it records);
    * `time` - `System.os_time(:microsecond)`, comparable across the
      nodes of one machine.

  A delivery to a subscriber is one unpaired `:ok` entry of op `:deliver`.
  An invocation that never completes counts as `:info`.

  Recording is one `:atomics` increment and one `:ets.insert/2` in the
  client's own process. The table is bounded: past `max` entries,
  `record/5` refuses (`:full`) and the clients stop. It is owned by a
  process that does nothing else, so a crashing client loses nothing.
  """

  defstruct [:table, :counter, :max, :owner]

  @typedoc "A history's handle, passed to the clients that record into it."
  @type t :: %__MODULE__{
          table: :ets.tid(),
          counter: :atomics.atomics_ref(),
          max: pos_integer(),
          owner: pid()
        }

  @type type :: :invoke | :ok | :fail | :info
  @type entry :: {term(), type(), atom(), term(), integer()}

  @doc """
  Starts a history that holds at most `max` entries, owned by a new
  process. With a `name`, the table is named, and `open/1` finds it from
  any process of the node (a handle does not survive a trip to another
  node: its `:atomics` reference would not).
  """
  @spec new(pos_integer(), atom() | nil) :: t()
  def new(max \\ 1_000_000, name \\ nil) do
    parent = self()
    ref = make_ref()

    spawn(fn ->
      named = if name, do: [:named_table], else: []
      table = :ets.new(name || :ringbus_chaos_history, [:ordered_set, :public] ++ named)
      history = %__MODULE__{table: table, counter: :atomics.new(1, []), max: max, owner: self()}
      # The meta row sorts after every integer key.
      :ets.insert(table, {:meta, history})
      send(parent, {ref, history})

      receive do
        :stop -> :ok
      end
    end)

    receive do
      {^ref, history} -> history
    end
  end

  @doc "The handle of the history named `name` on this node."
  @spec open(atom()) :: t()
  def open(name), do: :ets.lookup_element(name, :meta, 2)

  @doc "Records one entry, stamped now; `:full` once the history holds `max` entries."
  @spec record(t(), term(), type(), atom(), term()) :: :ok | :full
  def record(%__MODULE__{table: table, counter: counter, max: max}, process, type, op, value) do
    i = :atomics.add_get(counter, 1, 1)

    if i > max do
      :full
    else
      :ets.insert(table, {i, {process, type, op, value, System.os_time(:microsecond)}})
      :ok
    end
  end

  @doc """
  Whether clients should stop invoking: a quarter of `max` (at most 4,096
  entries) is kept for the completions of operations in flight, so that
  none of them is left without its completion.
  """
  @spec full?(t()) :: boolean()
  def full?(%__MODULE__{counter: counter, max: max}),
    do: :atomics.get(counter, 1) >= max - min(4_096, div(max, 4))

  @doc """
  The completion type of a Ringbus result. `node_busy` and `node_down`
  are `:fail`, as today's API says they mean not applied (the checker
  shows where that is false); `{:error, :timeout}` and a dropped
  connection are `:info`.
  """
  @spec classify(term()) :: :ok | :fail | :info
  def classify(:ok), do: :ok
  def classify({:ok, _}), do: :ok
  def classify({:ok, _, _}), do: :ok
  def classify({:ok, _, _, _}), do: :ok
  def classify(:empty), do: :ok
  def classify({:error, reason}) when reason in [:timeout, :closed, :noconnection], do: :info
  def classify({:error, _}), do: :fail

  @doc "The entries in the order they were recorded."
  @spec entries(t()) :: [entry()]
  def entries(%__MODULE__{table: table}),
    do: for({i, entry} <- :ets.tab2list(table), is_integer(i), do: entry)

  @doc "Writes the entries to `path` (external term format); returns how many."
  @spec dump(t(), Path.t()) :: non_neg_integer()
  def dump(%__MODULE__{table: table} = history, path) do
    File.write!(path, :erlang.term_to_binary(entries(history), compressed: 1))
    :ets.info(table, :size) - 1
  end

  @doc "Reads entries written by `dump/2`."
  @spec load(Path.t()) :: [entry()]
  def load(path), do: path |> File.read!() |> :erlang.binary_to_term()

  @doc "Stops the owner; the table goes with it."
  @spec delete(t()) :: :ok
  def delete(%__MODULE__{owner: owner}) do
    send(owner, :stop)
    :ok
  end
end
