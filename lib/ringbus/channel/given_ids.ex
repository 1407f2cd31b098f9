defmodule Ringbus.Channel.GivenIds do
  @moduledoc false
  # A push under the Redis stream ID a client gave (RESP's XADD `ms-n` or
  # `ms-*`), refused unless above the channel's last ID. Its seq is
  # reserved while the channel's ID stamp is held (`Ids.explicit/3`), so
  # IDs still increase in seq order: every ID reserved before is below it
  # and its seq takes head only from a value read after them, and every ID
  # reserved after waits for the stamp.

  alias Ringbus.Channel
  alias Ringbus.Channel.{Ids, Ring}

  @doc """
  Pushes `payload` under `given` (`{ms, n}` or `{ms, :auto}`): `{:ok,
  seq, id}`, or a refusal: the ring's (`:full`, `:too_large`, counted as
  a push counts them), Redis's (`t:Ids.error/0`), or `:stalled` when a
  reader gave up on the seq before it was stored (the ID cannot move to a
  fresh seq: later ones may be out).
  """
  @spec push(Channel.t(), binary(), {non_neg_integer(), non_neg_integer() | :auto}) ::
          {:ok, non_neg_integer(), Ids.id()}
          | {:error, :full | :too_large | :stalled | Ids.error()}
  def push(ch, payload, given) do
    claim = fn id ->
      # The reservation takes `id` in place of one from the stamp.
      with {:ok, seq, stamp} <-
             Ring.reserve_for(%{ch | ids: {:given, id}}, 1, byte_size(payload)),
           do: {:ok, {seq, stamp}}
    end

    case Ids.explicit(ch.ids, given, claim) do
      {:ok, id, {seq, stamp}} ->
        with {:ok, seq} <- Ring.commit(ch, seq, payload, stamp, nil), do: {:ok, seq, id}

      {:error, reason} when reason in [:full, :too_large] ->
        Ring.refuse(ch, 1, reason)

      {:error, _} = error ->
        error
    end
  end

  @doc """
  Sets the channel's last ID to `id` (Redis's XSETID): `:ok`, or `{:error,
  :smaller}` when the newest message held has a higher ID. Pushes after
  it take IDs above `id`.
  """
  @spec set(Channel.t(), Ids.id()) :: :ok | {:error, :smaller}
  def set(ch, id) do
    {first, next} = {Ring.first_seq(ch), Ring.next_seq(ch)}
    newest = if next > first, do: Ring.stored_id(ch, next - 1)

    if newest != nil and Ids.above?(newest, id),
      do: {:error, :smaller},
      else: Ids.set(ch.ids, id)
  end
end
