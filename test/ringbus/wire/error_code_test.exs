defmodule Ringbus.Wire.ErrorCodeTest do
  # The binary protocol's side of the channel API's errors: every reason a
  # `Ringbus` function returns has a request error code, so that the server
  # never fails to encode one, and the code decodes back to the reason.
  use ExUnit.Case, async: true

  alias Ringbus.Wire.ErrorCode

  test "every reason of Ringbus.reason() has a request error code of its own" do
    reasons = Ringbus.Test.Reasons.all()
    assert :timeout in reasons and :node_busy in reasons and :no_channel in reasons

    codes =
      for reason <- reasons do
        assert ErrorCode.known?(reason), "#{inspect(reason)} has no wire error code"
        code = ErrorCode.code(reason)
        # A request error: the connection stays open.
        refute ErrorCode.closes_connection?(reason), "#{inspect(reason)} closes the connection"
        assert ErrorCode.reason(code) == reason
        code
      end

    assert codes |> Enum.uniq() |> Enum.count() == Enum.count(reasons)
  end

  test "the unknown outcome has its own code, which says so" do
    assert ErrorCode.code(:timeout) == 111
    assert ErrorCode.describe(:timeout) =~ "may or may not have been carried out"
    assert ErrorCode.describe(:node_busy) =~ "not carried out"
  end
end
