defmodule Ringbus.Bench.OpenLoop.Program do
  @moduledoc """
  The C program of `Ringbus.Bench.OpenLoop`, `bench/c/openloop.c`: the
  open-loop generator (`gen`) and the bare RESP responder (`floor`). Its
  header comment says what each does and prints.

  `build!/1` compiles it with Debian's gcc into the build directory
  (`_build/bench/openloop` for the bench) when the binary is missing or
  older than the source, so a checkout needs nothing but `gcc`:

      exe = Ringbus.Bench.OpenLoop.Program.build!()
      floor = Ringbus.Bench.OpenLoop.Program.start_floor!(exe, nil)
      args = ~w(--rate 1000 --seconds 1 --port) ++ [Integer.to_string(floor.port)]
      {:ok, result} = Ringbus.Bench.OpenLoop.Program.generate(exe, args, nil)
      result.p999_us
      Ringbus.Bench.OpenLoop.Program.stop_floor(floor)
  """

  alias Ringbus.Bench.Pin
  alias Ringbus.Test.OsProcess
  alias Ringbus.Bench.OpenLoop.Result

  @type floor :: %{port: :inet.port_number(), os_port: port(), os_pid: non_neg_integer()}

  @cflags ~w(-O2 -Wall -Wextra -std=gnu11)
  @start_timeout 10_000

  @doc "The C source."
  @spec source() :: Path.t()
  def source, do: Path.join(Path.dirname(Mix.Project.project_file()), "bench/c/openloop.c")

  @doc """
  The path of the compiled program, built first when it is missing or older
  than its source; raises `Mix.Error` when it cannot be built. Options:

    * `:source` - the C file. Default `source/0`.
    * `:out` - the binary. Default `openloop` in `Mix.Project.build_path/0`.
    * `:cc` - the compiler's path, or `nil` when there is none. Default:
      `gcc` on the PATH.
  """
  @spec build!(keyword()) :: Path.t()
  def build!(opts \\ []) do
    opts =
      Keyword.validate!(opts,
        source: source(),
        out: Path.join(Mix.Project.build_path(), "openloop"),
        cc: System.find_executable("gcc")
      )

    %{source: source, out: out} = Map.new(opts)

    if fresh?(out, source) do
      out
    else
      cc =
        opts[:cc] ||
          Mix.raise(
            "gcc is not on the PATH: the open-loop bench compiles #{Path.relative_to_cwd(source)} " <>
              "with it; install it with `apt-get install gcc`"
          )

      File.mkdir_p!(Path.dirname(out))
      # Built beside, then renamed: a run that reads the binary never sees half of it.
      tmp = "#{out}.#{System.unique_integer([:positive])}.tmp"

      case System.cmd(cc, @cflags ++ ["-o", tmp, source, "-lm"], stderr_to_stdout: true) do
        {_, 0} ->
          File.rename!(tmp, out)
          out

        {output, status} ->
          File.rm(tmp)
          Mix.raise("#{Path.basename(cc)} failed (exit #{status}) on #{source}:\n#{output}")
      end
    end
  end

  defp fresh?(out, source) do
    case {File.stat(out, time: :posix), File.stat(source, time: :posix)} do
      # Whole seconds: a binary of the source's own second may predate the edit.
      {{:ok, built}, {:ok, written}} -> built.mtime > written.mtime
      _ -> false
    end
  end

  @doc """
  Runs the generator with `args` (those of `openloop gen`, see the C
  source), on `core` or unpinned; returns its figures (`Result.parse/1`),
  or `{:error, output}` when it failed (a connection refused or closed, a
  reply it could not read).
  """
  @spec generate(Path.t(), [String.t()], Pin.core()) :: {:ok, Result.t()} | {:error, String.t()}
  def generate(exe, args, core) do
    {cmd, args} = Pin.command(core, exe, ["gen" | args])

    case System.cmd(cmd, args, stderr_to_stdout: true) do
      {output, 0} ->
        case output |> String.split("\n", trim: true) |> Enum.find(&(&1 =~ ~r/^requests=/)) do
          nil -> {:error, output}
          line -> Result.parse(line)
        end

      {output, _status} ->
        {:error, String.trim(output)}
    end
  end

  @doc "Starts the floor on a free port of 127.0.0.1, on `core` or unpinned."
  @spec start_floor!(Path.t(), Pin.core()) :: floor()
  def start_floor!(exe, core) do
    {cmd, args} = Pin.command(core, exe, ["floor", "--port", "0"])

    os_port =
      Port.open({:spawn_executable, cmd}, [:binary, :exit_status, {:line, 256}, args: args])

    {:os_pid, os_pid} = Port.info(os_port, :os_pid)

    receive do
      {^os_port, {:data, {:eol, "READY port=" <> port}}} ->
        %{port: String.to_integer(port), os_port: os_port, os_pid: os_pid}

      {^os_port, {:exit_status, status}} ->
        Mix.raise("openloop floor exited #{status} before it listened")
    after
      @start_timeout ->
        OsProcess.stop(os_pid)
        Mix.raise("openloop floor did not listen within #{@start_timeout} ms")
    end
  end

  @doc "Stops the floor and waits for it to exit."
  @spec stop_floor(floor()) :: :ok
  def stop_floor(%{os_port: os_port, os_pid: os_pid}) do
    OsProcess.stop(os_pid)

    receive do
      {^os_port, {:exit_status, _}} -> :ok
    after
      1_000 -> :ok
    end
  end
end
