defmodule Ringbus.Bench.ServerProcessTest do
  # A server under test in a BEAM of its own, pinned like `--pin` pins it.
  use ExUnit.Case, async: false

  alias Ringbus.Bench.ServerProcess

  @moduletag timeout: 120_000

  test "a pinned Ringbus server answers on its ports and commands, and stop/1 ends its OS process" do
    server = ServerProcess.start!(:ringbus, core: 0, auto_create: false)

    try do
      # One core allowed, one scheduler: the per-core mode.
      {affinity, 0} = System.cmd("taskset", ["-c", "-p", "#{server.os_pid}"])
      assert affinity =~ ~r/list: 0$/m

      assert %{} = ServerProcess.command!(server, "create bench.sp 10")
      {:ok, client} = Ringbus.Client.connect(port: server.ports.binary)
      assert {:ok, _seq} = Ringbus.Client.push(client, "bench.sp", "x")
      Ringbus.Client.close(client)
      assert %{pushed: "1"} = ServerProcess.command!(server, "info bench.sp")

      {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", server.ports.resp, [:binary, active: false])
      :ok = :gen_tcp.send(socket, "PING\r\n")
      assert {:ok, "+PONG\r\n"} = :gen_tcp.recv(socket, 0, 5_000)
      :gen_tcp.close(socket)

      assert_raise Mix.Error, ~r/info nope/, fn -> ServerProcess.command!(server, "info nope") end
    after
      ServerProcess.stop(server)
    end

    refute File.exists?("/proc/#{server.os_pid}")
  end

  test "the bare responder runs in a BEAM of its own" do
    server = ServerProcess.start!(:bare)

    try do
      {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", server.ports.resp, [:binary, active: false])
      :ok = :gen_tcp.send(socket, "*1\r\n$4\r\nPING\r\n")
      assert {:ok, "+PONG\r\n"} = :gen_tcp.recv(socket, 0, 5_000)
      :gen_tcp.close(socket)
    after
      ServerProcess.stop(server)
    end

    refute File.exists?("/proc/#{server.os_pid}")
  end
end
