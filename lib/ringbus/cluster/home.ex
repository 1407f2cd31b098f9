defmodule Ringbus.Cluster.Home do
  @moduledoc false
  # What another node asks of a channel homed here, run by the link that
  # brought the request, on the channel layer directly, as `Ringbus` runs it
  # for a local caller. Creates and deletes are the directory's, which
  # answers them in its own time; everything else answers at once.
  #
  # The link is the subscriber of every subscription a remote node takes
  # here: the subscription sends it the batches, which it forwards in its
  # next batch to the node of the real subscriber. So a subscription ends
  # when its link does, as a local one ends with its subscriber.

  alias Ringbus.Store
  alias Ringbus.Channel.{Producers, Ring, Subscription}

  @typedoc "A request from another node, as `Ringbus.Cluster.Router` sends it."
  @type op ::
          {:push, binary()}
          | {:push_many, [binary()], non_neg_integer(), non_neg_integer()}
          | {:push_run, [binary()], pos_integer(), non_neg_integer()}
          | {:push_tagged, {term(), integer()} | nil, [binary()], non_neg_integer(),
             non_neg_integer()}
          | {:push_batches, [{[binary()], non_neg_integer(), non_neg_integer()}]}
          | :pull
          | {:read, non_neg_integer(), non_neg_integer()}
          | {:read, non_neg_integer(), non_neg_integer(), pos_integer()}
          | :len
          | :info
          | {:subscribe, keyword()}
          | {:create, keyword()}
          | :delete

  @doc """
  Runs `op` on channel `name` for `link`: `{:reply, answer}`, or
  `{:directory, request}` when the directory must answer it.
  """
  @spec run(term(), op(), pid()) :: {:reply, term()} | {:directory, term()}
  def run(name, {:create, opts}, _link), do: {:directory, {:create, name, opts}}
  def run(name, :delete, _link), do: {:directory, {:delete, name}}

  def run(name, op, link) do
    case Store.fetch(name) do
      {:ok, channel} -> {:reply, run_on(channel, op, link)}
      error -> {:reply, error}
    end
  rescue
    # The channel was deleted while the request ran.
    ArgumentError -> {:reply, {:error, :no_channel}}
  end

  defp run_on(channel, {:push, payload}, _link), do: Ring.push(channel, payload)

  defp run_on(channel, {:push_many, payloads, count, bytes}, _link),
    do: Ring.push_measured(channel, payloads, count, bytes)

  defp run_on(channel, {:push_run, payloads, count, bytes}, _link),
    do: Ring.push_run(channel, payloads, count, bytes)

  # A producer tag is checked here, at the home, so a resend after :timeout
  # finds the tag its first send stored.
  defp run_on(channel, {:push_tagged, tag, payloads, count, bytes}, _link),
    do: Producers.push_tagged(channel, tag, payloads, count, bytes)

  defp run_on(channel, {:push_batches, batches}, _link),
    do: {:ok, Ring.push_batches(channel, batches)}

  defp run_on(channel, :pull, _link), do: Ring.pull(channel)

  defp run_on(channel, {:read, from, max}, _link) do
    {messages, _count, lost, _next} = Ring.read(channel, from, max)
    {:ok, messages, lost}
  end

  defp run_on(channel, {:read, from, max, incarnation}, link) do
    with :ok <- Ring.check_incarnation(channel, incarnation),
         do: run_on(channel, {:read, from, max}, link)
  end

  defp run_on(channel, :len, _link), do: Ring.len(channel)
  defp run_on(channel, :info, _link), do: {:ok, Ring.info(channel)}
  defp run_on(channel, {:subscribe, opts}, link), do: Subscription.start(channel, link, opts)

  @doc """
  Ends a subscription homed here without waiting for it: it may have a
  backlog to get through first, and the link must not wait on it.
  """
  @spec unsubscribe(Subscription.t()) :: :ok
  def unsubscribe(sub) do
    spawn(fn -> Subscription.stop(sub) end)
    :ok
  end

  @doc "Returns credit to a subscription homed here."
  @spec ack(Subscription.t(), pos_integer()) :: :ok
  def ack(sub, count) do
    Subscription.ack(sub, count)
    :ok
  end

  @doc "The payload bytes an answer carries, to bound what a link holds."
  @spec answer_bytes(term()) :: non_neg_integer()
  def answer_bytes({:ok, messages, _lost}) when is_list(messages), do: elem(measure(messages), 1)
  def answer_bytes({:ok, _seq, payload}) when is_binary(payload), do: byte_size(payload)
  def answer_bytes(_answer), do: 0

  @doc "How many messages `[{seq, payload}]` holds, and their payload bytes, in one pass."
  @spec measure([{non_neg_integer(), binary()}]) :: {non_neg_integer(), non_neg_integer()}
  def measure(messages), do: measure(messages, 0, 0)

  defp measure([{_, payload} | rest], n, bytes),
    do: measure(rest, n + 1, bytes + byte_size(payload))

  defp measure([], n, bytes), do: {n, bytes}
end
