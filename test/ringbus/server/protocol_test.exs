defmodule Ringbus.Server.ProtocolTest do
  # The promises of docs/PROTOCOL.md that are not about one opcode: which
  # error wins, limits before and after HELLO, auto-create, the order of
  # answers, and what a subscription says when.
  use ExUnit.Case, async: false

  alias Ringbus.Test.RawClient
  alias Ringbus.Wire.Frame

  defp start_server(opts \\ []) do
    server = start_supervised!({Ringbus.Server, [port: 0] ++ opts})
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
    Ringbus.Server.port(server)
  end

  defp bytes(frames), do: IO.iodata_to_binary(Enum.map(frames, &Frame.encode/1))

  # The one ERROR a connection gets for `first_bytes`, its first bytes.
  defp refusal(port, first_bytes) do
    client = RawClient.connect!(port)
    RawClient.send_raw(client, first_bytes)
    [{:error, 0, code, _message}] = RawClient.recv_until_closed(client)
    code
  end

  describe "the first frame" do
    test "a version 2 HELLO (before incarnations) is refused with bad_version, naming the version spoken" do
      client = RawClient.connect!(start_server())
      RawClient.send_frames(client, [{:hello, 4, 2, 0, nil}])

      assert [{:error, 4, :bad_version, message}] = RawClient.recv_until_closed(client)
      assert message =~ "versions 3, 4, 5, 6 and 7"
    end

    # Written from the field tables: INFO_OK's body after corr is 101 bytes
    # in version 3 and 104 in version 4, whose last three are replicas (u8)
    # and nodes (u16).
    test "a version 3 HELLO gets a version 3 connection; version 4's INFO_OK adds replicas and nodes" do
      port = start_server()
      :ok = Ringbus.create("v4-memory", capacity: 10)
      :ok = Ringbus.create("v4-replicated", capacity: 10, replicas: 1)
      on_exit(fn -> Ringbus.delete("v4-replicated") end)
      nodes = length(Node.list()) + 1

      info_body = fn version, name ->
        client = RawClient.connect!(port)
        RawClient.send_frames(client, [{:hello, 1, version, 0, nil}])
        {[{:hello_ok, 1, ^version, _}], client} = RawClient.recv(client, 1)
        RawClient.send_frames(client, [{:info, 2, name}])
        {:ok, <<length::32>>} = :gen_tcp.recv(client.socket, 4, 5_000)
        {:ok, <<0x88, 2::32, body::binary>>} = :gen_tcp.recv(client.socket, length, 5_000)
        RawClient.close(client)
        body
      end

      assert byte_size(info_body.(3, "v4-memory")) == 101
      assert <<_::binary-size(101), 0, ^nodes::16>> = info_body.(4, "v4-memory")
      assert <<_::binary-size(101), 1, ^nodes::16>> = info_body.(4, "v4-replicated")
    end

    test "HELLO's flags: bits the server does not know are ignored" do
      client = RawClient.connect!(start_server())
      RawClient.send_frames(client, [{:hello, 5, 3, 0xFFFF, nil}])
      assert {[{:hello_ok, 5, 3, _limits}], client} = RawClient.recv(client, 1)
      assert {{:pong, 6}, _} = RawClient.call(client, {:ping, 6})
    end

    test "which error wins: decoding, then not HELLO, then version, then token" do
      port = start_server(tokens: %{"t" => :all})
      hello = bytes([{:hello, 0, 3, 0, "t"}])

      # A length over the pre-HELLO limit, whatever follows.
      assert refusal(port, <<65_551::32, 0x01>>) == :frame_too_large
      # A request opcode with a broken body, before anything else is judged.
      assert refusal(port, <<0, 0, 0, 3, 0x0D, 0, 1>>) == :bad_frame
      # A server opcode, or one no version has.
      assert refusal(port, bytes([{:pong, 0}])) == :unknown_opcode
      assert refusal(port, <<0, 0, 0, 5, 0x77, 0, 0, 0, 0>>) == :unknown_opcode
      # A good frame that is not HELLO.
      assert refusal(port, bytes([{:ping, 0}])) == :not_hello_first
      # A HELLO whose magic is wrong is malformed.
      <<head::binary-size(9), _magic::binary-size(4), rest::binary>> = hello
      assert refusal(port, head <> "XBUS" <> rest) == :bad_frame
      # Version before token: a wrong version with a wrong token.
      assert refusal(port, bytes([{:hello, 0, 1, 0, "wrong"}])) == :bad_version
      assert refusal(port, bytes([{:hello, 0, 3, 0, "wrong"}])) == :auth_failed
    end

    test "the largest HELLO is taken, one byte more is refused, whatever max_frame_size" do
      port = start_server(max_frame_size: 1024)
      token = :binary.copy("t", 0xFFFF)
      largest = bytes([{:hello, 0, 3, 0, token}])
      assert byte_size(largest) == 4 + Frame.max_hello_frame_size()

      client = RawClient.connect!(port)
      RawClient.send_raw(client, largest)
      # Read whole, then judged: no tokens are configured, so any is fine.
      assert {[{:hello_ok, 0, 3, %{max_frame_size: 1024}}], client} = RawClient.recv(client, 1)

      # After HELLO the server's own limit holds.
      RawClient.send_frames(client, [{:push, 1, :ack, "big", :binary.copy("x", 2000)}])
      assert [{:error, 0, :frame_too_large, _}] = RawClient.recv_until_closed(client)

      assert refusal(port, <<Frame.max_hello_frame_size() + 1::32, 0x01>>) == :frame_too_large
    end

    test "every byte after HELLO meets max_frame_size, however TCP splits it" do
      port = start_server()
      push = {:push, 1, :ack, "after-hello", :binary.copy("x", 100_000)}
      both = bytes([{:hello, 0, 3, 0, nil}, push])

      # In one write, and split inside the HELLO, at its end, and inside the push.
      for at <- [byte_size(both), 10, 19, 30] do
        client = RawClient.connect!(port)
        <<a::binary-size(at), b::binary>> = both
        RawClient.send_raw(client, a)
        if b != "", do: Process.sleep(20) && RawClient.send_raw(client, b)

        assert {[{:hello_ok, 0, 3, _}, {:push_acks, 1, [{1, {:ok, _}}]}], _} =
                 RawClient.recv(client, 2)
      end
    end
  end

  describe "channels created by a push" do
    test "the default server creates a channel on its first push, with its auto_create options" do
      port = start_server(auto_create: [capacity: 7, overflow: :reject])
      {c, _} = RawClient.hello!(port)
      RawClient.send_frames(c, [{:push, 1, :ack, "auto", "x"}])
      assert {[{:push_acks, 1, [{1, {:ok, 0}}]}], c} = RawClient.recv(c, 1)

      assert {{:info_ok, 2, %{capacity: 7, overflow: :reject, len: 1}}, _} =
               RawClient.call(c, {:info, 2, "auto"})
    end

    test "with auto_create: false a push to a missing channel is no_channel" do
      port = start_server(auto_create: false)
      {c, _} = RawClient.hello!(port)
      RawClient.send_frames(c, [{:push, 1, :ack, "manual", "x"}])
      assert {[{:push_acks, 1, [{1, {:error, :no_channel}}]}], _} = RawClient.recv(c, 1)
      assert Ringbus.info("manual") == {:error, :no_channel}
    end
  end

  describe "answers" do
    setup do
      {c, _} = RawClient.hello!(start_server())
      {:ok, c: c}
    end

    test "corr 0 is answered like any other, carrying 0", %{c: c} do
      assert {{:pong, 0}, _} = RawClient.call(c, {:ping, 0})
    end

    test "READ returns at most 1,000 messages", %{c: c} do
      {:ok, 0} = Ringbus.push_many(create!("many"), Enum.map(1..1_500, &"#{&1}"))

      assert {{:read_ok, 1, _, 0, 1_000, messages}, c} =
               RawClient.call(c, {:read, 1, "many", 0, 5_000})

      assert List.last(messages) == {999, "1000"}

      assert {{:read_ok, 2, _, 0, 500, _}, _} =
               RawClient.call(c, {:read, 2, "many", 1_000, 5_000})
    end

    test "DELETE of a channel this connection subscribes to: OK, then SUB_CLOSED", %{c: c} do
      create!("del")
      {{:subscribed, 1, sub, _}, c} = RawClient.call(c, {:subscribe, 1, "del", :latest, 10, 10})
      RawClient.send_frames(c, [{:delete, 2, "del"}])
      assert {[{:ok, 2}, {:sub_closed, ^sub, :no_channel}], _} = RawClient.recv(c, 2)
    end

    test "after UNSUBSCRIBE's OK no DELIVER and no SUB_CLOSED follows", %{c: c} do
      create!("unsub")
      {{:subscribed, 1, sub, _}, c} = RawClient.call(c, {:subscribe, 1, "unsub", :latest, 10, 10})
      {:ok, _} = Ringbus.push("unsub", "before")
      assert {[{:deliver, ^sub, 0, 1, _}], c} = RawClient.recv(c, 1)

      assert {{:ok, 2}, c} = RawClient.call(c, {:unsubscribe, 2, sub})
      {:ok, _} = Ringbus.push("unsub", "after")
      :ok = Ringbus.delete("unsub")
      # The next answer is the PONG: nothing for the subscription came before it.
      assert {{:pong, 3}, _} = RawClient.call(c, {:ping, 3})
    end
  end

  describe "subscriptions" do
    setup do
      {c, _} = RawClient.hello!(start_server())
      {:ok, c: c}
    end

    test "a DELIVER with lost alone: the messages at its seq are gone, none after them yet",
         %{c: c} do
      {:ok, 0} = Ringbus.push_many(create!("drained"), ~w(a b c))
      for _ <- 1..3, do: {:ok, _, _} = Ringbus.pull("drained")

      {{:subscribed, 1, sub, _}, c} = RawClient.call(c, {:subscribe, 1, "drained", 0, 10, 10})
      assert {[{:deliver, ^sub, 3, 0, []}], c} = RawClient.recv(c, 1)

      {:ok, 3} = Ringbus.push("drained", "d")
      assert {[{:deliver, ^sub, 0, 1, [{3, "d"}]}], _} = RawClient.recv(c, 1)
    end

    test "a SUBSCRIBE from a seq past next_seq waits for it, and counts nothing before it lost",
         %{c: c} do
      {:ok, 0} = Ringbus.push_many(create!("ahead"), ~w(a b))
      {{:subscribed, 1, sub, _}, c} = RawClient.call(c, {:subscribe, 1, "ahead", 5, 10, 10})

      {:ok, 2} = Ringbus.push_many("ahead", ~w(c d e f))
      assert {[{:deliver, ^sub, 0, 1, [{5, "f"}]}], _} = RawClient.recv(c, 1)
    end
  end

  describe "incarnations" do
    setup do
      {c, _} = RawClient.hello!(start_server())
      {:ok, c: c}
    end

    # Bytes written from the field tables of docs/PROTOCOL.md, not by the codec.
    test "READ with the incarnation flag, byte by byte: READ_OK names it; after a re-create, 113",
         %{c: c} do
      {:ok, 0} = Ringbus.push_many(create!("inc-raw"), ~w(a b))
      {:ok, %{incarnation: inc}} = Ringbus.info("inc-raw")

      read = fn corr ->
        body = <<0x07, corr::32, 0x01, 7::16, "inc-raw", inc::64, 1::64, 10::32>>
        RawClient.send_raw(c, [<<byte_size(body)::32>>, body])
        {:ok, <<length::32>>} = :gen_tcp.recv(c.socket, 4, 5_000)
        {:ok, frame} = :gen_tcp.recv(c.socket, length, 5_000)
        frame
      end

      # READ_OK: corr, incarnation, lost 0, count 1, then seq 1 and payload "b".
      assert read.(1) == <<0x86, 1::32, inc::64, 0::64, 1::32, 1::64, 1::32, "b">>

      :ok = Ringbus.delete("inc-raw")
      {:ok, 0} = Ringbus.push_many(create!("inc-raw"), ~w(x y))

      # ERROR: corr 2, code 113, then a message.
      assert <<0xFF, 2::32, 113::16, _::binary>> = read.(2)
    end

    test "READ_OK, SUBSCRIBED and INFO_OK carry the channel's incarnation", %{c: c} do
      {:ok, 0} = Ringbus.push(create!("inc-all"), "a")
      {:ok, %{incarnation: inc}} = Ringbus.info("inc-all")

      assert {{:read_ok, 1, ^inc, 0, 1, [{0, "a"}]}, c} =
               RawClient.call(c, {:read, 1, "inc-all", 0, 10})

      assert {{:subscribed, 2, _, ^inc}, c} =
               RawClient.call(c, {:subscribe, 2, "inc-all", :earliest, 10, 10})

      assert {[{:deliver, _, 0, 1, [{0, "a"}]}], c} = RawClient.recv(c, 1)
      assert {{:info_ok, 3, %{incarnation: ^inc}}, _} = RawClient.call(c, {:info, 3, "inc-all"})
    end

    test "a resume after DELETE and CREATE answers new_incarnation; the old-free read goes on",
         %{c: c} do
      {:ok, 0} = Ringbus.push_many(create!("inc-resume"), ~w(a b c))

      assert {{:read_ok, 1, inc, 0, 2, [{0, "a"}, {1, "b"}]}, c} =
               RawClient.call(c, {:read, 1, "inc-resume", 0, 2})

      assert {{:read_ok, 2, ^inc, 0, 1, [{2, "c"}]}, c} =
               RawClient.call(c, {:read, 2, "inc-resume", 2, 10, inc})

      :ok = Ringbus.delete("inc-resume")
      {:ok, 0} = Ringbus.push_many(create!("inc-resume"), ~w(x y z w))

      assert {{:error, 3, :new_incarnation, _}, c} =
               RawClient.call(c, {:read, 3, "inc-resume", 3, 10, inc})

      assert {{:error, 4, :new_incarnation, _}, c} =
               RawClient.call(c, {:subscribe, 4, "inc-resume", 3, 10, 10, inc})

      # Stating none, the reader gets the new incarnation with the messages.
      assert {{:read_ok, 5, new, 0, 1, [{3, "w"}]}, c} =
               RawClient.call(c, {:read, 5, "inc-resume", 3, 10})

      assert new != inc

      assert {{:subscribed, 6, sub, ^new}, c} =
               RawClient.call(c, {:subscribe, 6, "inc-resume", 3, 10, 10, new})

      assert {[{:deliver, ^sub, 0, 1, [{3, "w"}]}], c} = RawClient.recv(c, 1)
      assert {{:error, 7, :no_channel, _}, _} = RawClient.call(c, {:read, 7, "inc-no", 0, 1, inc})
    end
  end

  # What docs/PROTOCOL.md once left unsaid, as it now says it.
  describe "settled silences" do
    setup do
      {c, _} = RawClient.hello!(start_server())
      {:ok, c: c}
    end

    test "SUBSCRIBE or READ stating the incarnation of a channel deleted and not made again: no_channel",
         %{c: c} do
      {:ok, _} = Ringbus.push(create!("gone"), "a")
      {:ok, inc} = Ringbus.incarnation("gone")
      :ok = Ringbus.delete("gone")

      assert {{:error, 1, :no_channel, _}, c} =
               RawClient.call(c, {:subscribe, 1, "gone", 0, 10, 10, inc})

      assert {{:error, 2, :no_channel, _}, _} = RawClient.call(c, {:read, 2, "gone", 0, 10, inc})
    end

    test "READ with max 0: no messages, and lost as a READ from there would count it", %{c: c} do
      :ok = Ringbus.create("max0", capacity: 5)
      {:ok, 0} = Ringbus.push_many("max0", ~w(a b c d e f g h))
      {:ok, inc} = Ringbus.incarnation("max0")

      assert {{:read_ok, 1, ^inc, 3, 0, []}, c} = RawClient.call(c, {:read, 1, "max0", 0, 0})
      assert {{:read_ok, 2, ^inc, 0, 0, []}, c} = RawClient.call(c, {:read, 2, "max0", 4, 0})
      assert {{:read_ok, 3, ^inc, 0, 0, []}, _} = RawClient.call(c, {:read, 3, "max0", 99, 0})
    end

    test "a drop_oldest PUSH_BATCH of more messages than the capacity: taken, its first ones overwritten at once",
         %{c: c} do
      :ok = Ringbus.create("lap", capacity: 5)
      :ok = Ringbus.create("lap-reject", capacity: 5, overflow: :reject)
      batch = ~w(a b c d e f g h)

      assert {{:push_acks, 1, [{1, {:ok, 0}}]}, c} =
               RawClient.call(c, {:push_batch, 1, :ack, "lap", 8, batch})

      assert {:ok, %{len: 5, overwritten: 3, first_seq: 3, next_seq: 8}} = Ringbus.info("lap")

      assert {{:read_ok, 2, _, 3, 5, [{3, "d"} | _]}, c} =
               RawClient.call(c, {:read, 2, "lap", 0, 10})

      # A reject channel refuses it whole.
      assert {{:push_acks, 1, [{3, {:error, :full}}]}, _} =
               RawClient.call(c, {:push_batch, 3, :ack, "lap-reject", 8, batch})

      assert {:ok, %{len: 0, rejected: 8, next_seq: 0}} = Ringbus.info("lap-reject")
    end

    # Memory and replicated channels keep tags by the same rules.
    test "producer tags: 64 below the highest is stale; one below it within 64, never sent, is stored once",
         %{c: c} do
      :ok = Ringbus.create("tags-memory", capacity: 1_000)
      :ok = Ringbus.create("tags-replicated", capacity: 1_000, replicas: 1)
      on_exit(fn -> Ringbus.delete("tags-replicated") end)

      for name <- ["tags-memory", "tags-replicated"] do
        push = fn producer, n ->
          {{:push_acks, 1, [{_, result}]}, _} =
            RawClient.call(c, {:tagged_push, n, :ack, name, {producer, n}, "m#{n}"})

          result
        end

        for n <- 1..100, do: {:ok, _} = push.("p", n)
        assert push.("p", 36) == {:error, :stale_tag}, name
        assert push.("p", 37) == {:ok, 36}, name

        # "q" sends 1 and 100: 50 is within 64 of 100 and was never sent.
        {:ok, _} = push.("q", 1)
        {:ok, _} = push.("q", 100)
        assert {:ok, seq} = push.("q", 50), name
        assert push.("q", 50) == {:ok, seq}, name
        assert push.("q", 36) == {:error, :stale_tag}, name
        assert {:ok, %{next_seq: 103}} = Ringbus.info(name)
      end
    end

    test "a producer forgotten past the 1,024-producer bound that sends a tag again is stored again",
         %{c: c} do
      :ok = Ringbus.create("tags-many", capacity: 2_000)
      frames = for p <- 0..1_024, do: {:tagged_push, p + 1, :ack, "tags-many", {"p#{p}", 1}, "x"}
      RawClient.send_frames(c, frames)
      {acks, c} = recv_acks(c, 1_025, [])
      assert Enum.all?(acks, &match?({_, {:ok, _}}, &1))

      # "p0" was seen least recently: forgotten for "p1024".
      assert {{:push_acks, 1, [{9, {:ok, 1_025}}]}, _} =
               RawClient.call(c, {:tagged_push, 9, :ack, "tags-many", {"p0", 1}, "x"})
    end
  end

  defp recv_acks(c, 0, acc), do: {acc, c}

  defp recv_acks(c, left, acc) do
    {[{:push_acks, n, acks}], c} = RawClient.recv(c, 1)
    recv_acks(c, left - n, acc ++ acks)
  end

  describe "incarnation 0" do
    setup do
      {c, _} = RawClient.hello!(start_server())
      {:ok, c: c}
    end

    # Incarnations are drawn non-zero: stating 0 is a field out of its range.
    test "READ and SUBSCRIBE stating incarnation 0 get bad_argument; the connection stays open",
         %{c: c} do
      {:ok, 0} = Ringbus.push(create!("inc-zero"), "a")

      for name <- ["inc-zero", "inc-zero-none"] do
        assert {{:error, 1, :bad_argument, message}, ^c} =
                 RawClient.call(c, {:read, 1, name, 0, 10, 0})

        assert message =~ "incarnation"

        assert {{:error, 2, :bad_argument, _}, ^c} =
                 RawClient.call(c, {:subscribe, 2, name, 0, 10, 10, 0})
      end

      assert {{:pong, 3}, c} = RawClient.call(c, {:ping, 3})

      assert {{:read_ok, 4, _, 0, 1, [{0, "a"}]}, _} =
               RawClient.call(c, {:read, 4, "inc-zero", 0, 10})
    end
  end

  defp create!(name) do
    :ok = Ringbus.create(name, capacity: 10_000)
    name
  end
end
