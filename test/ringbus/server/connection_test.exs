defmodule Ringbus.Server.ConnectionTest do
  # Drives the server through every opcode with a raw TCP client.
  use ExUnit.Case, async: false

  alias Ringbus.Channel.Ring
  alias Ringbus.Test.RawClient

  import Ringbus.Test.Eventually

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, auto_create: [capacity: 100]})
    port = Ringbus.Server.port(server)
    {client, limits} = RawClient.hello!(port)
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    {:ok, server: server, port: port, client: client, limits: limits}
  end

  test "HELLO_OK states the server's limits", %{limits: limits} do
    assert %{max_frame_size: 16_777_216, max_subscriptions: 64, max_credit: 10_000} = limits
    assert limits.max_payload_size < limits.max_frame_size
  end

  test "create, delete, len, info and ping", %{client: c} do
    assert {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "c1", 10, :reject, nil, nil})

    assert {{:error, 2, :exists, _}, c} =
             RawClient.call(c, {:create, 2, "c1", 10, :reject, nil, nil})

    assert {{:error, 3, :bad_argument, _}, c} =
             RawClient.call(c, {:create, 3, "c2", 0, :reject, nil, nil})

    assert {{:len_ok, 4, 0}, c} = RawClient.call(c, {:len, 4, "c1"})
    assert {{:info_ok, 5, info}, c} = RawClient.call(c, {:info, 5, "c1"})
    assert %{capacity: 10, overflow: :reject, len: 0, pushed: 0} = info
    assert {{:pong, 6}, c} = RawClient.call(c, {:ping, 6})
    assert {{:ok, 7}, c} = RawClient.call(c, {:delete, 7, "c1"})
    assert {{:error, 8, :no_channel, _}, _c} = RawClient.call(c, {:delete, 8, "c1"})
  end

  test "pushes of one read get one combined PUSH_ACKS frame", %{client: c} do
    frames =
      for(i <- 1..50, do: {:push, i, :ack, "acks", "m#{i}"}) ++
        [{:push_batch, 51, :ack, "acks", 3, ["x", "y", "z"]}, {:push, 52, :no_ack, "acks", "q"}]

    RawClient.send_frames(c, frames)
    {[{:push_acks, 51, acks}], c} = RawClient.recv(c, 1)
    assert acks == Enum.map(1..51, &{&1, {:ok, &1 - 1}})

    # The no-ack push was stored all the same.
    assert {{:read_ok, 1, _, 0, 2, [{52, "z"}, {53, "q"}]}, _} =
             RawClient.call(c, {:read, 1, "acks", 52, 10})
  end

  test "tagged pushes among untagged ones in one read: stored once, acked in order", %{
    client: c,
    port: port
  } do
    frames = [
      {:push, 1, :ack, "tags", "a"},
      {:tagged_push, 2, :ack, "tags", {"p", 1}, "t1"},
      {:push, 3, :ack, "tags", "b"},
      # Sent again in the same read, and as a batch under a new tag, twice.
      {:tagged_push, 4, :ack, "tags", {"p", 1}, "t1"},
      {:tagged_push_batch, 5, :ack, "tags", {"p", 2}, 2, ["t2", "t3"]},
      {:tagged_push_batch, 6, :no_ack, "tags", {"p", 2}, 2, ["t2", "t3"]},
      {:tagged_push_batch, 7, :ack, "tags", {"p", 2}, 2, ["t2", "t3"]},
      {:push, 8, :ack, "tags", "c"}
    ]

    RawClient.send_frames(c, frames)
    {[{:push_acks, 7, acks}], c} = RawClient.recv(c, 1)

    assert acks == [
             {1, {:ok, 0}},
             {2, {:ok, 1}},
             {3, {:ok, 2}},
             {4, {:ok, 1}},
             {5, {:ok, 3}},
             {7, {:ok, 3}},
             {8, {:ok, 5}}
           ]

    assert {{:read_ok, 1, _, 0, 6, messages}, c} = RawClient.call(c, {:read, 1, "tags", 0, 10})
    assert Enum.map(messages, &elem(&1, 1)) == ["a", "t1", "b", "t2", "t3", "c"]

    # A second connection resends the tag: the first seq, nothing stored.
    {c2, _} = RawClient.hello!(port)

    assert {{:push_acks, 1, [{9, {:ok, 1}}]}, _} =
             RawClient.call(c2, {:tagged_push, 9, :ack, "tags", {"p", 1}, "t1"})

    # 64 tags on: tag 1 is forgotten.
    frames = for n <- 3..66, do: {:tagged_push, 10, :no_ack, "tags", {"p", n}, "x"}
    RawClient.send_frames(c, frames)

    assert {{:push_acks, 1, [{11, {:error, :stale_tag}}]}, _} =
             RawClient.call(c, {:tagged_push, 11, :ack, "tags", {"p", 1}, "t1"})
  end

  test "pull and read", %{client: c} do
    RawClient.send_frames(c, [{:push_batch, 1, :ack, "pr", 3, ["a", "b", "c"]}])
    {[{:push_acks, 1, [{1, {:ok, 0}}]}], c} = RawClient.recv(c, 1)
    assert {{:pull_ok, 2, 0, "a"}, c} = RawClient.call(c, {:pull, 2, "pr"})

    assert {{:read_ok, 3, _, 1, 2, [{1, "b"}, {2, "c"}]}, c} =
             RawClient.call(c, {:read, 3, "pr", 0, 10})

    assert {{:pull_ok, 4, 1, "b"}, c} = RawClient.call(c, {:pull, 4, "pr"})
    assert {{:pull_ok, 5, 2, "c"}, c} = RawClient.call(c, {:pull, 5, "pr"})
    assert {{:empty, 6}, c} = RawClient.call(c, {:pull, 6, "pr"})
    assert {{:error, 7, :no_channel, _}, _} = RawClient.call(c, {:pull, 7, "nope"})
  end

  test "INFO_OK carries the protocol's fields of a replicated channel, and the connection goes on",
       %{client: c} do
    name = "conn_replica_#{System.unique_integer([:positive])}"
    :ok = Ringbus.create(name, replicas: 1, capacity: 10)
    on_exit(fn -> Ringbus.delete(name) end)
    {:ok, 0} = Ringbus.push(name, "a")

    # Ringbus.info/1 has more (:replicas, :term, ...).
    assert {{:info_ok, 1, info}, c} = RawClient.call(c, {:info, 1, name})
    {:ok, %{incarnation: incarnation}} = Ringbus.info(name)
    assert %{pushed: 1, len: 1, capacity: 10, incarnation: ^incarnation} = info
    refute Map.has_key?(info, :term)
    assert {{:pong, 2}, _c} = RawClient.call(c, {:ping, 2})
  end

  test "a push to a rejecting full channel is reported in PUSH_ACKS, and counted once", %{
    client: c
  } do
    {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "rj", 2, :reject, nil, nil})
    RawClient.send_frames(c, for(i <- 2..4, do: {:push, i, :ack, "rj", "m"}))
    {[{:push_acks, 3, acks}], c} = RawClient.recv(c, 1)
    assert acks == [{2, {:ok, 0}}, {3, {:ok, 1}}, {4, {:error, :full}}]
    assert {{:info_ok, 5, %{rejected: 1, pushed: 2}}, c} = RawClient.call(c, {:info, 5, "rj"})

    # Ten pushes and a batch of two, no-ack ones among them, into room for three.
    {{:ok, 6}, c} = RawClient.call(c, {:create, 6, "rj2", 3, :reject, nil, nil})

    frames =
      for(i <- 7..16, do: {:push, i, if(rem(i, 2) == 0, do: :no_ack, else: :ack), "rj2", "m"}) ++
        [{:push_batch, 17, :ack, "rj2", 2, ["x", "y"]}]

    RawClient.send_frames(c, frames)
    {[{:push_acks, 6, acks}], c} = RawClient.recv(c, 1)

    assert acks ==
             [{7, {:ok, 0}}, {9, {:ok, 2}}] ++
               for(corr <- [11, 13, 15, 17], do: {corr, {:error, :full}})

    # Seqs 0..2 went to pushes 7, 8 and 9; the other seven pushes and the
    # batch's two messages were refused: nine messages, each counted once.
    assert {{:info_ok, 18, %{rejected: 9, pushed: 3}}, _} = RawClient.call(c, {:info, 18, "rj2"})
  end

  test "subscribe, deliveries under credit, credit, unsubscribe", %{client: c} do
    RawClient.send_frames(c, [{:push_batch, 1, :ack, "sub", 5, ~w(a b c d e)}])
    {[{:push_acks, 1, _}], c} = RawClient.recv(c, 1)

    {{:subscribed, 2, sub, _}, c} = RawClient.call(c, {:subscribe, 2, "sub", :earliest, 2, 10})
    # Credit 2: two messages, then nothing until more credit.
    {[{:deliver, ^sub, 0, 2, [{0, "a"}, {1, "b"}]}], c} = RawClient.recv(c, 1)
    assert {{:pong, 3}, c} = RawClient.call(c, {:ping, 3})

    RawClient.send_frames(c, [{:credit, 4, sub, 10}])
    {[{:deliver, ^sub, 0, 3, [{2, "c"}, {3, "d"}, {4, "e"}]}], c} = RawClient.recv(c, 1)

    RawClient.send_frames(c, [{:push, 5, :no_ack, "sub", "f"}])
    {[{:deliver, ^sub, 0, 1, [{5, "f"}]}], c} = RawClient.recv(c, 1)

    assert {{:ok, 6}, c} = RawClient.call(c, {:unsubscribe, 6, sub})
    assert {{:error, 7, :no_subscription, _}, c} = RawClient.call(c, {:unsubscribe, 7, sub})
    assert {{:error, 8, :no_subscription, _}, _} = RawClient.call(c, {:credit, 8, sub, 1})
  end

  test "deleting a channel closes its subscriptions", %{client: c} do
    {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "gone", 10, :drop_oldest, nil, nil})
    {{:subscribed, 2, sub, _}, c} = RawClient.call(c, {:subscribe, 2, "gone", :latest, 10, 10})
    RawClient.send_frames(c, [{:delete, 3, "gone"}])
    {frames, _} = RawClient.recv(c, 2)
    assert {:ok, 3} in frames
    assert {:sub_closed, sub, :no_channel} in frames
  end

  test "a subscriber that lapses learns what it lost", %{client: c} do
    {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "lap", 4, :drop_oldest, nil, nil})
    {{:subscribed, 2, sub, _}, c} = RawClient.call(c, {:subscribe, 2, "lap", :earliest, 1, 10})
    RawClient.send_frames(c, [{:push_batch, 3, :no_ack, "lap", 10, Enum.map(0..9, &"#{&1}")}])
    # The first delivery may catch seq 0 before the batch laps the ring.
    {[{:deliver, ^sub, lost0, 1, [{seq0, _}]}], c} = RawClient.recv(c, 1)
    RawClient.send_frames(c, [{:credit, 4, sub, 100}])
    {[{:deliver, ^sub, lost1, n, messages}], _} = RawClient.recv(c, 1)
    assert lost0 + 1 + lost1 + n == 10
    assert seq0 == lost0
    assert Enum.map(messages, &elem(&1, 0)) == Enum.to_list((10 - n)..9)
  end

  test "a large frame split over many reads is stored whole", %{client: c} do
    payload = :crypto.strong_rand_bytes(5_000_000)

    [bytes] = [
      Ringbus.Wire.Frame.encode({:push, 1, :ack, "big", payload}) |> IO.iodata_to_binary()
    ]

    for <<chunk::binary-size(100_000) <- binary_part(bytes, 0, 5_000_000)>>,
      do: RawClient.send_raw(c, chunk)

    RawClient.send_raw(c, binary_part(bytes, 5_000_000, byte_size(bytes) - 5_000_000))
    {[{:push_acks, 1, [{1, {:ok, 0}}]}], c} = RawClient.recv(c, 1)
    assert {{:pull_ok, 2, 0, ^payload}, _} = RawClient.call(c, {:pull, 2, "big"})
  end

  test "a connection is an OTP process: :sys.get_state and :sys.suspend work", ctx do
    [conn] = Ringbus.Server.connections(ctx.server)
    assert %{session: %Ringbus.Server.Session{stage: :open}} = :sys.get_state(conn)

    # While suspended it handles nothing; resumed, it answers what came meanwhile.
    :ok = :sys.suspend(conn)
    RawClient.send_frames(ctx.client, [{:ping, 1}])

    assert eventually(fn -> match?({:messages, [{:tcp, _, _}]}, Process.info(conn, :messages)) end)

    assert {:error, :timeout} = :gen_tcp.recv(ctx.client.socket, 0, 0)
    :ok = :sys.resume(conn)
    assert {[{:pong, 1}], _} = RawClient.recv(ctx.client, 1)
  end

  test "reads that queued while the connection was busy are answered as one read", ctx do
    {conn, c} = queue_reads(ctx, for(i <- 1..5, do: {:push, i, :ack, "queued", "m#{i}"}))
    :ok = :sys.resume(conn)

    # One combined PUSH_ACKS for the five, in order: one run, one write.
    assert {[{:push_acks, 5, acks}], c} = RawClient.recv(c, 1)
    assert acks == Enum.map(1..5, &{&1, {:ok, &1 - 1}})
    assert {{:pong, 6}, _} = RawClient.call(c, {:ping, 6})
  end

  test "SUB_CLOSED says why: channel deleted, or its anchor gone", %{client: c} do
    {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "why", 10, :drop_oldest, nil, nil})
    {{:subscribed, 2, sub, _}, c} = RawClient.call(c, {:subscribe, 2, "why", :latest, 10, 10})
    Process.exit(Ringbus.Test.Internals.channel!("why").anchor, :kill)
    {[{:sub_closed, ^sub, :internal}], c} = RawClient.recv(c, 1)

    {{:subscribed, 3, sub, _}, c} = RawClient.call(c, {:subscribe, 3, "why", :latest, 10, 10})
    {[{:ok, 4}, {:sub_closed, ^sub, :no_channel}], _} = delete_and_recv(c, "why")
  end

  test "reads queued when the client hangs up are still run", ctx do
    {conn, c} = queue_reads(ctx, for(i <- 1..3, do: {:push, i, :no_ack, "hangup", "m#{i}"}))
    :ok = :gen_tcp.close(c.socket)
    assert eventually(fn -> match?({:messages, [_, _, _, _]}, Process.info(conn, :messages)) end)
    ref = Process.monitor(conn)
    :ok = :sys.resume(conn)
    assert_receive {:DOWN, ^ref, _, _, _}, 5_000
    assert Ringbus.len("hangup") == 3
  end

  # Suspends the connection and sends each frame in a write of its own,
  # each waited for until it is a read of its own in the connection's
  # mailbox (past the first arming's few reads, to one of many small ones).
  defp queue_reads(ctx, frames) do
    [conn] = Ringbus.Server.connections(ctx.server)
    c = Enum.reduce(1..4, ctx.client, fn i, c -> elem(RawClient.call(c, {:ping, i}), 1) end)
    :ok = :sys.suspend(conn)

    frames
    |> Enum.with_index(1)
    |> Enum.each(fn {frame, i} ->
      RawClient.send_frames(c, [frame])
      assert eventually(fn -> reads_queued(conn) == i end)
    end)

    {conn, c}
  end

  defp reads_queued(conn) do
    {:messages, messages} = Process.info(conn, :messages)
    Enum.count(messages, &match?({:tcp, _, _}, &1))
  end

  # OK and SUB_CLOSED come in either order; sorted, OK first.
  defp delete_and_recv(c, name) do
    RawClient.send_frames(c, [{:delete, 4, name}])
    {frames, c} = RawClient.recv(c, 2)
    {Enum.sort_by(frames, &(elem(&1, 0) != :ok)), c}
  end

  test "a stopping server answers what it has read, then says shutting_down and closes", ctx do
    RawClient.send_frames(ctx.client, for(i <- 1..100, do: {:push, i, :ack, "bye", "m"}))
    {[{:push_acks, 100, _}], c} = RawClient.recv(ctx.client, 1)
    [conn] = Ringbus.Server.connections(ctx.server)

    # A read taken in but not yet handled when the stop comes is answered.
    :ok = :sys.suspend(conn)
    RawClient.send_frames(c, for(i <- 101..110, do: {:push, i, :ack, "bye", "m"}))
    assert eventually(fn -> match?({:messages, [_ | _]}, Process.info(conn, :messages)) end)
    :ok = stop_supervised(Ringbus.Server)

    assert [{:push_acks, 10, acks}, {:error, 0, :shutting_down, _}] =
             RawClient.recv_until_closed(c)

    assert Enum.map(acks, &elem(&1, 0)) == Enum.to_list(101..110)
  end

  test "a stopping server closes each subscription with SUB_CLOSED shutting_down", ctx do
    for name <- ~w(s1 s2), do: :ok = Ringbus.create(name, capacity: 10)

    {{:subscribed, 1, a, _}, c} =
      ctx.client |> RawClient.call({:subscribe, 1, "s1", :latest, 10, 10})

    {{:subscribed, 2, b, _}, c} = RawClient.call(c, {:subscribe, 2, "s2", :latest, 10, 10})
    :ok = stop_supervised(Ringbus.Server)

    assert [{:sub_closed, ^a, :shutting_down}, {:sub_closed, ^b, :shutting_down}, error] =
             RawClient.recv_until_closed(c)

    assert {:error, 0, :shutting_down, _} = error
  end

  test "a skipped seq: pipelined pushes are acked with the seqs that hold them, and none is lost",
       %{client: c} do
    {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "stall", 100, :drop_oldest, nil, nil})
    ch = Ringbus.Test.Internals.channel!("stall")

    # A producer reserves seq 0 and stalls; a reader gives up on it.
    {:ok, 0} = Ring.reserve(ch, 1)
    assert Ring.skip(ch, 0)

    # Two pushes in one read: stored as one batch, after the skipped seq.
    RawClient.send_frames(c, [{:push, 2, :ack, "stall", "a"}, {:push, 3, :ack, "stall", "b"}])
    assert {[{:push_acks, 2, [{2, {:ok, 1}}, {3, {:ok, 2}}]}], c} = RawClient.recv(c, 1)

    # The stalled producer comes back and pushes again under a fresh seq.
    assert Ring.commit(ch, 0, "late") == {:ok, 3}

    assert {{:read_ok, 4, _, 0, 3, [{1, "a"}, {2, "b"}, {3, "late"}]}, c} =
             RawClient.call(c, {:read, 4, "stall", 0, 10})

    # A pull passes over the given-up seq; every count balances.
    assert {{:pull_ok, 5, 1, "a"}, c} = RawClient.call(c, {:pull, 5, "stall"})

    assert {{:info_ok, 6, %{pushed: 3, pulled: 1, skipped: 1, len: 2, overwritten: 0}}, _} =
             RawClient.call(c, {:info, 6, "stall"})
  end
end
