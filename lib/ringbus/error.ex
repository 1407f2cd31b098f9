defmodule Ringbus.Error do
  @moduledoc """
  Raised by the `!` functions of `Ringbus` when an operation returns an error.

  `:reason` is the atom the non-raising function returns in
  `{:error, reason}`; `:channel` names the channel.
  """

  defexception [:reason, :channel]

  @type t :: %__MODULE__{reason: atom(), channel: term()}

  @impl true
  def message(%__MODULE__{reason: reason, channel: channel}) do
    "Ringbus channel #{inspect(channel)}: " <> describe(reason)
  end

  defp describe(:no_channel), do: "no such channel"
  defp describe(:exists), do: "a channel of that name exists already"
  defp describe(:full), do: "the channel is full and rejects pushes"
  defp describe(:too_large), do: "the payload is larger than the channel's max_bytes"
  defp describe(:no_subscription), do: "the subscription has ended"
  defp describe(:node_down), do: "the node that holds the channel is not connected"
  defp describe(:node_busy), do: "the node that holds the channel is busy; nothing was done"

  defp describe(:timeout),
    do: "no answer in time from the channel's node or replicas; it may or may not have been done"

  defp describe(:stale_tag), do: "the producer tag is older than the channel remembers"

  defp describe(:new_incarnation),
    do: "the channel was created again since the incarnation given; its seqs start anew"

  defp describe(other), do: inspect(other)
end
