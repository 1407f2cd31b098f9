defmodule Ringbus.Test.RedisServer do
  @moduledoc """
  A `redis-server` of its own, to compare replies with: started on a free
  port of 127.0.0.1 with no persistence, stopped with `stop/1`. The benches
  compile this file with theirs and start it through
  `Ringbus.Bench.RedisServer`, which adds pinning to a core.

  `start!/1` takes more `redis-server` arguments, which override those
  defaults (`["--appendonly", "yes", "--appendfsync", "always"]`), `:dir`,
  the working directory where such a server writes its files (default: the
  system's temp dir), and `:command`, a function given the executable and
  its arguments that returns those to run (default: as they are).
  """

  @type t :: %{port: :inet.port_number(), os_port: port(), os_pid: non_neg_integer()}

  @type option ::
          {:args, [String.t()]}
          | {:dir, Path.t()}
          | {:command, (String.t(), [String.t()] -> {String.t(), [String.t()]})}

  @doc "Starts `redis-server` and waits until it listens; raises if it does not."
  @spec start!([option()]) :: t()
  def start!(opts \\ []) do
    opts = Keyword.validate!(opts, args: [], dir: System.tmp_dir!(), command: &{&1, &2})

    server = System.find_executable("redis-server") || raise "redis-server is not on the PATH"
    port = free_port()

    args =
      ["--port", "#{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"] ++
        ["--loglevel", "warning", "--dir", opts[:dir]] ++ opts[:args]

    {exe, args} = opts[:command].(server, args)

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
  Stops it (SIGTERM, then SIGKILL after 10 s) and returns once it has
  exited. Any process may call it: the server outlives the port's owner (it
  does not read its stdin), so it is stopped by its OS pid.
  """
  @spec stop(t()) :: :ok
  def stop(%{os_pid: pid}), do: Ringbus.Test.OsProcess.stop(pid)

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
