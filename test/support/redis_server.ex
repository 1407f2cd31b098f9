defmodule Ringbus.Test.RedisServer do
  @moduledoc """
  A `redis-server` of a test's own, to compare replies with: started on a
  free port of 127.0.0.1 with no persistence, stopped with `stop/1`.
  (The benches keep one of their own under bench/, with more options, so
  that no test depends on a bench module.)
  """

  @type t :: %{port: :inet.port_number(), os_pid: non_neg_integer()}

  @doc "Starts `redis-server` and waits until it listens; raises if it does not."
  @spec start!() :: t()
  def start! do
    server = System.find_executable("redis-server") || raise "redis-server is not on the PATH"
    port = free_port()

    args =
      ["--port", "#{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"] ++
        ["--loglevel", "warning", "--dir", System.tmp_dir!()]

    os_port =
      Port.open({:spawn_executable, server}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: args
      ])

    {:os_pid, os_pid} = Port.info(os_port, :os_pid)
    redis = %{port: port, os_pid: os_pid}

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
  def stop(%{os_pid: pid}) do
    System.cmd("kill", ["#{pid}"], stderr_to_stdout: true)
    await_exit(pid, 200)
  end

  defp await_exit(pid, 0) do
    System.cmd("kill", ["-KILL", "#{pid}"], stderr_to_stdout: true)
    :ok
  end

  defp await_exit(pid, tries) do
    case System.cmd("kill", ["-0", "#{pid}"], stderr_to_stdout: true) do
      {_, 0} ->
        receive after: (50 -> :ok)
        await_exit(pid, tries - 1)

      _gone ->
        :ok
    end
  end

  defp free_port do
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
