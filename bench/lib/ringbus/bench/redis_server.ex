defmodule Ringbus.Bench.RedisServer do
  @moduledoc """
  A `redis-server` of its own, for the benches that compare with Redis:
  started on a free port of 127.0.0.1 with no persistence, stopped with
  `stop/1`. (The tests have their own, `Ringbus.Test.RedisServer`.)

  `start!/1` takes more `redis-server` arguments, which override those
  defaults (`["--appendonly", "yes", "--appendfsync", "always"]`), and
  `:dir`, the working directory where such a server writes its files
  (default: the system's temp dir).
  """

  @type t :: %{port: :inet.port_number(), os_port: port(), os_pid: non_neg_integer()}

  @doc "Whether `redis-server` is on the PATH."
  @spec available?() :: boolean()
  def available?, do: System.find_executable("redis-server") != nil

  @doc """
  Starts `redis-server` and waits until it listens; raises if it does not.
  `args` are added to its command line (after the defaults, so they win),
  `dir` is its working dir (for an append-only file), and with `core: N` it
  runs pinned to core N (`Ringbus.Bench.Pin`).
  """
  @spec start!(args: [String.t()], dir: Path.t(), core: non_neg_integer() | nil) :: t()
  def start!(opts \\ []) do
    opts = Keyword.validate!(opts, args: [], dir: System.tmp_dir!(), core: nil)
    server = System.find_executable("redis-server") || raise "redis-server is not on the PATH"
    port = free_port()

    args =
      ["--port", "#{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"] ++
        ["--loglevel", "warning", "--dir", opts[:dir]] ++ opts[:args]

    {exe, args} = Ringbus.Bench.Pin.command(opts[:core], server, args)

    os_port =
      Port.open({:spawn_executable, exe}, [:binary, :exit_status, :stderr_to_stdout, args: args])

    {:os_pid, os_pid} = Port.info(os_port, :os_pid)
    redis = %{port: port, os_port: os_port, os_pid: os_pid}

    case await_listening(port, 50) do
      :ok ->
        redis

      :error ->
        stop(redis)
        raise "redis-server did not start listening on port #{port}"
    end
  end

  @doc """
  Stops it and waits for it to exit, 10 s at most. Any process may call it:
  the server outlives the port's owner (it does not read its stdin), so it is
  stopped by its OS pid.
  """
  @spec stop(t()) :: :ok
  def stop(%{os_pid: pid}), do: Ringbus.Bench.OsProcess.stop(pid)

  @doc """
  Deletes `key` with `redis-cli` on the RESP server at `port` (Redis, or
  Ringbus's RESP port); raises `Mix.Error` if redis-cli fails.
  """
  @spec del!(:inet.port_number(), String.t()) :: :ok
  def del!(port, key) do
    case System.cmd("redis-cli", ["-p", "#{port}", "DEL", key], stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, status} -> Mix.raise("redis-cli DEL #{key} exited #{status}: #{out}")
    end
  end

  @doc "A port no one listens on now."
  @spec free_port() :: :inet.port_number()
  def free_port do
    {:ok, listen} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(listen)
    :ok = :gen_tcp.close(listen)
    port
  end

  # Redis takes a moment to listen; bounded by `tries` times 100 ms.
  defp await_listening(_port, 0), do: :error

  defp await_listening(port, tries) do
    case :gen_tcp.connect({127, 0, 0, 1}, port, [], 1_000) do
      {:ok, socket} ->
        :gen_tcp.close(socket)
        :ok

      {:error, _} ->
        receive after: (100 -> :ok)
        await_listening(port, tries - 1)
    end
  end
end
