defmodule Ringbus.Test.RedisTools do
  @moduledoc """
  Runs Debian's Redis clients against a server: `redis-cli` (redis-tools)
  and Python scripts with redis-py (python3-redis), which `bin/test`
  installs when they are missing. Every run is bounded in time.
  """

  @timeout_s "20"

  @doc "Runs `redis-cli -p port args...`; returns `{output, status}`."
  def cli(port, args, opts \\ []) do
    System.cmd("timeout", [@timeout_s, redis_cli(), "-p", "#{port}" | args], opts)
  end

  @doc "The path of `redis-cli`; raises, naming its package, when it is missing."
  def redis_cli, do: Ringbus.Test.Debian.executable!("redis-cli", "redis-tools")

  @doc "Like `cli/3`, but its output alone, and raises unless it exits 0."
  def cli!(port, args, opts \\ []) do
    {out, 0} = cli(port, args, opts)
    out
  end

  @doc "The Python with redis-py: Debian's, whose python3-redis it imports."
  def python do
    Enum.find(["/usr/bin/python3", System.find_executable("python3")], fn path ->
      path != nil and
        match?({_, 0}, System.cmd(path, ["-c", "import redis"], stderr_to_stdout: true))
    end) || raise "no python3 imports redis: install Debian's python3-redis"
  end

  @doc "Runs a Python script with `args` in `sys.argv[1:]`; returns its output, raising unless it exits 0."
  def python!(script, args) do
    case System.cmd("timeout", [@timeout_s, python(), "-c", script | args], stderr_to_stdout: true) do
      {out, 0} -> out
      {out, status} -> raise "python exited #{status}: #{out}"
    end
  end
end
