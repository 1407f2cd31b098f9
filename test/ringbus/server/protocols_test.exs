defmodule Ringbus.Server.ProtocolsTest do
  # `Ringbus.Server.Protocol` is what a listener speaks: a server serves the
  # protocols its `:protocols` option names, each with the one connection
  # process, which keeps the socket loop, the deadlines and the held reads.
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  defmodule Lines do
    # A protocol of lines: each is echoed, "wait" waits for a `:go` message.
    @behaviour Ringbus.Server.Protocol

    alias Ringbus.Server.Protocol

    @impl true
    def listener(config),
      do: %Protocol{name: :lines, port: 0, module: __MODULE__, config: config, busy: "busy\n"}

    @impl true
    def init(_config, _arg), do: {"", :running}

    @impl true
    def decode(data, rest, _session) do
      [rest | lines] = (rest <> data) |> String.split("\n") |> Enum.reverse()
      lines = Enum.reverse(lines)
      if rest == "bad", do: {:error, :bad, lines, ""}, else: {:ok, lines, rest}
    end

    @impl true
    def count(_lines, tally), do: tally

    @impl true
    def handle_items(lines, session), do: run(lines, session, [])

    defp run(["wait" | rest], _session, out), do: {:wait, out, {:waiting, rest}}
    defp run(["quit" | _], session, out), do: {{:close, :peer_closed}, out ++ ["bye\n"], session}
    defp run([line | rest], session, out), do: run(rest, session, out ++ [line, "\n"])
    defp run([], session, out), do: {:continue, out, session}

    @impl true
    def handle_message(:go, {:waiting, rest}), do: run(rest, :running, ["went\n"])
    def handle_message(_other, session), do: {:continue, [], session}

    @impl true
    def open?(_session), do: true

    @impl true
    def fatal(:shutting_down, _session), do: {:shutting_down, "stopping\n"}
    def fatal(:timeout, _session), do: {:idle_timeout, "idle\n"}
    def fatal(:bad, _session), do: {:bad_frame, "bad\n"}

    @impl true
    def encode(out, tally), do: {out, IO.iodata_length(out), tally}

    @impl true
    def terminate(_session), do: :ok
  end

  defp start(opts) do
    server = start_supervised!({Ringbus.Server, [port: 0, protocols: [Lines]] ++ opts})
    {server, Ringbus.Server.port(server, :lines)}
  end

  defp children(server), do: Supervisor.which_children(server)

  defp connect(server, port) do
    before = Ringbus.Server.connections(server, :lines)
    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
    assert eventually(fn -> Ringbus.Server.connections(server, :lines) -- before != [] end)
    [conn] = Ringbus.Server.connections(server, :lines) -- before
    {socket, conn}
  end

  defp expect(socket, expected),
    do: assert({:ok, ^expected} = :gen_tcp.recv(socket, byte_size(expected), 5_000))

  # `expected`, then the close.
  defp expect_last(socket, expected) do
    expect(socket, expected)
    assert {:error, :closed} = :gen_tcp.recv(socket, 0, 5_000)
  end

  test "a protocol given in :protocols is served, with nothing else beside the binary one" do
    {server, port} = start(resp_port: 0)
    {socket, conn} = connect(server, port)
    :ok = :gen_tcp.send(socket, "one\ntwo\n")
    expect(socket, "one\ntwo\n")
    assert %{module: Lines, session: :running} = :sys.get_state(conn)
    # :resp_port means nothing to a server whose protocols leave RESP out.
    listeners = for {{Ringbus.Server.Listener, name}, _, _, _} <- children(server), do: name
    assert Enum.sort(listeners) == [:binary, :lines]

    :ok = :gen_tcp.send(socket, "quit\n")
    expect_last(socket, "bye\n")
  end

  test "while a protocol waits, reads are held and then run in order, even if one waits again" do
    {server, port} = start([])
    {socket, conn} = connect(server, port)
    :ok = :gen_tcp.send(socket, "wait\n")
    assert eventually(fn -> :sys.get_state(conn).waiting? end)

    :ok = :gen_tcp.send(socket, "a\nwait\n")
    assert eventually(fn -> length(:sys.get_state(conn).held) == 1 end)
    :ok = :gen_tcp.send(socket, "b\n")
    assert eventually(fn -> length(:sys.get_state(conn).held) == 2 end)

    send(conn, :go)
    expect(socket, "went\na\n")
    send(conn, :go)
    expect(socket, "went\nb\n")
    assert %{waiting?: false, held: []} = :sys.get_state(conn)
  end

  test "the connection closes a protocol's client on a decoding error and at its deadline" do
    {server, port} = start(idle_timeout: 100)
    {bad, _} = connect(server, port)
    :ok = :gen_tcp.send(bad, "x\nbad")
    expect_last(bad, "x\nbad\n")

    {idle, _} = connect(server, port)
    expect_last(idle, "idle\n")
  end

  test "a stopping server's connections say the protocol's last words" do
    {server, port} = start([])
    {stopped, conn} = connect(server, port)
    ref = Process.monitor(conn)
    :ok = stop_supervised(Ringbus.Server)
    assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
    expect(stopped, "stopping\n")
  end

  test ":protocols takes Ringbus.Server.Protocol modules only" do
    assert_raise ArgumentError, ~r/expected :protocols to be a list/, fn ->
      Ringbus.Server.Config.new!(protocols: [String])
    end

    assert_raise ArgumentError, ~r/expected :protocols to be a list/, fn ->
      Ringbus.Server.Config.new!(protocols: :resp)
    end
  end
end
