defmodule Ringbus.Client.Error do
  @moduledoc """
  Raised by the `!` functions of `Ringbus.Client`.

  `:reason` is what the non-raising function returns in `{:error, reason}`:
  an error of the protocol (`:no_channel`, `:exists`, `:full`, ..., see
  `Ringbus.Wire.ErrorCode`), or one of the client's own (`:closed`,
  `:timeout`, `:backpressure`, `:frame_too_large`), or a socket error
  (`:econnrefused`, ...).
  """

  alias Ringbus.Wire.ErrorCode

  defexception [:reason]

  @type t :: %__MODULE__{reason: term()}

  @impl true
  def message(%__MODULE__{reason: reason}), do: "Ringbus client: " <> describe(reason)

  defp describe(:closed), do: "the connection is closed"
  defp describe(:timeout), do: "no answer within the timeout"
  defp describe(:backpressure), do: "too many pushes are waiting for their acks"
  defp describe(:frame_too_large), do: "the request is larger than the server's max frame size"

  defp describe(reason) when is_atom(reason) do
    if ErrorCode.known?(reason),
      do: "#{ErrorCode.describe(reason)} (#{reason}, code #{ErrorCode.code(reason)})",
      else: reason |> :inet.format_error() |> List.to_string()
  end

  defp describe(reason), do: inspect(reason)
end
