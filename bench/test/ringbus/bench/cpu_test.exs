defmodule Ringbus.Bench.CPUTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.CPU

  doctest CPU

  test "a line that is not a stat line parses to nil" do
    assert CPU.parse("") == nil
    assert CPU.parse("1 (x) S 2 3") == nil
    assert CPU.parse("1 (x) S 1 2 3 4 5 6 7 8 9 10 u 30 20 5 20") == nil
    assert CPU.used(nil, nil, 100) == nil
    assert CPU.children(nil, 100) == nil
  end

  test "the VM's own CPU time grows with work done in it" do
    assert File.exists?("/proc/self/stat"), "CPU figures come from Linux's /proc/self/stat"
    hz = CPU.ticks_per_second()
    before = CPU.sample()
    tick = div(1_000_000, hz)
    deadline = System.monotonic_time(:millisecond) + 10_000
    # Works until the kernel has counted two ticks of it, for at most 10 s.
    spin_until(fn -> CPU.used(before, CPU.sample(), hz).user_us >= 2 * tick end, deadline)

    used = CPU.used(before, CPU.sample(), hz)
    assert used.user_us >= 2 * tick
    assert used.sys_us >= 0
  end

  defp spin_until(done?, deadline) do
    cond do
      done?.() -> :ok
      System.monotonic_time(:millisecond) > deadline -> flunk("no CPU time counted in 10 s")
      true -> Enum.reduce(1..100_000, 0, &(&1 + &2)) && spin_until(done?, deadline)
    end
  end
end
