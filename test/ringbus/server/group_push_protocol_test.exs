defmodule Ringbus.Server.GroupPushProtocolTest do
  # Version 7's group subscriptions over the binary protocol
  # (docs/PROTOCOL.md, "Group subscriptions"): GROUP_SUBSCRIBE, GROUP_DELIVER
  # within the credit GROUP_ACK gives back, the connection as the consumer's
  # owner, UNSUBSCRIBE, what versions 3 to 6 get, and bad input.
  use ExUnit.Case, async: false

  import Ringbus.Test.Eventually

  alias Ringbus.Test.RawClient

  setup do
    server = start_supervised!({Ringbus.Server, [port: 0]})
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
    %{port: Ringbus.Server.port(server)}
  end

  defp hello(port, version \\ 7) do
    client = RawClient.connect!(port)
    RawClient.send_frames(client, [{:hello, 1, version, 0, nil}])
    {[{:hello_ok, 1, ^version, _}], client} = RawClient.recv(client, 1)
    client
  end

  defp group!(channel, channel_opts \\ []) do
    :ok = Ringbus.create(channel, [capacity: 100] ++ channel_opts)
    :ok = Ringbus.Groups.create(channel, "g", from: :earliest, ack_wait: 60_000)
  end

  defp subscribe(client, corr, channel, consumer, credit, times? \\ false) do
    frame = {:group_subscribe, corr, channel, "g", consumer, credit, 10, times?}
    {{:subscribed, ^corr, sub_id, _inc}, client} = RawClient.call(client, frame)
    {sub_id, client}
  end

  defp pending(channel) do
    {:ok, [%{pending: pending}]} = Ringbus.Groups.info(channel)
    pending
  end

  # The messages of GROUP_DELIVER frames of `sub_id`, until `count` came.
  defp delivered(client, sub_id, count, acc \\ [])
  defp delivered(client, _sub_id, count, acc) when length(acc) >= count, do: {acc, client}

  defp delivered(client, sub_id, count, acc) do
    {[{:group_deliver, ^sub_id, n, messages}], client} = RawClient.recv(client, 1)
    assert n == length(messages)
    delivered(client, sub_id, count, acc ++ messages)
  end

  for {kind, channel_opts} <- [memory: [], replicated: [replicas: 1]] do
    test "GROUP_DELIVER carries seq and deliveries within the credit; GROUP_ACK gives it back " <>
           "(#{kind})",
         %{port: port} do
      name = "push-#{unquote(kind)}"
      group!(name, unquote(channel_opts))
      {:ok, _} = Ringbus.push_many(name, ["a", "b", "c", "d", "e"])
      client = hello(port)
      {sub, client} = subscribe(client, 2, name, "w1", 2)

      {messages, client} = delivered(client, sub, 2)
      assert messages == [{0, "a", 1}, {1, "b", 1}]

      # No credit left: nothing more is taken, and the next frame is PONG.
      assert eventually(fn -> pending(name) == 2 end)
      {reply, client} = RawClient.call(client, {:ping, 3})
      assert reply == {:pong, 3}
      assert pending(name) == 2

      # An ack of one gives one message of credit back.
      RawClient.send_frames(client, [{:group_ack, 4, name, "g", 1, [0]}])
      {frames, client} = RawClient.recv(client, 2)
      assert {:group_count, 4, 1} in frames
      assert {:group_deliver, sub, 1, [{2, "c", 1}]} in frames

      {reply, client} = RawClient.call(client, {:unsubscribe, 5, sub})
      assert reply == {:ok, 5}
      RawClient.close(client)
    end

    test "a consumer whose connection closes mid-message has it delivered to another at once " <>
           "(#{kind})",
         %{port: port} do
      name = "owner-#{unquote(kind)}"
      group!(name, unquote(channel_opts))
      a = hello(port)
      {sub_a, a} = subscribe(a, 2, name, "wa", 1)
      {:ok, 0} = Ringbus.push(name, "job")
      {[{0, "job", 1}], _a} = delivered(a, sub_a, 1)

      b = hello(port)
      {sub_b, b} = subscribe(b, 2, name, "wb", 1)
      started = System.monotonic_time(:millisecond)
      RawClient.close(a)

      {messages, b} = delivered(b, sub_b, 1)
      assert messages == [{0, "job", 2}]
      # Long before the 60 s ack_wait.
      assert System.monotonic_time(:millisecond) - started < 10_000

      # UNSUBSCRIBE removes the consumer: its message goes on at once too.
      c = hello(port)
      {sub_c, c} = subscribe(c, 2, name, "wc", 1)
      {reply, _b} = RawClient.call(b, {:unsubscribe, 3, sub_b})
      assert reply == {:ok, 3}
      {messages, c} = delivered(c, sub_c, 1)
      assert messages == [{0, "job", 3}]
      RawClient.close(c)
    end
  end

  test "a batch that would pass max_frame_size comes in several GROUP_DELIVERs" do
    server = start_supervised!({Ringbus.Server, [port: 0, max_frame_size: 1024]}, id: :small)
    group!("split")
    payloads = for i <- 0..9, do: String.duplicate(<<?a + i>>, 300)
    {:ok, 0} = Ringbus.push_many("split", payloads)
    client = hello(Ringbus.Server.port(server))
    # Credit and max_batch for all ten, whose 3,000 bytes no frame holds.
    {sub, client} = subscribe(client, 2, "split", "w", 10)
    {frames, client} = RawClient.recv(client, 4)

    for {:group_deliver, ^sub, n, messages} <- frames do
      assert n == length(messages) and n in 1..3
    end

    messages = Enum.flat_map(frames, fn {:group_deliver, ^sub, _n, messages} -> messages end)
    assert messages == for({p, seq} <- Enum.with_index(payloads), do: {seq, p, 1})
    RawClient.close(client)
  end

  test "with the times flag each message carries the time it was stored", %{port: port} do
    group!("timed")
    before = System.system_time(:millisecond)
    {:ok, 0} = Ringbus.push("timed", "x")
    client = hello(port)
    {sub, client} = subscribe(client, 2, "timed", "w", 5, true)
    {[{0, "x", 1, ms}], client} = delivered(client, sub, 1)
    assert ms >= before and ms <= System.system_time(:millisecond)
    RawClient.close(client)
  end

  test "versions 3 to 6 have no GROUP_SUBSCRIBE: unknown_opcode and a close", %{port: port} do
    good = <<2::32, 0, 1::16, "c", 1::16, "g", 1::16, "w", 1::32, 1::32>>
    # A consumer of 0 bytes.
    bad = <<2::32, 0, 1::16, "c", 1::16, "g", 0::16, 1::32, 1::32>>

    for version <- [3, 4, 5, 6], body <- [good, bad] do
      client = hello(port, version)
      RawClient.send_raw(client, <<byte_size(body) + 1::32, 0x1B, body::binary>>)
      frames = RawClient.recv_until_closed(client)
      assert match?([{:error, 0, :unknown_opcode, _}], frames), "version #{version}"
    end
  end

  test "bad input is an ERROR; a malformed GROUP_SUBSCRIBE closes the connection",
       %{port: port} do
    group!("bad")
    client = hello(port)

    RawClient.send_frames(client, [
      {:group_subscribe, 2, "bad", "nope", "w", 1, 1, false},
      {:group_subscribe, 3, "none", "g", "w", 1, 1, false},
      {:group_subscribe, 4, "bad", "g", "w", 0, 1, false},
      {:group_subscribe, 5, "bad", "g", "w", 1, 0, false}
    ])

    {replies, client} = RawClient.recv(client, 4)

    assert [:no_group, :no_channel, :bad_argument, :bad_argument] ==
             Enum.map(replies, fn {:error, _corr, reason, _} -> reason end)

    # CREDIT is not a group subscription's: acks give its credit back.
    {sub, client} = subscribe(client, 6, "bad", "w", 1)
    {reply, client} = RawClient.call(client, {:credit, 7, sub, 1})
    assert {:error, 7, :bad_argument, _} = reply

    # Flags 0x01 is not a GROUP_SUBSCRIBE flag.
    body = <<8::32, 1, 3::16, "bad", 1::16, "g", 1::16, "w", 1::32, 1::32>>
    RawClient.send_raw(client, <<byte_size(body) + 1::32, 0x1B, body::binary>>)
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)
  end

  test "version 7 is version 6 besides: CREATE ends with max_age, one without is malformed",
       %{port: port} do
    client = hello(port)
    {reply, client} = RawClient.call(client, {:create, 2, "v7", 10, :reject, nil, nil, 60_000})
    assert reply == {:ok, 2}
    {{:info_ok, 3, info}, client} = RawClient.call(client, {:info, 3, "v7"})
    assert info.max_age == 60_000

    RawClient.send_frames(client, [{:create, 4, "v7b", 10, :reject, nil, nil}])
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)
  end

  test "a group subscription needs the right to write", %{port: _port} do
    server =
      start_supervised!(
        {Ringbus.Server, [port: 0, tokens: %{"reader" => [read: :all]}]},
        id: :rights
      )

    group!("rights")
    client = RawClient.connect!(Ringbus.Server.port(server))
    RawClient.send_frames(client, [{:hello, 1, 7, 0, "reader"}])
    {[{:hello_ok, 1, 7, _}], client} = RawClient.recv(client, 1)
    frame = {:group_subscribe, 2, "rights", "g", "w", 1, 1, false}
    {reply, _client} = RawClient.call(client, frame)
    assert {:error, 2, :forbidden, _} = reply
  end
end
