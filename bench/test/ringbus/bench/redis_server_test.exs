defmodule Ringbus.Bench.RedisServerTest do
  # The benches' own redis-server: no persistence by default; arguments
  # that turn on an fsynced append-only file, written in a dir of the caller's;
  # pinned to a core.
  use ExUnit.Case, async: false

  alias Ringbus.Bench.RedisServer
  alias Ringbus.Test.Debian

  @moduletag :tmp_dir

  defp config(redis, key) do
    {out, 0} = System.cmd("redis-cli", ["-p", "#{redis.port}", "CONFIG", "GET", key])
    # The key's line, then its value's (which may be empty).
    [^key, value | _] = String.split(out, "\n")
    value
  end

  test "by default it keeps nothing on disk" do
    redis = RedisServer.start!()

    try do
      assert config(redis, "appendonly") == "no"
      assert config(redis, "save") == ""
    after
      RedisServer.stop(redis)
    end
  end

  test "args override the defaults and :dir holds the append-only file", %{tmp_dir: dir} do
    redis = RedisServer.start!(dir: dir, args: ~w(--appendonly yes --appendfsync always))

    try do
      assert config(redis, "appendonly") == "yes"
      assert config(redis, "appendfsync") == "always"
      assert config(redis, "dir") == dir

      {"1-0\n", 0} =
        System.cmd("redis-cli", ["-p", "#{redis.port}", "XADD", "s", "1-0", "f", "v"])

      assert Path.wildcard(Path.join(dir, "**/*.aof*")) != []
    after
      RedisServer.stop(redis)
    end
  end

  test "an unknown option is an error" do
    assert_raise ArgumentError, fn -> RedisServer.start!(persist: true) end
  end

  test "core: pins redis-server to that core; stop/1 ends it" do
    Debian.executable!("redis-server", "redis-server")
    redis = RedisServer.start!(core: 0)

    try do
      {affinity, 0} = System.cmd("taskset", ["-c", "-p", "#{redis.os_pid}"])
      assert affinity =~ ~r/list: 0$/m
      {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", redis.port, [:binary, active: false])
      :ok = :gen_tcp.send(socket, "PING\r\n")
      assert {:ok, "+PONG\r\n"} = :gen_tcp.recv(socket, 0, 5_000)
      :gen_tcp.close(socket)
    after
      RedisServer.stop(redis)
    end

    refute File.exists?("/proc/#{redis.os_pid}")
  end
end
