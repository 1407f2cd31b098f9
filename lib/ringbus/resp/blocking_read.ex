defmodule Ringbus.Resp.BlockingRead do
  @moduledoc false
  # How XREAD BLOCK and XREADGROUP BLOCK wait: a channel subscription to
  # each stream read (`Ringbus.subscribe/2`), whose batches come to the
  # connection's process as `{:ringbus, sub, messages, lost}`. `block/4`
  # returns `{:block, block, session}`; `Ringbus.Resp.Session` keeps the
  # block and hands each batch to `block.module.woken/5`, the waiting
  # command's own handler, which answers or waits on. No polling, and no
  # process in between.

  alias Ringbus.Resp.{Errors, Keys}
  alias Ringbus.Server.Directory

  # Entries a waiting read takes at once, when it has no COUNT.
  @block_batch 1_000

  @doc """
  Waits for the next entry of any stream: a subscription to each, from
  the seq given (`{key, from}`). A missing stream is made (as XADD would
  make it), so that an XADD that comes later finds the reader waiting.
  `block` is the wait's state, to which the subscriptions are added:
  `subs`, sub => key (those it has already are kept).
  """
  def block(starts, count, block, s) do
    batch = if count > 0, do: min(count, @block_batch), else: @block_batch

    result =
      Enum.reduce_while(starts, {:ok, %{}}, fn {key, from}, {:ok, subs} ->
        case subscribe(key, from, batch, s) do
          {:ok, sub} -> {:cont, {:ok, Map.put(subs, sub, key)}}
          {:error, reply} -> {:halt, {:error, reply, subs}}
        end
      end)

    case result do
      {:ok, subs} ->
        {:block, Map.update(block, :subs, subs, &Map.merge(&1, subs)), s}

      {:error, reply, subs} ->
        Enum.each(Map.keys(subs), &Ringbus.unsubscribe/1)
        {reply, s}
    end
  end

  defp subscribe(key, from, batch, s) do
    opts = [from: from, max_credit: batch, max_batch: batch, via: :resp]

    case Ringbus.subscribe(key, opts) do
      {:ok, sub} ->
        {:ok, sub}

      {:error, :no_channel} ->
        if Keys.allowed?(s, :write, key) do
          case Keys.create(key, s) do
            :ok -> subscribe(key, from, batch, s)
            {:error, reason} -> {:error, create_error(key, reason)}
          end
        else
          {:error, Errors.no_permission()}
        end

      {:error, reason} ->
        {:error, Errors.reply(reason, key)}
    end
  end

  @doc """
  Ends a wait: its subscriptions, and its registration as a waiter on a
  group (`block.watch`, `{key, group}` pairs, for XREADGROUP).
  """
  def release(block) do
    Enum.each(Map.keys(block.subs), &Ringbus.unsubscribe/1)
    for {key, group} <- Map.get(block, :watch, []), do: Directory.unwait_group(key, group)
    :ok
  end

  @doc """
  A subscription of the wait has ended for `reason`, not for the stream's
  deletion: the wait goes on with the others, and answers null when none
  is left.
  """
  def drop(block, sub, s) do
    block = %{block | subs: Map.delete(block.subs, sub)}
    if map_size(block.subs) == 0, do: {:reply, :null_array, s}, else: {:wait, block}
  end

  @doc "A BLOCK argument as a timeout: 0 waits for ever."
  def timeout(0), do: :infinity
  def timeout(ms), do: ms

  defp create_error(key, :no_create), do: Errors.no_create(key)
  defp create_error(key, reason), do: Errors.reply(reason, key)
end
