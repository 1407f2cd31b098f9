defmodule Ringbus.Test.Eventually do
  @moduledoc "Polling for tests that wait on something another process does in its own time."

  @doc "Calls `check` every 5 ms until it returns true, `tries` times at most; returns the last result."
  @spec eventually((() -> boolean()), non_neg_integer()) :: boolean()
  def eventually(check, tries \\ 400) do
    cond do
      check.() -> true
      tries == 0 -> false
      true -> Process.sleep(5) && eventually(check, tries - 1)
    end
  end
end
