defmodule Ringbus.Server.GroupProtocolTest do
  # Version 5's consumer groups over the binary protocol (docs/PROTOCOL.md,
  # section 11): a client written from the field tables, the connection as
  # its consumers' owner, a fetch that waits beside the connection's other
  # requests, what versions 3 and 4 get, and bad input.
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  alias Ringbus.Test.RawClient
  alias Ringbus.Wire.GroupFrame

  @timeout 5_000

  setup do
    server = start_supervised!({Ringbus.Server, [port: 0]})
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
    %{port: Ringbus.Server.port(server)}
  end

  ## A client from the field tables: bytes in, bytes out, no codec of ours.

  defp raw_connect(port) do
    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false], @timeout)
    # HELLO: corr 1, "RBUS", version 5, flags 0, no token.
    send_frame(socket, 0x01, <<1::32, "RBUS", 5::16, 0::16, 0::16>>)
    assert {0x81, <<1::32, 5::16, _limits::binary-size(20)>>} = recv_frame(socket)
    socket
  end

  defp send_frame(socket, opcode, body),
    do: :ok = :gen_tcp.send(socket, <<byte_size(body) + 1::32, opcode, body::binary>>)

  defp recv_frame(socket) do
    {:ok, <<length::32>>} = :gen_tcp.recv(socket, 4, @timeout)
    {:ok, <<opcode, body::binary>>} = :gen_tcp.recv(socket, length, @timeout)
    {opcode, body}
  end

  defp s(binary), do: <<byte_size(binary)::16, binary::binary>>

  # A GROUP_MESSAGES body's messages as {seq, deliveries, payload}.
  defp messages(<<>>), do: []

  defp messages(<<seq::64, n::32, size::32, payload::binary-size(size), rest::binary>>),
    do: [{seq, n, payload} | messages(rest)]

  test "create, fetch, ack, nack, claim and info, written byte by byte", %{port: port} do
    :ok = Ringbus.create("jobs", capacity: 100)
    {:ok, 0} = Ringbus.push_many("jobs", ["a", "b", "c"])
    socket = raw_connect(port)

    # GROUP_CREATE from earliest, ack_wait 60 s, no max_deliver, max_pending 100, no dead letters.
    send_frame(
      socket,
      0x10,
      <<2::32>> <> s("jobs") <> s("workers") <> <<1, 0::64, 60_000::32, 0::32, 100::32, 0::16>>
    )

    assert recv_frame(socket) == {0x82, <<2::32>>}

    # GROUP_FETCH for w1: max 2, no wait.
    send_frame(
      socket,
      0x11,
      <<3::32>> <> s("jobs") <> s("workers") <> s("w1") <> <<2::32, 0::32>>
    )

    assert {0x8D, <<3::32, 0, 2::32, rest::binary>>} = recv_frame(socket)
    assert messages(rest) == [{0, 1, "a"}, {1, 1, "b"}]

    # GROUP_ACK seq 0: one was pending.
    send_frame(socket, 0x12, <<4::32>> <> s("jobs") <> s("workers") <> <<1::32, 0::64>>)
    assert recv_frame(socket) == {0x8E, <<4::32, 1::64>>}

    # GROUP_NACK seq 1, delay 0: due again at once.
    send_frame(socket, 0x13, <<5::32>> <> s("jobs") <> s("workers") <> <<0::32, 1::32, 1::64>>)
    assert recv_frame(socket) == {0x8E, <<5::32, 1::64>>}

    # w2 gets seq 1 again (deliveries 2), then the new seq 2.
    send_frame(
      socket,
      0x11,
      <<6::32>> <> s("jobs") <> s("workers") <> s("w2") <> <<5::32, 0::32>>
    )

    assert {0x8D, <<6::32, 0, 2::32, rest::binary>>} = recv_frame(socket)
    assert messages(rest) == [{1, 2, "b"}, {2, 1, "c"}]

    # GROUP_CLAIM seqs 1 and 7 for w3: 7 is not pending, so left out.
    send_frame(
      socket,
      0x15,
      <<7::32>> <> s("jobs") <> s("workers") <> s("w3") <> <<2::32, 1::64, 7::64>>
    )

    assert {0x8D, <<7::32, 0, 1::32, rest::binary>>} = recv_frame(socket)
    assert messages(rest) == [{1, 3, "b"}]

    # GROUP_INFO: one group, delivered up to 2, two pending, one acked.
    send_frame(socket, 0x19, <<8::32>> <> s("jobs"))
    assert {0x8F, <<8::32, 1::16, body::binary>>} = recv_frame(socket)

    assert <<7::16, "workers", 2::64, 2::64, 0::64, redelivered::64, 1::64, 0::64, 0::64, 0::64,
             0::64, 60_000::32, 0::32, 100::32, 0::16, 3::16, _consumers::binary>> = body

    assert redelivered == 2

    # GROUP_DELETE, then a fetch of it: no_group.
    send_frame(socket, 0x18, <<9::32>> <> s("jobs") <> s("workers"))
    assert recv_frame(socket) == {0x82, <<9::32>>}

    send_frame(
      socket,
      0x11,
      <<10::32>> <> s("jobs") <> s("workers") <> s("w1") <> <<1::32, 0::32>>
    )

    assert {0xFF, <<10::32, 114::16, _message::binary>>} = recv_frame(socket)
  end

  test "versions 3 and 4 have no group frames: unknown_opcode and a close, as before version 5",
       %{port: port} do
    for version <- [3, 4] do
      # Well-formed, and malformed (a group of 0 bytes), alike.
      for body <- [<<2::32, 1::16, "c", 1::16, "g">>, <<2::32, 1::16, "c", 0::16>>] do
        client = RawClient.connect!(port)
        RawClient.send_frames(client, [{:hello, 1, version, 0, nil}])
        {[{:hello_ok, 1, ^version, _}], client} = RawClient.recv(client, 1)
        RawClient.send_raw(client, <<byte_size(body) + 1::32, 0x18, body::binary>>)

        assert RawClient.recv_until_closed(client) ==
                 [{:error, 0, :unknown_opcode, "cannot decode frame: {:unknown_opcode, 24}"}]
      end
    end
  end

  ## Owners and waits, with the codec

  defp hello(port) do
    client = RawClient.connect!(port)
    RawClient.send_frames(client, [{:hello, 1, 5, 0, nil}])
    {[{:hello_ok, 1, 5, _}], client} = RawClient.recv(client, 1)
    client
  end

  defp group!(channel, opts \\ [], channel_opts \\ []) do
    :ok = Ringbus.create(channel, [capacity: 100] ++ channel_opts)
    :ok = Ringbus.Groups.create(channel, "g", [from: :earliest, ack_wait: 60_000] ++ opts)
  end

  test "a closed connection's pending message goes to a waiting fetch of another at once, " <>
         "delivered twice; a fetch that waited in a process of its own is the connection's; " <>
         "on a memory channel and a replicated one",
       %{port: port} do
    for {name, channel_opts} <- [{"owned", []}, {"owned-replicated", [replicas: 1]}] do
      group!(name, [], channel_opts)
      a = hello(port)
      b = hello(port)

      # a's fetch waits (in a process of its own) and gets the push.
      RawClient.send_frames(a, [{:group_fetch, 2, name, "g", "wa", 1, 10_000}])
      waiters = Ringbus.Test.Internals.channel!(name).waiters
      assert eventually(fn -> :ets.info(waiters, :size) > 0 end)
      {:ok, 0} = Ringbus.push(name, "job")
      {[{:group_messages, 2, false, 1, [{0, "job", 1}]}], a} = RawClient.recv(a, 1)

      # The waiting process has ended, but a lives: its message stays its own.
      {reply, b} = RawClient.call(b, {:group_fetch, 3, name, "g", "wb", 1, 0})
      assert reply == {:group_messages, 3, false, 0, []}, name

      RawClient.send_frames(b, [{:group_fetch, 4, name, "g", "wb", 1, 30_000}])
      assert eventually(fn -> :ets.info(waiters, :size) > 0 end)
      started = System.monotonic_time(:millisecond)
      RawClient.close(a)

      {[reply], b} = RawClient.recv(b, 1)
      assert reply == {:group_messages, 4, false, 1, [{0, "job", 2}]}, name
      # Long before the 60 s ack_wait, and the 30 s wait.
      assert System.monotonic_time(:millisecond) - started < 10_000
      RawClient.close(b)
    end
  end

  test "a fetch that waits holds up none of the connection's other requests", %{port: port} do
    group!("slow")
    :ok = Ringbus.create("other", capacity: 10)
    client = hello(port)

    RawClient.send_frames(client, [{:group_fetch, 2, "slow", "g", "w", 10, 30_000}])

    RawClient.send_frames(client, [
      {:push, 3, :ack, "other", "x"},
      {:pull, 4, "other"},
      {:read, 5, "other", 0, 10},
      {:group_info, 6, "slow"},
      {:ping, 7}
    ])

    {frames, client} = RawClient.recv(client, 5)
    corrs = for frame <- frames, do: corr(frame)
    assert Enum.sort(corrs) == [3, 4, 5, 6, 7]
    assert {:pull_ok, 4, 0, "x"} in frames

    {:ok, 0} = Ringbus.push("slow", "late")
    {[reply], _client} = RawClient.recv(client, 1)
    assert reply == {:group_messages, 2, false, 1, [{0, "late", 1}]}
  end

  defp corr({:push_acks, 1, [{corr, _}]}), do: corr
  defp corr(frame), do: elem(frame, 1)

  test "an answer larger than a frame comes in several GROUP_MESSAGES, the last unflagged" do
    server = start_supervised!({Ringbus.Server, [port: 0, max_frame_size: 1024]}, id: :small)
    group!("big")
    payloads = for b <- ~w(a b c), do: String.duplicate(b, 600)
    {:ok, 0} = Ringbus.push_many("big", payloads)

    client = hello(Ringbus.Server.port(server))
    RawClient.send_frames(client, [{:group_fetch, 2, "big", "g", "w", 10, 0}])
    {frames, _client} = RawClient.recv(client, 3)

    assert [
             {:group_messages, 2, true, 1, [{0, a, 1}]},
             {:group_messages, 2, true, 1, [{1, _, 1}]},
             {:group_messages, 2, false, 1, [{2, _, 1}]}
           ] = frames

    assert a == hd(payloads)
  end

  test "bad input is an ERROR; a malformed frame closes its connection and nothing else",
       %{port: port} do
    group!("bad")
    client = hello(port)

    bad = [
      {{:group_fetch, 2, "bad", "nope", "w", 1, 0}, :no_group},
      {{:group_fetch, 3, "bad", "g", "w", GroupFrame.max_fetch() + 1, 0}, :bad_argument},
      {{:group_fetch, 4, "bad", "g", "w", 0, 0}, :bad_argument},
      {{:group_autoclaim, 5, "bad", "g", "w", 0, GroupFrame.max_fetch() + 1}, :bad_argument},
      {{:group_create, 6, "bad", "g2", :earliest, 1000, :infinity, 0, nil}, :bad_argument},
      {{:group_create, 7, "bad", "g", :earliest, 1000, :infinity, 10, nil}, :exists},
      {{:group_fetch, 8, "none", "g", "w", 1, 0}, :no_channel},
      {{:group_nack, 9, "bad", "nope", 0, 1, [0]}, :no_group},
      {{:group_delete, 10, "bad", "nope"}, :no_group}
    ]

    client =
      Enum.reduce(bad, client, fn {frame, reason}, client ->
        {reply, client} = RawClient.call(client, frame)
        assert {:error, corr, ^reason, _message} = reply
        assert corr == elem(frame, 1)
        client
      end)

    # An ack of a group nobody has acks nothing; in_progress says no_group.
    {reply, client} = RawClient.call(client, {:group_ack, 14, "bad", "nope", 1, [0]})
    assert reply == {:group_count, 14, 0}
    {reply, client} = RawClient.call(client, {:group_in_progress, 15, "bad", "nope", 1, [0]})
    assert {:error, 15, :no_group, _} = reply

    {reply, client} = RawClient.call(client, {:ping, 11})
    assert reply == {:pong, 11}

    # GROUP_ACK whose count says 3 and which holds 2 seqs: malformed.
    other = hello(port)
    body = <<12::32, 3::16, "bad", 1::16, "g", 3::32, 0::64, 1::64>>
    RawClient.send_raw(client, <<byte_size(body) + 1::32, 0x12, body::binary>>)
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)

    {reply, _other} = RawClient.call(other, {:group_fetch, 13, "bad", "g", "w", 1, 0})
    assert reply == {:group_messages, 13, false, 0, []}
  end

  test "a connection has at most max_waiting_fetches fetches waiting", %{port: port} do
    group!("many")
    client = hello(port)
    n = GroupFrame.max_waiting_fetches()

    RawClient.send_frames(
      client,
      for(corr <- 1..(n + 1), do: {:group_fetch, corr + 1, "many", "g", "w", 1, 30_000})
    )

    {[reply], client} = RawClient.recv(client, 1)
    assert {:error, corr, :too_many_fetches, _} = reply
    assert corr == n + 2

    {:ok, 0} = Ringbus.push("many", "one")
    {[reply], _client} = RawClient.recv(client, 1)
    assert {:group_messages, _corr, false, 1, [{0, "one", 1}]} = reply
  end

  test "a dead message goes to the dead-letter channel, as with Ringbus.Groups", %{port: port} do
    :ok = Ringbus.create("dl", capacity: 10)
    :ok = Ringbus.create("work", capacity: 10)
    client = hello(port)

    {reply, client} =
      RawClient.call(client, {:group_create, 2, "work", "g", :earliest, 60_000, 1, 10, "dl"})

    assert reply == {:ok, 2}
    {:ok, 0} = Ringbus.push("work", "poison")

    {{:group_messages, 3, false, 1, [{0, "poison", 1}]}, client} =
      RawClient.call(client, {:group_fetch, 3, "work", "g", "w", 1, 0})

    {{:group_count, 4, 1}, client} =
      RawClient.call(client, {:group_nack, 4, "work", "g", 0, 1, [0]})

    {reply, _client} = RawClient.call(client, {:group_fetch, 5, "work", "g", "w", 1, 0})
    assert reply == {:group_messages, 5, false, 0, []}

    assert {:ok, [{0, letter}], 0} = Ringbus.read("dl", 0, 10)

    assert {:ok, %{seq: 0, deliveries: 1, group: "g", payload: "poison"}} =
             Ringbus.Groups.decode_dead_letter(letter)
  end

  test "a fetch that waits on a connection that closes takes nothing", %{port: port} do
    group!("gone")
    a = hello(port)
    RawClient.send_frames(a, [{:group_fetch, 2, "gone", "g", "wa", 1, 30_000}])
    waiters = Ringbus.Test.Internals.channel!("gone").waiters
    assert eventually(fn -> :ets.info(waiters, :size) > 0 end)
    [connection] = for c <- Ringbus.Server.clients(), c.port == port, do: c.pid
    ref = Process.monitor(connection)
    RawClient.close(a)

    # Its process ends with the connection: the next push wakes no one of a's.
    assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
    {:ok, 0} = Ringbus.push("gone", "job")
    b = hello(port)
    {reply, _b} = RawClient.call(b, {:group_fetch, 3, "gone", "g", "wb", 1, 0})
    assert reply == {:group_messages, 3, false, 1, [{0, "job", 1}]}
  end

  test "a server that stops: a fetch still waiting gets no answer but ERROR shutting_down" do
    server = start_supervised!({Ringbus.Server, [port: 0]}, id: :stopping)
    group!("stopping")
    client = hello(Ringbus.Server.port(server))
    RawClient.send_frames(client, [{:group_fetch, 2, "stopping", "g", "w", 1, 30_000}])
    waiters = Ringbus.Test.Internals.channel!("stopping").waiters
    assert eventually(fn -> :ets.info(waiters, :size) > 0 end)

    :ok = stop_supervised(:stopping)
    assert [{:error, 0, :shutting_down, _}] = RawClient.recv_until_closed(client)

    # Its fetch took nothing.
    {:ok, 0} = Ringbus.push("stopping", "job")
    assert Ringbus.Groups.fetch("stopping", "g", "w2", 1) == {:ok, [{0, "job", 1}]}
  end

  test "GROUP_INFO larger than max_frame_size is too_large" do
    server = start_supervised!({Ringbus.Server, [port: 0, max_frame_size: 1024]}, id: :small)
    group!("crowded")
    for i <- 1..50, do: {:ok, []} = Ringbus.Groups.fetch("crowded", "g", "consumer-#{i}", 1)

    client = hello(Ringbus.Server.port(server))
    {reply, _client} = RawClient.call(client, {:group_info, 2, "crowded"})
    assert {:error, 2, :too_large, message} = reply
    assert message =~ "max_frame_size"
  end

  describe "rights" do
    setup do
      tokens = %{"reader" => [read: :all], "writer" => [read: :all, write: :all], "root" => :all}
      server = start_supervised!({Ringbus.Server, [port: 0, tokens: tokens]}, id: :tokens)
      %{port: Ringbus.Server.port(server)}
    end

    # Each group request with the right docs/PROTOCOL.md (section 3) says it needs.
    @requests [
      {{:group_create, 2, "r", "g2", :latest, 1000, :infinity, 10, nil}, :manage},
      {{:group_fetch, 2, "r", "g", "w", 1, 0}, :write},
      {{:group_ack, 2, "r", "g", 1, [0]}, :write},
      {{:group_nack, 2, "r", "g", 0, 1, [0]}, :write},
      {{:group_in_progress, 2, "r", "g", 1, [0]}, :write},
      {{:group_claim, 2, "r", "g", "w", 1, [0]}, :write},
      {{:group_autoclaim, 2, "r", "g", "w", 0, 1}, :write},
      {{:group_remove_consumer, 2, "r", "g", "w"}, :write},
      {{:group_delete, 2, "r", "g"}, :manage},
      {{:group_info, 2, "r"}, :read}
    ]

    test "a group request needs read, write or manage as the rights table says", %{port: port} do
      rights = %{
        "reader" => [:read],
        "writer" => [:read, :write],
        "root" => [:read, :write, :manage]
      }

      for {token, granted} <- rights, {frame, access} <- @requests do
        Ringbus.delete("r")
        group!("r")
        client = RawClient.connect!(port)
        RawClient.send_frames(client, [{:hello, 1, 5, 0, token}])
        {[{:hello_ok, 1, 5, _}], client} = RawClient.recv(client, 1)
        {reply, _client} = RawClient.call(client, frame)
        RawClient.close(client)

        forbidden? = match?({:error, 2, :forbidden, _}, reply)

        assert forbidden? == access not in granted,
               "#{token} #{elem(frame, 0)}: #{inspect(reply)}"
      end
    end
  end
end
