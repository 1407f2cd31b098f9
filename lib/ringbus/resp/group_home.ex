defmodule Ringbus.Resp.GroupHome do
  @moduledoc false
  # Where the consumer group commands run their work: at the node that
  # homes the stream, on its group table (`Ringbus.Resp.Groups`), so that
  # a group is one group across the cluster, whichever node a consumer is
  # connected to. `run/5` goes through `Ringbus.at_home/2`: in the caller
  # when this node homes the stream, else in the link at the home, which
  # runs it at once (ETS and the local ring only: nothing there waits). A
  # cluster error answers as any call on another node's stream does:
  # `-TRYAGAIN` or `-CLUSTERDOWN` (not done), `-TIMEOUT` (may be done).

  alias Ringbus.Resp.{Entry, Errors, Groups}

  # Payload bytes a read answers through the link: a quarter of its default
  # `:max_buffer_bytes`, as the cluster cuts its own reads, so the answer fits.
  @remote_bytes 1024 * 1024

  @doc """
  Runs `module.function(table, key, tag, args...)` at the home of stream
  `key`, `tag` being the tag of its IDs there (`Ringbus.Resp.Entry.tag/1`
  of the incarnation the groups are of), and returns what it returns, or
  `none` when no stream is named `key`.
  A reply it ends with (`Errors.fail!/2`) ends the command here too.
  """
  @spec run(binary(), module(), atom(), list(), term()) :: term()
  def run(key, module, function, args, none),
    do: run(key, {module, function, args}, none, false)

  @doc """
  `run/5` for a read of entries: the function gets one more argument, the
  payload bytes its answer may carry (`:infinity` here, a bound through
  the link). It returns at least one entry, and leaves the rest for later.
  """
  @spec read(binary(), module(), atom(), list(), term()) :: term()
  def read(key, module, function, args, none),
    do: run(key, {module, function, args}, none, true)

  defp run(key, {module, function, args}, none, budget?) do
    origin = if budget?, do: node()

    case Ringbus.at_home(key, {__MODULE__, :at_home, [origin, module, function, args]}) do
      {:ok, {:ok, result}} -> result
      {:ok, {:failed, reply}} -> Errors.answer!(reply)
      {:error, :no_channel} -> none
      {:error, reason} -> Errors.fail!(reason, key)
    end
  end

  @doc "The first of `messages` and those after it that fit in `bytes` of payloads."
  @spec cut([{Ringbus.seq(), binary()}], non_neg_integer() | :infinity) ::
          [{Ringbus.seq(), binary()}]
  def cut(messages, :infinity), do: messages

  def cut([{_, payload} = first | rest], bytes),
    do: cut(rest, bytes - byte_size(payload), [first])

  def cut([], _bytes), do: []

  defp cut([{_, payload} = message | rest], bytes, acc) when byte_size(payload) <= bytes,
    do: cut(rest, bytes - byte_size(payload), [message | acc])

  defp cut(_rest, _bytes, acc), do: :lists.reverse(acc)

  @doc false
  # At the home, with the stream's name and incarnation (`Ringbus.at_home/2`).
  def at_home(key, incarnation, origin, module, function, args) do
    t = Groups.table()
    Groups.fresh(t, key, incarnation)

    args =
      case origin do
        nil -> args
        here when here == node() -> args ++ [:infinity]
        _other -> args ++ [@remote_bytes]
      end

    {:ok, apply(module, function, [t, key, Entry.tag(incarnation) | args])}
  catch
    :throw, {Errors, reply} -> {:failed, reply}
  end
end
