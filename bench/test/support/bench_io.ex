defmodule Ringbus.Test.BenchIO do
  @moduledoc "Runs a bench quietly for smoke tests."

  import ExUnit.Assertions
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

  @doc """
  Runs `fun` (a bench with `--pin`) quietly, as `run_quietly/1`, and
  asserts that this VM runs as before after it: the same cores, the same
  schedulers online.
  """
  def run_pinned_quietly(fun) do
    {affinity, 0} = System.cmd("taskset", ["-c", "-p", System.pid()])
    schedulers = System.schedulers_online()
    result = run_quietly(fun)
    assert {affinity, 0} == System.cmd("taskset", ["-c", "-p", System.pid()])
    assert System.schedulers_online() == schedulers
    result
  end
end
