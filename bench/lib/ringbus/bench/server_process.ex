defmodule Ringbus.Bench.ServerProcess do
  @moduledoc """
  A server under test in a BEAM of its own (an OS process), for the benches'
  per-core mode (`Ringbus.Bench.Pin`) and the latency bench: a
  `Ringbus.Server` (binary port and RESP port), or the bare `PING`
  responder (`Ringbus.Bench.Resp.Bare`).

      server = Ringbus.Bench.ServerProcess.start!(:ringbus, core: 0)
      server.ports.resp
      :ok = Ringbus.Bench.ServerProcess.command!(server, "create ingest.x 1000 drop_oldest")
      Ringbus.Bench.ServerProcess.stop(server)

  The BEAM is `elixir` with this build's code path, started through a port;
  it listens on free ports of 127.0.0.1 and reports them on a `READY` line.
  The bench then drives it by lines on its stdin, each answered by one line
  (`create`, `info`, `delete` of a channel): channels live in that VM, not
  in the bench's. It halts when its stdin closes, and `stop/1` kills it by
  its OS pid and waits for it to exit, so it never outlives the bench.
  """

  alias Ringbus.Bench.Pin

  @type t :: %{
          kind: :ringbus | :bare,
          os_pid: non_neg_integer(),
          port: port(),
          ports: %{optional(:binary) => :inet.port_number(), resp: :inet.port_number()}
        }

  @start_timeout 60_000
  @reply_timeout 30_000

  @doc """
  Starts a server BEAM and waits for its `READY` line. Options:

    * `:core` - the core to pin it to (with one scheduler), or `nil` (the
      default) for an unpinned BEAM with the default schedulers.
    * `:auto_create` - whether the Ringbus server creates channels on first
      use (RESP `XADD` on a new stream needs it). Default `true`.
  """
  @spec start!(:ringbus | :bare, keyword()) :: t()
  def start!(kind, opts \\ []) when kind in [:ringbus, :bare] do
    opts = Keyword.validate!(opts, core: nil, auto_create: true)
    elixir = System.find_executable("elixir") || Mix.raise("elixir is not on the PATH")
    erl = if opts[:core], do: ["--erl", Pin.erl_flags()], else: []
    paths = Enum.flat_map(code_paths(), &["-pa", &1])
    code = "Ringbus.Bench.ServerProcess.main(tl(System.argv()))"
    args = erl ++ paths ++ ["-e", code, "serve", "#{kind}", "#{opts[:auto_create]}"]
    {exe, args} = Pin.command(opts[:core], elixir, args)

    port =
      Port.open({:spawn_executable, exe}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 4096},
        args: args
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    server = %{kind: kind, os_pid: os_pid, port: port, ports: %{}}

    case await_line(port, "READY ", @start_timeout) do
      {:ok, fields} ->
        ports = Map.new(fields, fn {key, value} -> {key, String.to_integer(value)} end)
        %{server | ports: ports}

      {:error, reason} ->
        stop(server)
        Mix.raise("the #{kind} server process did not start: #{inspect(reason)}")
    end
  end

  @doc """
  Sends a command line, returns its answer's fields (`key=value`);
  raises `Mix.Error` if it fails. Commands: `create NAME CAPACITY`,
  `info NAME` (`pushed=N overwritten=N`), `delete NAME`.
  """
  @spec command!(t(), String.t()) :: %{atom() => String.t()}
  def command!(%{port: port}, line) do
    true = Port.command(port, line <> "\n")

    case await_line(port, "OK", @reply_timeout) do
      {:ok, fields} -> fields
      {:error, reason} -> Mix.raise("#{line}: #{inspect(reason)}")
    end
  end

  @doc "Kills it by its OS pid and waits for the port to report its exit, 10 s at most."
  @spec stop(t()) :: :ok
  def stop(%{os_pid: os_pid, port: port}) do
    System.cmd("kill", ["#{os_pid}"], stderr_to_stdout: true)

    receive do
      {^port, {:exit_status, _}} -> :ok
    after
      10_000 -> IO.puts(:stderr, "server process (pid #{os_pid}) did not stop in 10 s")
    end

    flush(port)
  end

  defp flush(port) do
    receive do
      {^port, _} -> flush(port)
    after
      0 -> :ok
    end
  end

  # This build's code paths (Ringbus, its benches, Ra), not OTP's or Elixir's.
  defp code_paths do
    otp = to_string(:code.root_dir())
    elixir = :elixir |> :code.lib_dir() |> to_string() |> Path.dirname()

    for path <- :code.get_path(),
        path = to_string(path),
        path != ".",
        not String.starts_with?(path, otp),
        not String.starts_with?(path, elixir),
        do: path
  end

  # Lines before the one that starts with `prefix` (logs) are skipped.
  defp await_line(port, prefix, timeout) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        cond do
          String.starts_with?(line, prefix) -> {:ok, fields(line)}
          String.starts_with?(line, "ERROR") -> {:error, line}
          true -> await_line(port, prefix, timeout)
        end

      {^port, {:data, {:noeol, _}}} ->
        await_line(port, prefix, timeout)

      {^port, {:exit_status, status}} ->
        {:error, {:exit_status, status}}
    after
      timeout -> {:error, :timeout}
    end
  end

  defp fields(line) do
    for field <- tl(String.split(line)),
        [key, value] = String.split(field, "=", parts: 2),
        into: %{},
        do: {String.to_atom(key), value}
  end

  ## The server's BEAM

  @doc false
  # Entry point of the server's BEAM: starts the server, answers command
  # lines until stdin closes, then halts.
  @spec main([String.t()]) :: no_return()
  def main(["ringbus", auto_create]) do
    {:ok, _} = Application.ensure_all_started(:ringbus)
    load_all()
    opts = [port: 0, resp_port: 0]
    opts = if auto_create == "true", do: opts, else: Keyword.put(opts, :auto_create, false)
    {:ok, server} = Ringbus.Server.start_link(opts)

    IO.puts(
      "READY binary=#{Ringbus.Server.port(server)} resp=#{Ringbus.Server.port(server, :resp)}"
    )

    serve()
  end

  def main(["bare", _auto_create]) do
    {_acceptor, port} = Ringbus.Bench.Resp.Bare.start()
    load_all()
    IO.puts("READY resp=#{port}")
    serve()
  end

  # The release boots in embedded mode, every module of every application
  # loaded before the first request; this BEAM, started by `elixir`, would
  # load each on its first call, inside the first rows it serves.
  defp load_all do
    for {app, _, _} <- Application.loaded_applications(),
        {:ok, modules} <- [:application.get_key(app, :modules)],
        do: :code.ensure_modules_loaded(modules)
  end

  defp serve do
    case IO.gets("") do
      line when is_binary(line) ->
        IO.puts(answer(String.split(line)))
        serve()

      _eof ->
        System.halt(0)
    end
  end

  defp answer(["create", name, capacity]) do
    case Ringbus.create(name, capacity: String.to_integer(capacity), overflow: :drop_oldest) do
      :ok -> "OK"
      {:error, reason} -> "ERROR #{inspect(reason)}"
    end
  end

  defp answer(["info", name]) do
    case Ringbus.info(name) do
      {:ok, info} -> "OK pushed=#{info.pushed} overwritten=#{info.overwritten}"
      {:error, reason} -> "ERROR #{inspect(reason)}"
    end
  end

  defp answer(["delete", name]) do
    case Ringbus.delete(name) do
      :ok -> "OK"
      {:error, reason} -> "ERROR #{inspect(reason)}"
    end
  end

  defp answer(other), do: "ERROR unknown command #{inspect(Enum.join(other, " "))}"
end
