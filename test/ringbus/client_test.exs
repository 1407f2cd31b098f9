defmodule Ringbus.ClientTest do
  # Ringbus.Client against a real Ringbus.Server on a free port.
  use ExUnit.Case, async: false

  alias Ringbus.Client

  import Ringbus.Test.Eventually

  setup context do
    server_opts =
      Keyword.merge([port: 0, auto_create: [capacity: 1_000]], Map.get(context, :server, []))

    server = start_supervised!({Ringbus.Server, server_opts})
    port = Ringbus.Server.port(server)
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    {:ok, port: port}
  end

  defp connect!(port, opts \\ []), do: Client.connect!([port: port] ++ opts)

  # Waits for the acks of `count` async messages; returns [{corr, result}]
  # in arrival order and the number of :ringbus_acks messages they came in.
  defp await_acks(client, count, acc \\ [], messages \\ 0)
  defp await_acks(_client, count, acc, messages) when count <= 0, do: {acc, messages}

  defp await_acks(client, count, acc, messages) do
    receive do
      {:ringbus_acks, ^client, acks} ->
        await_acks(client, count - length(acks), acc ++ acks, messages + 1)
    after
      5_000 -> flunk("no acks; still waiting for #{count}")
    end
  end

  describe "connect/1" do
    test "says HELLO and learns the server's limits", %{port: port} do
      client = connect!(port)
      assert Client.max_frame_size(client) == 16 * 1024 * 1024
      assert :ok = Client.ping(client)
      # The connection is an OTP process.
      assert %{session: %Ringbus.Client.Session{}} = :sys.get_state(client.pid)
      assert :ok = Client.close(client)
    end

    test "a refused connection is an error" do
      {:ok, listen} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
      {:ok, free} = :inet.port(listen)
      :ok = :gen_tcp.close(listen)
      assert {:error, :econnrefused} = Client.connect(port: free)
      assert_raise Client.Error, ~r/connection refused/, fn -> Client.connect!(port: free) end
    end

    @tag server: [tokens: %{"s3cret" => :all}]
    test "a bad token is refused with the server's reason", %{port: port} do
      assert {:error, :auth_failed} = Client.connect(port: port, token: "wrong")
      assert {:error, :auth_failed} = Client.connect(port: port)
      client = connect!(port, token: "s3cret")
      assert :ok = Client.ping(client)
    end

    test "bad options raise", %{port: port} do
      assert_raise ArgumentError, fn -> Client.connect(port: port, colour: :blue) end
      assert_raise ArgumentError, ~r/:transport/, fn -> Client.connect(transport: :udp) end
      assert_raise ArgumentError, ~r/:max_pending/, fn -> Client.connect(max_pending: 10 ** 6) end
    end
  end

  test "TLS with certificates made on the spot" do
    data =
      :public_key.pkix_test_data(%{
        server_chain: %{
          root: [key: {:namedCurve, :secp256r1}],
          peer: [key: {:namedCurve, :secp256r1}]
        },
        client_chain: %{
          root: [key: {:namedCurve, :secp256r1}],
          peer: [key: {:namedCurve, :secp256r1}]
        }
      })

    server_tls = Keyword.take(data[:server_config], [:cert, :key])
    server = start_supervised!({Ringbus.Server, port: 0, tls: server_tls}, id: :tls_server)
    port = Ringbus.Server.port(server)

    tls = [
      verify: :verify_peer,
      cacerts: data[:client_config][:cacerts],
      server_name_indication: :disable
    ]

    client = connect!(port, transport: :tls, tls: tls)
    assert {:ok, 0} = Client.push(client, "tls", "over tls")
    assert {:ok, corr} = Client.push_async(client, "tls", ["a", "b"])
    assert {[{^corr, {:ok, 1}}], _} = await_acks(client, 1)
    assert {:ok, [{0, "over tls"}, {1, "a"}, {2, "b"}], 0} = Client.read(client, "tls", 0, 10)
    assert :ok = Client.close(client)
  end

  test "create, delete, len, info", %{port: port} do
    c = connect!(port)
    assert :ok = Client.create(c, "c1", capacity: 2, overflow: :reject)
    assert {:error, :exists} = Client.create(c, "c1", capacity: 2)
    assert_raise Client.Error, ~r/exists/, fn -> Client.create!(c, "c1", capacity: 2) end
    assert {:ok, 0} = Client.len(c, "c1")

    assert %{capacity: 2, overflow: :reject, pushed: 0, replicas: nil, nodes: nodes} =
             Client.info!(c, "c1")

    assert nodes == length(Node.list()) + 1
    assert {:ok, 0} = Client.push(c, "c1", "a")
    assert 1 = Client.len!(c, "c1")
    assert :ok = Client.delete(c, "c1")
    assert {:error, :no_channel} = Client.delete(c, "c1")
    assert {:error, :no_channel} = Client.len(c, "c1")
    assert {:error, :no_channel} = Client.info(c, "c1")
    assert_raise Client.Error, fn -> Client.delete!(c, "c1") end
    assert_raise ArgumentError, ~r/:capacity/, fn -> Client.create(c, "c2", capacity: 0) end
    assert_raise ArgumentError, ~r/channel name/, fn -> Client.len(c, "") end
  end

  describe "incarnations" do
    test "read/5 and subscribe/3 pin the incarnation; info/2 has it", %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "inc", capacity: 10)
      {:ok, 0} = Client.push_many(c, "inc", ~w(a b c))

      assert {:ok, [{0, "a"}, {1, "b"}], 0, inc} = Client.read(c, "inc", 0, 2, incarnation: :any)

      assert %{incarnation: ^inc} = Client.info!(c, "inc")
      assert {:ok, [{2, "c"}], 0, ^inc} = Client.read(c, "inc", 2, 10, incarnation: inc)
      assert {:ok, [{2, "c"}], 0, ^inc} = Client.read(c, "inc", 2, 10, [])
      assert {:ok, [{2, "c"}], 0} = Client.read(c, "inc", 2, 10)

      assert {:ok, sub, ^inc} = Client.subscribe(c, "inc", from: 2, incarnation: inc)
      assert_receive {:ringbus, ^sub, [{2, "c"}], 0}
      assert {_sub, ^inc} = Client.subscribe!(c, "inc", incarnation: :any)
      assert {:ok, sub} = Client.subscribe(c, "inc")
      assert is_integer(sub)

      assert_raise ArgumentError, ~r/:incarnation/, fn ->
        Client.read(c, "inc", 0, 1, incarnation: 0)
      end

      assert_raise ArgumentError, ~r/:incarnation/, fn ->
        Client.subscribe(c, "inc", incarnation: "x")
      end
    end

    test "a resume after the channel is deleted and created again answers new_incarnation",
         %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "inc-again", capacity: 10)
      {:ok, 0} = Client.push_many(c, "inc-again", ~w(a b))
      {:ok, _, 0, inc} = Client.read(c, "inc-again", 0, 10, incarnation: :any)

      :ok = Client.delete!(c, "inc-again")
      :ok = Client.create!(c, "inc-again", capacity: 10)
      {:ok, 0} = Client.push_many(c, "inc-again", ~w(x y z))

      # Seq 2 exists again, under another incarnation: the resume is told so.
      assert {:error, :new_incarnation} = Client.read(c, "inc-again", 2, 10, incarnation: inc)

      assert {:error, :new_incarnation} =
               Client.subscribe(c, "inc-again", from: 2, incarnation: inc)

      assert_raise Client.Error, ~r/new_incarnation|created again/, fn ->
        Client.subscribe!(c, "inc-again", from: 2, incarnation: inc)
      end

      refute_received {:ringbus, _, _, _}
      assert {:ok, [{2, "z"}], 0, new} = Client.read(c, "inc-again", 2, 10, incarnation: :any)
      assert new != inc
    end
  end

  test "push, push_many, pull and read", %{port: port} do
    c = connect!(port)
    :ok = Client.create!(c, "pr", capacity: 3, overflow: :reject)
    assert {:ok, 0} = Client.push(c, "pr", "a")
    assert 1 = Client.push!(c, "pr", "b")
    assert {:error, :full} = Client.push_many(c, "pr", ["c", "d"])
    assert {:ok, 2} = Client.push_many(c, "pr", ["c"])
    assert {:error, :full} = Client.push(c, "pr", "x")
    assert_raise Client.Error, ~r/full/, fn -> Client.push!(c, "pr", "x") end

    assert {:ok, [{1, "b"}, {2, "c"}], 0} = Client.read(c, "pr", 1, 10)
    assert {:ok, 0, "a"} = Client.pull(c, "pr")
    assert {:ok, [{1, "b"}], 1} = Client.read(c, "pr", 0, 1)
    assert {[], 0} = Client.read!(c, "pr", 3, 10)
    assert {:ok, 1, "b"} = Client.pull(c, "pr")
    assert {:ok, 2, "c"} = Client.pull(c, "pr")
    assert :empty = Client.pull(c, "pr")
    assert {:error, :no_channel} = Client.pull(c, "nope")
    assert {:error, :no_channel} = Client.read(c, "nope", 0, 1)

    assert 0 = Client.push_many!(c, "auto", ["x", "y"])
    assert {:ok, 2} = Client.push_many(c, "auto", [])
  end

  @tag server: [auto_create: false]
  test "push errors come back as reasons", %{port: port} do
    c = connect!(port)
    assert {:error, :no_channel} = Client.push(c, "none", "a")
    assert {:ok, corr} = Client.push_async(c, "none", "a")
    assert {[{^corr, {:error, :no_channel}}], 1} = await_acks(c, 1)
  end

  test "push/4 with a producer tag stores a resent push once, from any connection", %{port: port} do
    client = connect!(port)
    other = connect!(port)
    assert {:ok, 0} = Client.push(client, "tagged", "a", producer: {"billing", 1})
    assert {:ok, 0} = Client.push(other, "tagged", "a", producer: {"billing", 1})
    assert {:ok, 1} = Client.push(client, "tagged", ["b", "c"], producer: {"billing", 2})
    assert {:ok, 1} = Client.push(other, "tagged", ["b", "c"], producer: {"billing", 2})
    assert {:ok, 3} = Client.push(client, "tagged", "d", [])
    assert {:ok, 4} = Client.push(client, "tagged", ["e"], producer: nil)

    assert {:ok, [{0, "a"}, {1, "b"}, {2, "c"}, {3, "d"}, {4, "e"}], 0} =
             Client.read(client, "tagged", 0, 10)

    assert {:ok, 5} = Client.push(client, "tagged", "f", producer: {"billing", 100})
    assert {:error, :stale_tag} = Client.push(client, "tagged", "a", producer: {"billing", 1})

    assert_raise ArgumentError, ~r/:producer/, fn ->
      Client.push(client, "tagged", "x", producer: {:atom_id, 1})
    end

    assert_raise ArgumentError, ~r/:producer/, fn ->
      Client.push(client, "tagged", "x", producer: {"p", -1})
    end
  end

  test "many callers share one client", %{port: port} do
    c = connect!(port)
    :ok = Client.create!(c, "shared", capacity: 10_000)

    seqs =
      1..20
      |> Enum.map(fn i ->
        Task.async(fn -> for j <- 1..50, do: Client.push!(c, "shared", "#{i}.#{j}") end)
      end)
      |> Enum.flat_map(&Task.await/1)

    assert Enum.sort(seqs) == Enum.to_list(0..999)
  end

  describe "push_async/4" do
    test "acks come in batches, in order, one message per PUSH_ACKS frame", %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "async", capacity: 100_000)
      n = 20_000

      corrs =
        for i <- 1..n do
          {:ok, corr} = Client.push_async(c, "async", <<i::64>>)
          corr
        end

      {acks, messages} = await_acks(c, n)
      assert Enum.map(acks, &elem(&1, 0)) == corrs
      assert Enum.map(acks, fn {_, {:ok, seq}} -> seq end) == Enum.to_list(0..(n - 1))
      assert messages < n
      assert Client.pending(c) == 0
      assert {:ok, %{pushed: ^n}} = Client.info(c, "async")
    end

    test "a batch is one frame and one ack", %{port: port} do
      c = connect!(port)
      {:ok, c1} = Client.push_async(c, "batch", ["a", "b", "c"])
      {:ok, c2} = Client.push_async(c, "batch", "d")
      {:ok, c3} = Client.push_async(c, "batch", [])
      assert {[{^c1, {:ok, 0}}, {^c2, {:ok, 3}}, {^c3, {:ok, 4}}], _} = await_acks(c, 3)
      assert Client.pending(c) == 0
    end

    test "no-ack pushes are stored and never answered", %{port: port} do
      c = connect!(port)
      for i <- 1..100, do: assert(:ok = Client.push_async(c, "noack", "#{i}", ack: false))
      assert :ok = Client.push_async(c, "noack", ["x", "y"], ack: false)
      # A request after them is handled after them.
      assert {:ok, 102} = Client.len(c, "noack")
      assert Client.pending(c) == 0
      refute_received {:ringbus_acks, _, _}
    end

    test "output waiting to be written is written even when other messages come first",
         %{port: port} do
      c = connect!(port)
      :ok = :sys.suspend(c.pid)
      :ok = Client.push_async(c, "idle-flush", "x", ack: false)
      # A write's reply from the port, handled before the connection is idle.
      send(c.pid, {:inet_reply, make_ref(), :ok})
      :ok = :sys.resume(c.pid)

      assert eventually(fn -> Ringbus.len("idle-flush") == 1 end)
    end

    test "pushes past :max_pending get :backpressure until acks come", %{port: port} do
      c = connect!(port, max_pending: 10)

      # The client process is suspended, so nothing is written or acked.
      :ok = :sys.suspend(c.pid)
      for _ <- 1..10, do: assert({:ok, _} = Client.push_async(c, "bp", "m"))
      assert {:error, :backpressure} = Client.push_async(c, "bp", "m")
      assert {:error, :backpressure} = Client.push_async(c, "bp", ["m", "m"], ack: false)
      assert Client.pending(c) == 10
      :ok = :sys.resume(c.pid)

      assert {_acks, _} = await_acks(c, 10)
      assert Client.pending(c) == 0
      assert {:ok, _} = Client.push_async(c, "bp", "m")

      # A batch above the bound goes when nothing else is in flight.
      {_, _} = await_acks(c, 1)
      assert {:ok, corr} = Client.push_async(c, "bp", List.duplicate("m", 25))
      assert {[{^corr, {:ok, 11}}], _} = await_acks(c, 1)
    end

    test "a frame above the server's max frame size is not sent", %{port: port} do
      c = connect!(port)
      big = :binary.copy("x", Client.max_frame_size(c))
      assert {:error, :frame_too_large} = Client.push_async(c, "big", big)
      assert {:error, :frame_too_large} = Client.push(c, "big", big)
      assert Client.pending(c) == 0
      assert :ok = Client.ping(c)
    end
  end

  describe "push_async/4 with :linger (coalescing)" do
    test "pushes queued at once go as batches, and each gets its own ack and seq",
         %{port: port} do
      c = connect!(port, linger: 0)
      :ok = Client.create!(c, "co.a", capacity: 100_000)
      :ok = Client.create!(c, "co.b", capacity: 100_000)
      n = 5_000
      frames_before = server_frames_in()

      # Suspended, the connection finds every push in its mailbox at once.
      :ok = :sys.suspend(c.pid)

      sent =
        for i <- 1..n do
          channel = if rem(i, 3) == 0, do: "co.b", else: "co.a"
          {:ok, corr} = Client.push_async(c, channel, <<i::64>>)
          {corr, channel, <<i::64>>}
        end

      :ok = :sys.resume(c.pid)
      {acks, _} = await_acks(c, n)
      assert Client.pending(c) == 0

      # One entry per push (a channel's in the order sent), each naming where
      # its payload is.
      assert Enum.sort(Enum.map(acks, &elem(&1, 0))) == Enum.map(sent, &elem(&1, 0))
      seqs = Map.new(acks, fn {corr, {:ok, seq}} -> {corr, seq} end)

      for {corr, channel, payload} <- sent do
        seq = Map.fetch!(seqs, corr)
        assert {:ok, [{^seq, ^payload}], 0} = Ringbus.read(channel, seq, 1)
      end

      # Each channel holds its payloads in the order they were pushed, and
      # its acks came in that order too.
      channel_of = Map.new(sent, fn {corr, channel, _} -> {corr, channel} end)

      for channel <- ["co.a", "co.b"] do
        {:ok, stored, 0} = Ringbus.read(channel, 0, n)
        mine = for {_, ^channel, payload} <- sent, do: payload
        assert Enum.map(stored, &elem(&1, 1)) == mine
        acked = for {corr, _} <- acks, channel_of[corr] == channel, do: corr
        assert acked == for({corr, ^channel, _} <- sent, do: corr)
      end

      # Far fewer frames than pushes reached the server.
      assert server_frames_in() - frames_before < div(n, 10)
    end

    test "a request sent after coalesced pushes is carried out after them", %{port: port} do
      c = connect!(port, linger: 60_000)
      for i <- 1..10, do: {:ok, _} = Client.push_async(c, "co.order", "#{i}")
      # The sync push sends what has gathered first, though the linger is long.
      assert {:ok, 10} = Client.push(c, "co.order", "11")
      {acks, _} = await_acks(c, 10)
      assert Enum.map(acks, fn {_, {:ok, seq}} -> seq end) == Enum.to_list(0..9)
    end

    test "with a linger, pushes wait for it, then go together", %{port: port} do
      c = connect!(port, linger: 200)
      for i <- 1..5, do: {:ok, _} = Client.push_async(c, "co.linger", "#{i}")
      Process.sleep(50)
      assert Ringbus.len("co.linger") in [0, {:error, :no_channel}]
      {acks, _} = await_acks(c, 5)
      assert Enum.map(acks, fn {_, {:ok, seq}} -> seq end) == Enum.to_list(0..4)
    end

    test "a refused batch refuses each of its pushes, and stores none", %{port: port} do
      c = connect!(port, linger: 0)
      :ok = Client.create!(c, "co.full", capacity: 4, overflow: :reject)
      :ok = :sys.suspend(c.pid)
      for i <- 1..6, do: {:ok, _} = Client.push_async(c, "co.full", "#{i}")
      :ok = :sys.resume(c.pid)
      {acks, _} = await_acks(c, 6)
      assert Enum.map(acks, &elem(&1, 1)) == List.duplicate({:error, :full}, 6)
      assert Ringbus.len("co.full") == 0
    end

    test "a batch above the channel's max_bytes refuses each of its pushes", %{port: port} do
      c = connect!(port, linger: 0)
      :ok = Client.create!(c, "co.small", capacity: 100, max_bytes: 10)
      :ok = :sys.suspend(c.pid)
      for p <- ~w(aaaa bbbb cccc), do: {:ok, _} = Client.push_async(c, "co.small", p)
      :ok = :sys.resume(c.pid)
      {acks, _} = await_acks(c, 3)
      assert Enum.map(acks, &elem(&1, 1)) == List.duplicate({:error, :too_large}, 3)
      assert Ringbus.len("co.small") == 0
    end

    test ":batch_bytes bounds a batch", %{port: port} do
      c = connect!(port, linger: 60_000, batch_bytes: 100)
      # 25 payloads of 20 bytes: a batch fills and goes without the linger.
      for _ <- 1..25, do: {:ok, _} = Client.push_async(c, "co.cap", :binary.copy("x", 20))
      {acks, _} = await_acks(c, 20)
      assert Enum.all?(acks, &match?({_, {:ok, _}}, &1))
      assert Client.pending(c) in 1..5
    end

    test "pushes still gathered when the connection is lost are answered :closed" do
      {port, _server} =
        fake_server(fn socket ->
          {:ok, _} = :gen_tcp.recv(socket, 0)
          :gen_tcp.close(socket)
        end)

      c = Client.connect!(port: port, linger: 60_000)
      corrs = for i <- 1..3, do: elem(Client.push_async(c, "co.gone", "#{i}"), 1)
      {:error, :closed} = Client.ping(c)
      assert_receive {:ringbus_acks, ^c, acks}
      assert Enum.sort(acks) == Enum.sort(for corr <- corrs, do: {corr, {:error, :closed}})
    end

    test "a push alone goes as a PUSH and is acked with its seq", %{port: port} do
      c = connect!(port, linger: 0)
      :ok = Client.create!(c, "co.alone", capacity: 10)
      {:ok, corr} = Client.push_async(c, "co.alone", "only")
      assert {[{^corr, {:ok, 0}}], _} = await_acks(c, 1)
      assert {:ok, [{0, "only"}], 0} = Client.read(c, "co.alone", 0, 10)
    end

    test "a payload above the server's max frame size is not sent", %{port: port} do
      c = connect!(port, linger: 0)
      big = :binary.copy("x", Client.max_frame_size(c))
      assert {:error, :frame_too_large} = Client.push_async(c, "co.big", big)
      assert Client.pending(c) == 0
    end

    test "bad options raise", %{port: port} do
      assert_raise ArgumentError, ~r/linger/, fn -> connect!(port, linger: -1) end
      assert_raise ArgumentError, ~r/batch_bytes/, fn -> connect!(port, batch_bytes: 0) end
    end
  end

  describe "subscriptions" do
    test "deliveries under credit, ack, unsubscribe", %{port: port} do
      c = connect!(port)
      {:ok, 0} = Client.push_many(c, "sub", ~w(a b c d e))
      assert {:ok, sub} = Client.subscribe(c, "sub", from: :earliest, credit: 2, max_batch: 10)
      assert_receive {:ringbus, ^sub, [{0, "a"}, {1, "b"}], 0}
      assert :ok = Client.ping(c)
      refute_received {:ringbus, ^sub, _, _}

      assert :ok = Client.ack(c, sub, 10)
      assert_receive {:ringbus, ^sub, [{2, "c"}, {3, "d"}, {4, "e"}], 0}
      {:ok, 5} = Client.push(c, "sub", "f")
      assert_receive {:ringbus, ^sub, [{5, "f"}], 0}

      assert :ok = Client.unsubscribe(c, sub)
      assert {:error, :no_subscription} = Client.unsubscribe(c, sub)
      # Credit to a gone subscription is answered with an error that is dropped.
      assert :ok = Client.ack(c, sub, 1)
      assert :ok = Client.ping(c)
    end

    test "a deleted channel closes its subscriptions", %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "gone", capacity: 10)
      sub = Client.subscribe!(c, "gone")
      :ok = Client.delete!(c, "gone")
      assert_receive {:ringbus_closed, ^sub, :no_channel}
      assert {:error, :no_channel} = Client.subscribe(c, "gone")
    end

    test "deliveries go to the owner", %{port: port} do
      test = self()
      owner = spawn_link(fn -> receive(do: (m -> send(test, {:owner_got, m}))) end)
      c = connect!(port, owner: owner)
      :ok = Client.create!(c, "owned", capacity: 10)
      sub = Client.subscribe!(c, "owned", from: :latest)
      {:ok, 0} = Client.push(c, "owned", "x")
      assert_receive {:owner_got, {:ringbus, ^sub, [{0, "x"}], 0}}
    end
  end

  describe "closed connections" do
    test "calls after close/1 return :closed", %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "cl", capacity: 10)
      sub = Client.subscribe!(c, "cl")
      assert :ok = Client.close(c)
      assert :ok = Client.close(c)
      assert {:error, :closed} = Client.ping(c)
      assert {:error, :closed} = Client.push(c, "cl", "x")
      assert {:error, :closed} = Client.push_async(c, "cl", "x")
      assert {:error, :closed} = Client.ack(c, sub, 1)
      assert_raise Client.Error, ~r/closed/, fn -> Client.len!(c, "cl") end
      refute_received {:ringbus_down, _, _}
    end

    test "every push a caller was given an id for is answered once when the connection is lost" do
      # The server reads a little, never acks, and closes, while two callers
      # push, coalesced and then plain, until they are told :closed.
      for linger <- [0, nil] do
        {port, _server} =
          fake_server(fn socket ->
            {:ok, _} = :gen_tcp.recv(socket, 0)
            :gen_tcp.close(socket)
          end)

        c = Client.connect!(port: port, linger: linger)
        test = self()

        for _ <- 1..2 do
          spawn_link(fn -> send(test, {:pushed, push_until_closed(c, [], 20_000)}) end)
        end

        corrs = Enum.flat_map(1..2, fn _ -> assert_receive({:pushed, corrs}, 10_000) && corrs end)
        assert_receive {:ringbus_down, ^c, _reason}, 10_000
        acks = collect_acks(c, [])
        assert corrs != []
        assert Enum.sort(Enum.map(acks, &elem(&1, 0))) == Enum.sort(corrs)
        assert Enum.all?(acks, &match?({_, {:error, :closed}}, &1))
      end
    end

    test "a closing connection waits for a reserved push at most a second", %{port: port} do
      c = connect!(port)
      # A caller that took room and never sent (killed in between).
      :ok = Ringbus.Client.Counters.reserve(c.counters, 1, 100)
      {elapsed, :ok} = :timer.tc(fn -> Client.close(c) end)
      assert elapsed in 900_000..3_000_000
      assert {:error, :closed} = Client.push_async(c, "gone", "x")
    end

    test "a server that stops ends each subscription with :shutting_down", %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "stopping", capacity: 10)
      sub = Client.subscribe!(c, "stopping")
      :ok = stop_supervised(Ringbus.Server)
      assert_receive {:ringbus_closed, ^sub, :shutting_down}, 10_000
      assert_receive {:ringbus_down, ^c, :shutting_down}, 10_000
    end

    test "a connection error from the server is the reason its subscriptions end" do
      # A stand-in server: it takes a subscription, then says shutting_down
      # with no SUB_CLOSED (as a server of an earlier version does) and closes.
      {port, _server} =
        fake_server(fn socket ->
          {:ok, <<_len::32, 0x0A, corr::32, _::binary>>} = :gen_tcp.recv(socket, 0)
          :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode({:subscribed, corr, 7, 1}))
          error = {:error, 0, :shutting_down, "the server is stopping"}
          :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode(error))
          :gen_tcp.close(socket)
        end)

      c = Client.connect!(port: port)
      assert {:ok, 7 = sub} = Client.subscribe(c, "down")
      assert_receive {:ringbus_closed, ^sub, :shutting_down}
      assert_receive {:ringbus_down, ^c, :shutting_down}
    end

    test "a server that goes away: waiting callers and the owner learn it" do
      # A stand-in server: it takes a subscription, then one request, and closes.
      {port, _server} =
        fake_server(fn socket ->
          {:ok, <<_len::32, 0x0A, corr::32, _::binary>>} = :gen_tcp.recv(socket, 0)
          :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode({:subscribed, corr, 7, 1}))
          {:ok, _request} = :gen_tcp.recv(socket, 0)
          :gen_tcp.close(socket)
        end)

      c = Client.connect!(port: port)
      assert {:ok, 7 = sub} = Client.subscribe(c, "down")
      ref = Process.monitor(c.pid)

      assert {:error, :closed} = Client.len(c, "down")
      assert_receive {:ringbus_closed, ^sub, :closed}
      assert_receive {:ringbus_down, ^c, :closed}
      assert_receive {:DOWN, ^ref, :process, _, _}
      assert {:error, :closed} = Client.ping(c)
      assert {:error, :closed} = Client.push_async(c, "down", "x")
    end

    test "a connection error from the server is the reason the owner gets" do
      {port, _server} =
        fake_server(fn socket ->
          {:ok, _request} = :gen_tcp.recv(socket, 0)
          error = {:error, 0, :idle_timeout, "no frame within the idle timeout"}
          :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode(error))
          :gen_tcp.close(socket)
        end)

      c = Client.connect!(port: port)
      assert {:error, :closed} = Client.ping(c)
      assert_receive {:ringbus_down, ^c, :idle_timeout}
    end

    test "an unknown request error code comes back as its number" do
      {port, _server} =
        fake_server(fn socket ->
          {:ok, <<_len::32, 0x0D, corr::32>>} = :gen_tcp.recv(socket, 0)
          error = {:error, corr, 4242, "from a newer server"}
          :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode(error))
          {:ok, <<_len::32, 0x0D, corr::32>>} = :gen_tcp.recv(socket, 0)
          :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode({:pong, corr}))
          :gen_tcp.recv(socket, 0)
        end)

      c = Client.connect!(port: port)
      assert {:error, 4242} = Client.ping(c)
      assert :ok = Client.ping(c)
      assert_raise Client.Error, ~r/4242/, fn -> raise Client.Error, reason: 4242 end
    end

    @tag server: [idle_timeout: 300]
    test "pings keep an idle subscriber connected", %{port: port} do
      c = connect!(port)
      :ok = Client.create!(c, "idle", capacity: 10)
      sub = Client.subscribe!(c, "idle")
      # Far past the idle timeout, with no request from us: only pings.
      Process.send_after(self(), :late, 1_000)
      assert_receive :late, 2_000
      {:ok, _} = Ringbus.push("idle", "still here")
      assert_receive {:ringbus, ^sub, [{_, "still here"}], 0}
      refute_received {:ringbus_down, _, _}
    end

    test "a client pings every third of the server's idle timeout", %{port: _port} do
      test = self()

      {port, _server} =
        fake_server(
          fn socket ->
            # Count the PINGs that come within twice the timeout.
            deadline = System.monotonic_time(:millisecond) + 1_200
            send(test, {:pings, count_pings(socket, deadline, 0)})
          end,
          600
        )

      c = Client.connect!(port: port)
      # At a third of 600 ms, five or six PINGs come in 1.2 s; at the timeout
      # itself, two at most.
      assert_receive {:pings, pings}, 5_000
      assert pings >= 4
      Client.close(c)
    end

    test "the client closes when its owner exits", %{port: port} do
      test = self()

      owner =
        spawn(fn ->
          send(test, {:client, connect!(port)})
          receive(do: (:stop -> :ok))
        end)

      # A connect takes longer than assert_receive's default on a loaded machine.
      assert_receive {:client, c}, 5_000
      ref = Process.monitor(c.pid)
      send(owner, :stop)
      assert_receive {:DOWN, ^ref, :process, _, :normal}
    end
  end

  # A listener that says HELLO_OK to one client, then runs `fun` on the socket.
  # Frames the binary connections of this node's servers have read.
  defp server_frames_in do
    for %{protocol: :binary, frames_in: n} <- Ringbus.Server.clients(),
        reduce: 0,
        do: (acc -> acc + n)
  end

  defp push_until_closed(_c, corrs, 0), do: corrs

  defp push_until_closed(c, corrs, n) do
    case Client.push_async(c, "lost", "m") do
      {:ok, corr} -> push_until_closed(c, [corr | corrs], n - 1)
      {:error, :backpressure} -> push_until_closed(c, corrs, n - 1)
      {:error, :closed} -> corrs
    end
  end

  defp collect_acks(c, acc) do
    receive do
      {:ringbus_acks, ^c, acks} -> collect_acks(c, acc ++ acks)
    after
      0 -> acc
    end
  end

  defp fake_server(fun, idle_timeout \\ :infinity) do
    {:ok, listen} = :gen_tcp.listen(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    {:ok, port} = :inet.port(listen)

    server =
      spawn_link(fn ->
        {:ok, socket} = :gen_tcp.accept(listen)
        {:ok, <<_len::32, 0x01, corr::32, _::binary>>} = :gen_tcp.recv(socket, 0)

        limits = %{
          max_frame_size: 1_048_576,
          max_payload_size: 1_048_512,
          max_subscriptions: 4,
          max_credit: 100,
          idle_timeout: idle_timeout
        }

        :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode({:hello_ok, corr, 3, limits}))

        fun.(socket)
        :gen_tcp.close(listen)
      end)

    {port, server}
  end

  defp count_pings(socket, deadline, count) do
    case :gen_tcp.recv(socket, 9, max(deadline - System.monotonic_time(:millisecond), 0)) do
      {:ok, <<5::32, 0x0D, corr::32>>} ->
        :ok = :gen_tcp.send(socket, Ringbus.Wire.Frame.encode({:pong, corr}))
        count_pings(socket, deadline, count + 1)

      {:error, :timeout} ->
        count
    end
  end
end
