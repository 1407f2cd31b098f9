defmodule Ringbus.Bench.RedisServerTest do
  use ExUnit.Case, async: false

  alias Ringbus.Bench.RedisServer
  alias Ringbus.Test.Debian

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
