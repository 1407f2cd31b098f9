defmodule Ringbus.Bench.QueueBuffer do
  @moduledoc """
  The idiomatic bounded buffer the buffer bench compares Ringbus with: a
  `:queue` and an explicit size, held by a GenServer.

  A push when the buffer is full drops the oldest item; a pull takes the
  oldest item. Every item is a reference on the server's heap, so the server's
  live set grows with the buffer and each garbage collection has to walk it.

  The buffer itself is plain data (`new/1`, `put/2`, `take/1`); the process
  only wraps it:

      {:ok, pid} = Ringbus.Bench.QueueBuffer.start_link(2)
      :ok = Ringbus.Bench.QueueBuffer.push(pid, "a")
      :ok = Ringbus.Bench.QueueBuffer.push(pid, "b")
      :ok = Ringbus.Bench.QueueBuffer.push(pid, "c")
      {:ok, "b"} = Ringbus.Bench.QueueBuffer.pull(pid)
  """

  use GenServer

  @enforce_keys [:queue, :size, :capacity]
  defstruct @enforce_keys

  @type t :: %__MODULE__{
          queue: :queue.queue(term()),
          size: non_neg_integer(),
          capacity: pos_integer()
        }

  @doc "An empty buffer that holds at most `capacity` items."
  @spec new(pos_integer()) :: t()
  def new(capacity) when is_integer(capacity) and capacity > 0,
    do: %__MODULE__{queue: :queue.new(), size: 0, capacity: capacity}

  def new(other),
    do: raise(ArgumentError, "expected capacity to be a positive integer, got: #{inspect(other)}")

  @doc "Appends an item, dropping the oldest one when the buffer is full."
  @spec put(t(), term()) :: t()
  def put(%__MODULE__{size: size, capacity: cap} = buffer, item) when size < cap,
    do: %{buffer | queue: :queue.in(item, buffer.queue), size: size + 1}

  def put(%__MODULE__{} = buffer, item),
    do: %{buffer | queue: :queue.in(item, :queue.drop(buffer.queue))}

  @doc "Takes the oldest item out."
  @spec take(t()) :: {{:ok, term()}, t()} | {:empty, t()}
  def take(%__MODULE__{} = buffer) do
    case :queue.out(buffer.queue) do
      {{:value, item}, queue} -> {{:ok, item}, %{buffer | queue: queue, size: buffer.size - 1}}
      {:empty, _queue} -> {:empty, buffer}
    end
  end

  @doc "Starts a server holding an empty buffer of `capacity` items."
  @spec start_link(pos_integer()) :: GenServer.on_start()
  def start_link(capacity), do: GenServer.start_link(__MODULE__, new(capacity))

  @doc "Pushes an item to the server's buffer."
  @spec push(GenServer.server(), term()) :: :ok
  def push(server, item), do: GenServer.call(server, {:push, item})

  @doc "Pulls the oldest item from the server's buffer."
  @spec pull(GenServer.server()) :: {:ok, term()} | :empty
  def pull(server), do: GenServer.call(server, :pull)

  @doc "Stops the server."
  @spec stop(GenServer.server()) :: :ok
  def stop(server), do: GenServer.stop(server)

  @impl true
  def init(%__MODULE__{} = buffer), do: {:ok, buffer}

  @impl true
  def handle_call({:push, item}, _from, buffer), do: {:reply, :ok, put(buffer, item)}

  def handle_call(:pull, _from, buffer) do
    {reply, buffer} = take(buffer)
    {:reply, reply, buffer}
  end
end
