defmodule Ringbus.Test.OsProcess do
  @moduledoc """
  Stops an OS process a test or bench started, by its pid: SIGTERM, then a
  wait of up to 10 s for it to exit, then SIGKILL. (The benches compile this
  file with theirs.)
  """

  @tries 200
  @every_ms 50

  @doc "Stops `pid` and returns once it has exited."
  @spec stop(non_neg_integer()) :: :ok
  def stop(pid) do
    System.cmd("kill", ["#{pid}"], stderr_to_stdout: true)
    await_exit(pid, @tries)
  end

  defp await_exit(pid, 0) do
    System.cmd("kill", ["-KILL", "#{pid}"], stderr_to_stdout: true)
    :ok
  end

  defp await_exit(pid, tries) do
    case System.cmd("kill", ["-0", "#{pid}"], stderr_to_stdout: true) do
      {_, 0} ->
        receive after: (@every_ms -> :ok)
        await_exit(pid, tries - 1)

      _gone ->
        :ok
    end
  end
end
