defmodule Ringbus.Bench.Replication.Window do
  @moduledoc false
  # The send side of a peer's load (`NatsClient`, `OsirisLoad`): at most
  # `run.window` messages unacked, sent until `run.deadline` (monotonic µs)
  # or `run.max` messages, each remembered with its send time until its ack.

  alias Ringbus.Bench.Replication.Samples

  @doc """
  Sends as many new messages as the window has room for, through
  `send.(ids)`, and adds them to `pending` (id => send time in µs). Returns
  `{pending, sent, open?, timeout}`: whether more may be sent, and how long
  to wait for acks in ms (5 s, or once no more may be sent, until 5 s past
  the deadline).
  """
  @spec fill(map(), %{non_neg_integer() => integer()}, non_neg_integer(), (Range.t() -> :ok)) ::
          {map(), non_neg_integer(), boolean(), non_neg_integer()}
  def fill(run, pending, sent, send) do
    now = Samples.now()
    open? = now < run.deadline and sent < run.max

    {pending, sent} =
      if open? and map_size(pending) < run.window do
        n = min(run.window - map_size(pending), run.max - sent)
        ids = sent..(sent + n - 1)
        :ok = send.(ids)
        {Enum.reduce(ids, pending, &Map.put(&2, &1, now)), sent + n}
      else
        {pending, sent}
      end

    timeout = if open?, do: 5_000, else: max(div(run.deadline - now, 1_000), 0) + 5_000
    {pending, sent, open?, timeout}
  end
end
