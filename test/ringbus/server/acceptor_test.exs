defmodule Ringbus.Server.AcceptorTest do
  # An acceptor is an OTP process: it answers `:sys` between two accepts,
  # and while suspended it accepts no connection.
  use ExUnit.Case, async: true

  alias Ringbus.Test.{Internals, RawClient}

  test ":sys.get_state answers; a suspended acceptor accepts nothing until resumed" do
    server = start_supervised!({Ringbus.Server, port: 0, acceptors: 1})
    port = Ringbus.Server.port(server)
    [acceptor] = Internals.acceptors(server)

    assert %{listen: {Ringbus.Socket.TCP, _}, counters: _} = :sys.get_state(acceptor, 2_000)

    :ok = :sys.suspend(acceptor, 2_000)
    # The kernel completes the TCP handshake; nobody takes the connection.
    client = RawClient.connect!(port)
    RawClient.send_frames(client, [{:hello, 0, 3, 0, nil}])
    assert {:error, :timeout} = :gen_tcp.recv(client.socket, 0, 200)
    assert Ringbus.Server.connections(server) == []

    :ok = :sys.resume(acceptor, 2_000)
    assert {[{:hello_ok, 0, 3, _limits}], _} = RawClient.recv(client, 1)
  end
end
