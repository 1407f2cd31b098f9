defmodule Ringbus.ErrorTest do
  use ExUnit.Case, async: true

  test "every reason of Ringbus.reason() has a sentence of its own, not the bare atom" do
    reasons = Ringbus.Test.Reasons.all()
    assert :new_incarnation in reasons and :too_large in reasons

    messages =
      for reason <- reasons do
        message = Exception.message(%Ringbus.Error{reason: reason, channel: "e-k"})
        assert message =~ ~s(Ringbus channel "e-k": )
        # The catch-all prints the atom itself.
        refute message =~ inspect(reason), "#{inspect(reason)} has no sentence: #{message}"
        message
      end

    assert messages |> Enum.uniq() |> Enum.count() == Enum.count(reasons)
  end

  test "a term outside the type is still printed" do
    assert Exception.message(%Ringbus.Error{reason: {:odd, 1}, channel: "e-k"}) =~ "{:odd, 1}"
  end
end
