defmodule Ringbus.Test.BenchIO do
  @moduledoc "Runs a bench quietly for smoke tests."

  import ExUnit.CaptureIO

  @doc "Runs `fun`, returning `{stdout, stderr}`; its result goes to `Process.put(:results, _)`."
  def run_quietly(fun) do
    parent = self()

    progress =
      capture_io(:stderr, fn ->
        output = capture_io(fn -> Process.put(:results, fun.()) end)
        send(parent, {:output, output})
      end)

    receive do
      {:output, output} -> {output, progress}
    after
      0 -> raise "the bench printed nothing back"
    end
  end
end
