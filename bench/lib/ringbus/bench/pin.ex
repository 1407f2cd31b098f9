defmodule Ringbus.Bench.Pin do
  @moduledoc """
  Per-core mode of the benches (`--pin`): the server under test on one core,
  the load generator on another, so that neither steals the other's CPU.

  A pinned command runs under `taskset -c CORE` (util-linux); a pinned BEAM
  also runs one scheduler (`+S 1`), one dirty CPU scheduler (`+SDcpu 1`)
  and one dirty I/O scheduler (`+SDio 1`, the least the VM allows).

      iex> Ringbus.Bench.Pin.command(nil, "/usr/bin/redis-server", ["--port", "0"])
      {"/usr/bin/redis-server", ["--port", "0"]}
      iex> {_taskset, args} = Ringbus.Bench.Pin.command(0, "/usr/bin/redis-server", ["--port", "0"])
      iex> args
      ["-c", "0", "/usr/bin/redis-server", "--port", "0"]
  """

  @typedoc "A core to pin to, or `nil` for none (the shared mode)."
  @type core :: non_neg_integer() | nil

  @doc "The core of the server under test."
  @spec server_core() :: 0
  def server_core, do: 0

  @doc "The core of the load generator."
  @spec generator_core() :: 1
  def generator_core, do: 1

  @doc "The emulator flags of a BEAM pinned to one core."
  @spec erl_flags() :: String.t()
  def erl_flags, do: "+S 1 +SDcpu 1 +SDio 1"

  @doc "The mode a row ran in, as the tables and CSVs name it."
  @spec mode(core()) :: String.t()
  def mode(nil), do: "shared"
  def mode(_core), do: "pinned"

  @doc """
  Raises `Mix.Error` unless pinning can work here: `taskset` on the PATH and
  both cores allowed to this process.
  """
  @spec check!() :: :ok
  def check! do
    taskset = System.find_executable("taskset") || Mix.raise("--pin needs taskset (util-linux)")

    for core <- [server_core(), generator_core()] do
      case System.cmd(taskset, ["-c", "#{core}", "true"], stderr_to_stdout: true) do
        {_, 0} -> :ok
        {out, _} -> Mix.raise("--pin: cannot run on core #{core}: #{String.trim(out)}")
      end
    end

    :ok
  end

  @doc "The executable and arguments that run `exe args` on `core` (as is for `nil`)."
  @spec command(core(), String.t(), [String.t()]) :: {String.t(), [String.t()]}
  def command(nil, exe, args), do: {exe, args}

  def command(core, exe, args) when is_integer(core) and core >= 0 do
    taskset = System.find_executable("taskset") || Mix.raise("--pin needs taskset (util-linux)")
    {taskset, ["-c", "#{core}", exe | args]}
  end

  @doc """
  Runs `fun` with this VM on `core` alone, one scheduler and one dirty CPU
  scheduler online, and puts both back after; prints a line, starting with
  `label`, that says so. With `nil`, just runs `fun`.
  """
  @spec on_core(core(), String.t(), (() -> result)) :: result when result: term()
  def on_core(nil, _label, fun), do: fun.()

  def on_core(core, label, fun) do
    os_pid = System.pid()
    {out, 0} = System.cmd("taskset", ["-c", "-p", os_pid])
    [_, cpus] = Regex.run(~r/current affinity list: (\S+)/, out)
    {_, 0} = System.cmd("taskset", ["-a", "-c", "-p", "#{core}", os_pid])
    schedulers = :erlang.system_flag(:schedulers_online, 1)
    dirty = :erlang.system_flag(:dirty_cpu_schedulers_online, 1)
    {now, 0} = System.cmd("taskset", ["-c", "-p", os_pid])
    [_, pinned] = Regex.run(~r/current affinity list: (\S+)/, now)

    IO.puts(
      "#{label}: this VM on core #{pinned}, " <>
        "#{System.schedulers_online()} scheduler online (was #{cpus} and #{schedulers})"
    )

    try do
      fun.()
    after
      :erlang.system_flag(:dirty_cpu_schedulers_online, dirty)
      :erlang.system_flag(:schedulers_online, schedulers)
      System.cmd("taskset", ["-a", "-c", "-p", cpus, os_pid])
    end
  end
end
