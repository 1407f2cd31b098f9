defmodule Ringbus.Bench.CPU do
  @moduledoc """
  CPU time of an OS process, user and system apart, as Linux's
  `/proc/PID/stat` gives it, for the benches that report CPU per message.

  `:erlang.statistics(:runtime)` counts user time only, and a server that
  spends a third of its time in the kernel's socket calls would look cheap.
  `/proc/self/stat` read from the BEAM is the whole VM: every scheduler and
  every other thread.

      hz = Ringbus.Bench.CPU.ticks_per_second()
      before = Ringbus.Bench.CPU.sample()
      # ... work ...
      %{user_us: user, sys_us: sys} = Ringbus.Bench.CPU.used(before, Ringbus.Bench.CPU.sample(), hz)

  The kernel counts in clock ticks (`USER_HZ`, usually 100 a second), so a
  figure is good to 10 ms: spread over a run of a second or more, that is
  within a percent or so.

  Where there is no `/proc` (not Linux), `sample/0` returns `nil` and
  `used/3` does too; the benches then print `-`.
  """

  @typedoc "CPU time in clock ticks: the process's own, and its waited-for children's."
  @type sample :: %{
          user: non_neg_integer(),
          sys: non_neg_integer(),
          child_user: non_neg_integer(),
          child_sys: non_neg_integer()
        }

  @typedoc "CPU time used between two samples, in microseconds."
  @type used :: %{user_us: non_neg_integer(), sys_us: non_neg_integer()}

  @doc """
  The CPU time so far of the calling VM (`:self`) or of the OS process
  `os_pid`, or `nil` without `/proc` (or once that process is gone).
  """
  @spec sample(:self | non_neg_integer()) :: sample() | nil
  def sample(os_pid \\ :self) do
    case File.read("/proc/#{os_pid}/stat") do
      {:ok, line} -> parse(line)
      {:error, _} -> nil
    end
  end

  @doc """
  Parses a line of `/proc/PID/stat`: `utime`, `stime`, and `cutime` and
  `cstime` (the CPU time of the children the process has waited for).
  Returns `nil` when the line does not parse.

      iex> Ringbus.Bench.CPU.parse("42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 150 30 20 5 20 0 1 0 99")
      %{user: 150, sys: 30, child_user: 20, child_sys: 5}
  """
  @spec parse(String.t()) :: sample() | nil
  def parse(line) when is_binary(line) do
    # The command name is in parentheses and may hold anything, ") " too:
    # the fields start after the last ") ".
    with [_ | _] = matches <- :binary.matches(line, ") "),
         {at, len} = List.last(matches),
         fields = binary_part(line, at + len, byte_size(line) - at - len),
         [
           _state,
           _ppid,
           _pgrp,
           _session,
           _tty,
           _tpgid,
           _flags,
           _minflt,
           _cminflt,
           _majflt,
           _cmajflt,
           utime,
           stime,
           cutime,
           cstime | _
         ] <- String.split(fields),
         {:ok, [u, s, cu, cs]} <- integers([utime, stime, cutime, cstime]) do
      %{user: u, sys: s, child_user: cu, child_sys: cs}
    else
      _ -> nil
    end
  end

  defp integers(texts) do
    Enum.reduce_while(Enum.reverse(texts), {:ok, []}, fn text, {:ok, acc} ->
      case Integer.parse(text) do
        {n, ""} -> {:cont, {:ok, [n | acc]}}
        _ -> {:halt, :error}
      end
    end)
  end

  @doc """
  The CPU time between two samples, in microseconds, with `hz` ticks a
  second; `nil` if either sample is.

      iex> before = %{user: 10, sys: 2, child_user: 0, child_sys: 0}
      iex> Ringbus.Bench.CPU.used(before, %{before | user: 60, sys: 12}, 100)
      %{user_us: 500_000, sys_us: 100_000}
  """
  @spec used(sample() | nil, sample() | nil, pos_integer()) :: used() | nil
  def used(nil, _after, _hz), do: nil
  def used(_before, nil, _hz), do: nil

  def used(before, later, hz) do
    %{user_us: us(later.user - before.user, hz), sys_us: us(later.sys - before.sys, hz)}
  end

  @doc """
  The CPU time of the children a process waited for, from one sample of its
  stat, in microseconds; `nil` for a `nil` sample.

      iex> Ringbus.Bench.CPU.children(%{user: 1, sys: 1, child_user: 150, child_sys: 30}, 100)
      %{user_us: 1_500_000, sys_us: 300_000}
  """
  @spec children(sample() | nil, pos_integer()) :: used() | nil
  def children(nil, _hz), do: nil

  def children(sample, hz),
    do: %{user_us: us(sample.child_user, hz), sys_us: us(sample.child_sys, hz)}

  @doc """
  The clock ticks a second of `/proc`'s times: `getconf CLK_TCK`, or 100
  (Linux's `USER_HZ` on x86 and arm) when `getconf` is not there.
  """
  @spec ticks_per_second() :: pos_integer()
  def ticks_per_second do
    with path when is_binary(path) <- System.find_executable("getconf"),
         {out, 0} <- System.cmd(path, ["CLK_TCK"]),
         {hz, _} when hz > 0 <- Integer.parse(out) do
      hz
    else
      _ -> 100
    end
  end

  defp us(ticks, hz), do: div(ticks * 1_000_000, hz)
end
