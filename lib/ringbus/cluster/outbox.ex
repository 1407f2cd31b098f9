defmodule Ringbus.Cluster.Outbox do
  @moduledoc false
  # What a link holds for the other node: items in arrival order, bounded in
  # bytes. The link cuts a batch from the front when it can send, and puts
  # nothing back: a batch the distribution channel would not take stays here
  # whole until the next try. Pure data, so `outbox_test.exs` tests it as
  # functions.
  #
  # Items bounded by something else (a subscription's batches by its credit,
  # its close and an unsubscribe by one each) go in with `force_push/3` even
  # when the outbox is full, so that a subscription never hangs or loses a
  # batch for want of room.

  @enforce_keys [:max_bytes]
  defstruct max_bytes: nil, queue: :queue.new(), bytes: 0, count: 0

  @type t :: %__MODULE__{
          max_bytes: pos_integer(),
          queue: :queue.queue({term(), non_neg_integer()}),
          bytes: non_neg_integer(),
          count: non_neg_integer()
        }

  @doc "An empty outbox that holds at most `max_bytes`."
  @spec new(pos_integer()) :: t()
  def new(max_bytes), do: %__MODULE__{max_bytes: max_bytes}

  @doc """
  Appends `item` of `bytes`, or returns `:full` when it would pass the
  bound. An empty outbox takes any one item, however large, as a batch
  takes at least one: an item larger than the bound must not wait forever.
  """
  @spec push(t(), term(), non_neg_integer()) :: {:ok, t()} | :full
  def push(%__MODULE__{bytes: held, max_bytes: max}, _item, bytes)
      when held > 0 and held + bytes > max,
      do: :full

  def push(outbox, item, bytes), do: {:ok, force_push(outbox, item, bytes)}

  @doc "Appends `item` whatever the bound (for items bounded elsewhere)."
  @spec force_push(t(), term(), non_neg_integer()) :: t()
  def force_push(%__MODULE__{} = outbox, item, bytes) do
    %{
      outbox
      | queue: :queue.in({item, bytes}, outbox.queue),
        bytes: outbox.bytes + bytes,
        count: outbox.count + 1
    }
  end

  @doc """
  Takes items from the front while they fit in `batch_bytes` (at least one)
  and returns them in order with their bytes, and the rest.
  """
  @spec take(t(), pos_integer()) :: {[term()], non_neg_integer(), t()}
  def take(%__MODULE__{} = outbox, batch_bytes), do: take(outbox, batch_bytes, [], 0)

  defp take(%{queue: queue} = outbox, max, acc, taken) do
    case :queue.out(queue) do
      {{:value, {item, bytes}}, rest} when acc == [] or taken + bytes <= max ->
        outbox = %{outbox | queue: rest, bytes: outbox.bytes - bytes, count: outbox.count - 1}
        take(outbox, max, [item | acc], taken + bytes)

      _ ->
        {:lists.reverse(acc), taken, outbox}
    end
  end

  @doc "The bytes held."
  @spec bytes(t()) :: non_neg_integer()
  def bytes(%__MODULE__{bytes: bytes}), do: bytes

  @doc "Whether it holds `max_bytes` or more (which `force_push/3` allows)."
  @spec full?(t()) :: boolean()
  def full?(%__MODULE__{bytes: bytes, max_bytes: max}), do: bytes >= max

  @doc "Whether nothing is held."
  @spec empty?(t()) :: boolean()
  def empty?(%__MODULE__{count: count}), do: count == 0
end
