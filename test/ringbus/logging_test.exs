defmodule Ringbus.LoggingTest do
  # The console format config/config.exs gives every environment, the
  # release's included: one line per entry, none blank between them.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  require Logger

  test "log entries follow each other with no blank line" do
    log =
      capture_log(fn ->
        Logger.warning("first entry")
        Logger.warning("second entry")
        Logger.flush()
      end)

    assert log =~ ~r/\[warning\] first entry\n[^\n]*\[warning\] second entry\n\z/
    refute log =~ "\n\n"
    refute String.starts_with?(log, "\n")
  end
end
