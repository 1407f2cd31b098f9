defmodule Ringbus.Bench.EtsServerBuffer do
  @moduledoc """
  The ETS ring the buffer bench compares Ringbus with, held by a GenServer.

  The items live in an ETS table whose keys are slots `0..capacity - 1`; the
  server keeps the slot of the next push, the slot of the next pull and the
  size. Indices wrap at the capacity, and a push into a full buffer overwrites
  the oldest item and moves the pull slot along with it. The server's heap
  holds only those three integers, so its garbage collections stay short, but
  every push and pull is still a message round trip through one process.

  The ring itself (`new/1`, `put/2`, `take/1`) works on a table owned by the
  calling process; the server owns one and wraps it:

      {:ok, pid} = Ringbus.Bench.EtsServerBuffer.start_link(2)
      :ok = Ringbus.Bench.EtsServerBuffer.push(pid, "a")
      :ok = Ringbus.Bench.EtsServerBuffer.push(pid, "b")
      :ok = Ringbus.Bench.EtsServerBuffer.push(pid, "c")
      {:ok, "b"} = Ringbus.Bench.EtsServerBuffer.pull(pid)
  """

  use GenServer

  @enforce_keys [:table, :capacity]
  defstruct [:table, :capacity, push_at: 0, pull_at: 0, size: 0]

  @type t :: %__MODULE__{
          table: :ets.tid(),
          capacity: pos_integer(),
          push_at: non_neg_integer(),
          pull_at: non_neg_integer(),
          size: non_neg_integer()
        }

  @doc "An empty ring of `capacity` slots, in a private table of the caller."
  @spec new(pos_integer()) :: t()
  def new(capacity) when is_integer(capacity) and capacity > 0 do
    %__MODULE__{table: :ets.new(__MODULE__, [:set, :private]), capacity: capacity}
  end

  def new(other),
    do: raise(ArgumentError, "expected capacity to be a positive integer, got: #{inspect(other)}")

  @doc "Stores an item, overwriting the oldest one when the ring is full."
  @spec put(t(), term()) :: t()
  def put(%__MODULE__{capacity: cap, size: size} = ring, item) do
    true = :ets.insert(ring.table, {ring.push_at, item})
    next = wrap(ring.push_at + 1, cap)

    if size == cap,
      do: %{ring | push_at: next, pull_at: next},
      else: %{ring | push_at: next, size: size + 1}
  end

  @doc "Takes the oldest item out, freeing its slot."
  @spec take(t()) :: {{:ok, term()}, t()} | {:empty, t()}
  def take(%__MODULE__{size: 0} = ring), do: {:empty, ring}

  def take(%__MODULE__{} = ring) do
    [{_slot, item}] = :ets.take(ring.table, ring.pull_at)
    {{:ok, item}, %{ring | pull_at: wrap(ring.pull_at + 1, ring.capacity), size: ring.size - 1}}
  end

  @doc "The bytes the ring's table takes (payload binaries are held off it)."
  @spec table_bytes(t()) :: non_neg_integer()
  def table_bytes(%__MODULE__{table: table}),
    do: :ets.info(table, :memory) * :erlang.system_info(:wordsize)

  defp wrap(cap, cap), do: 0
  defp wrap(index, _cap), do: index

  @doc "Starts a server owning an empty ring of `capacity` slots."
  @spec start_link(pos_integer()) :: GenServer.on_start()
  def start_link(capacity) when is_integer(capacity) and capacity > 0,
    do: GenServer.start_link(__MODULE__, capacity)

  @doc "Pushes an item to the server's ring."
  @spec push(GenServer.server(), term()) :: :ok
  def push(server, item), do: GenServer.call(server, {:push, item})

  @doc "Pulls the oldest item from the server's ring."
  @spec pull(GenServer.server()) :: {:ok, term()} | :empty
  def pull(server), do: GenServer.call(server, :pull)

  @doc "The bytes the server's table takes."
  @spec info(GenServer.server()) :: %{size: non_neg_integer(), table_bytes: non_neg_integer()}
  def info(server), do: GenServer.call(server, :info)

  @doc "Stops the server; its table goes with it."
  @spec stop(GenServer.server()) :: :ok
  def stop(server), do: GenServer.stop(server)

  @impl true
  def init(capacity), do: {:ok, new(capacity)}

  @impl true
  def handle_call({:push, item}, _from, ring), do: {:reply, :ok, put(ring, item)}

  def handle_call(:pull, _from, ring) do
    {reply, ring} = take(ring)
    {:reply, reply, ring}
  end

  def handle_call(:info, _from, ring),
    do: {:reply, %{size: ring.size, table_bytes: table_bytes(ring)}, ring}
end
