defmodule Ringbus.Channel.GivenIds do
  @moduledoc false
  # A memory channel's pushes that answer their Redis stream ID (RESP's
  # XADD: `*`, `ms-n`, `ms-*`), and XSETID. A client's ID is refused unless
  # above the channel's last ID. Its seq is reserved while the channel's ID
  # stamp is held (`Ids.explicit/3`), so IDs still increase in seq order:
  # every ID reserved before is below it and its seq takes head only from a
  # value read after them, and every ID reserved after waits for the stamp.
  # (A replicated channel's machine decides the same: `Ringbus.Replica.StreamIds`.)

  alias Ringbus.Channel
  alias Ringbus.Channel.{Ids, Ring}

  @doc """
  Pushes `payload` under `given` (`t:Ids.given/0`): `{:ok, seq, id}`, or a
  refusal: the ring's (`:full`, `:too_large`, counted as a push counts
  them), Redis's (`t:Ids.error/0`), or, for a client's ID, `:stalled` when
  a reader gave up on the seq before it was stored (the ID cannot move to
  a fresh seq: later ones may be out).
  """
  @spec push(Channel.t(), binary(), Ids.given()) ::
          {:ok, non_neg_integer(), Ids.id()}
          | {:error, :full | :too_large | :stalled | Ids.error()}
  def push(ch, payload, :auto) do
    case Ring.reserve_for(ch, 1, byte_size(payload)) do
      {:ok, seq, {_at, id} = stamp} ->
        # A seq a reader gave up on meanwhile: pushed again, under a fresh one.
        case Ring.commit(ch, seq, payload, stamp, &push(&1, &2, :auto)) do
          {:ok, ^seq} -> {:ok, seq, id}
          again -> again
        end

      {:error, :ids_exhausted} ->
        {:error, :exhausted}

      {:error, reason} ->
        Ring.refuse(ch, 1, reason)
    end
  end

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
  Sets the channel's last ID (XSETID): refused `:below_top` when `id` is
  below the ID of the newest message held, as Redis refuses it. Checked
  while every reservation waits. A push whose ID was reserved before and
  whose seq is not yet taken is not seen (a window of a few instructions):
  a caller that lowers the last ID while pushing elsewhere may see a later
  ID below it.
  """
  @spec set(Channel.t(), Ids.id()) :: :ok | {:error, :below_top}
  def set(ch, id) do
    Ids.set(ch.ids, id, fn last ->
      # At or above the last ID is above every ID given.
      if Ids.above?(last, id) and below_top?(ch, id, last),
        do: {:error, :below_top},
        else: :ok
    end)
  end

  # Whether `id` is below the newest message held; a newest seq not stored
  # yet is taken to be at the last ID.
  defp below_top?(ch, id, last) do
    next = Ring.next_seq(ch)

    next > Ring.first_seq(ch) and Ids.above?(Ring.stored_id(ch, next - 1) || last, id)
  end
end
