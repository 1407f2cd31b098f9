defmodule Ringbus.Bench.RedisServerTest do
  # The benches' own redis-server: no persistence by default; arguments
  # that turn on an fsynced append-only file, written in a dir of the caller's.
  use ExUnit.Case, async: true

  alias Ringbus.Bench.RedisServer

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
end
