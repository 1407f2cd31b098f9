defmodule Ringbus.Bench.Latency.GeneratorTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Latency.{Generator, Histogram, Schedule}
  alias Ringbus.Bench.Resp.Bare

  @ping "*1\r\n$4\r\nPING\r\n"

  test "one process sends every request over every connection and counts every reply" do
    {acceptor, port} = Bare.start()

    try do
      schedule = Schedule.new(2_000, 200, 7)
      assert {:ok, r} = Generator.run(%{protocol: :ping, port: port}, schedule)
      assert r.answered == 200 and r.errors == 0
      assert Histogram.count(r.histogram) == 200
      assert Histogram.count(r.send_lags) == 200
      # The last request is due at 99.5 ms: it cannot have been written before.
      assert r.last_send >= Schedule.at(schedule, 199)
      assert r.busy >= 0 and r.busy <= r.duration
    after
      Bare.stop(acceptor)
    end
  end

  test "requests go out whether or not earlier ones were answered, each timed from its intended time" do
    # A server that answers nothing until all 20 requests of its one connection came:
    # the first is due at 0 and the last at 19 ms, so the first waited 19 ms at least.
    n = 20

    {port, server} =
      one_connection(fn socket ->
        {:ok, _} = :gen_tcp.recv(socket, n * byte_size(@ping), 10_000)
        :ok = :gen_tcp.send(socket, :binary.copy("+PONG\r\n", n))
        {:error, :closed} = :gen_tcp.recv(socket, 0, 10_000)
      end)

    assert {:ok, r} = Generator.run(%{protocol: :ping, port: port}, Schedule.new(1_000, n, 1))
    assert r.answered == n
    assert Histogram.max(r.histogram) >= 19_000_000
    Task.await(server)
  end

  test "error replies are counted apart" do
    {port, server} =
      one_connection(fn socket ->
        {:ok, _} = :gen_tcp.recv(socket, 3 * byte_size(@ping), 10_000)
        :ok = :gen_tcp.send(socket, "+PONG\r\n-ERR no\r\n$1\r\nx\r\n")
        {:error, :closed} = :gen_tcp.recv(socket, 0, 10_000)
      end)

    assert {:ok, r} = Generator.run(%{protocol: :ping, port: port}, Schedule.new(1_000, 3, 1))
    assert {r.answered, r.errors} == {3, 1}
    Task.await(server)
  end

  test "a server that closes the connection stops the run with an error" do
    {port, server} =
      one_connection(fn socket ->
        {:ok, _} = :gen_tcp.recv(socket, byte_size(@ping), 10_000)
        :gen_tcp.close(socket)
      end)

    assert {:error, :closed} =
             Generator.run(%{protocol: :ping, port: port}, Schedule.new(1_000, 50, 1))

    Task.await(server)
  end

  test "more replies than requests is an error" do
    {port, server} =
      one_connection(fn socket ->
        {:ok, _} = :gen_tcp.recv(socket, byte_size(@ping), 10_000)
        :ok = :gen_tcp.send(socket, "+PONG\r\n+PONG\r\n")
        :gen_tcp.recv(socket, 0, 10_000)
      end)

    assert {:error, :more_replies_than_requests} =
             Generator.run(%{protocol: :ping, port: port}, Schedule.new(10, 2, 1))

    Task.await(server)
  end

  # A server for one connection, run by `fun` with the accepted socket.
  defp one_connection(fun) do
    {:ok, listen} = :gen_tcp.listen(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    {:ok, port} = :inet.port(listen)

    server =
      Task.async(fn ->
        {:ok, socket} = :gen_tcp.accept(listen)
        fun.(socket)
      end)

    {port, server}
  end
end
