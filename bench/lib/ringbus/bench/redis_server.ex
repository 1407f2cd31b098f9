defmodule Ringbus.Bench.RedisServer do
  @moduledoc """
  The benches' `redis-server`: the tests' `Ringbus.Test.RedisServer` (which
  the bench environment compiles), with `:core` to pin it
  (`Ringbus.Bench.Pin`), and the `redis-cli` calls the benches make.
  """

  alias Ringbus.Test.RedisServer

  @type t :: RedisServer.t()

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
    {core, opts} = Keyword.pop!(opts, :core)
    RedisServer.start!([command: &Ringbus.Bench.Pin.command(core, &1, &2)] ++ opts)
  end

  @doc """
  Stops it and waits for it to exit, 10 s at most. Any process may call it:
  the server outlives the port's owner (it does not read its stdin), so it is
  stopped by its OS pid.
  """
  @spec stop(t()) :: :ok
  defdelegate stop(redis), to: RedisServer

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
  defdelegate free_port(), to: RedisServer
end
