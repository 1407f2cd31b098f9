defmodule Ringbus.Cluster.LinkTest do
  # One link in this VM, with the test process as its peer: the protocol
  # between two links, message by message. The link is to a node that does
  # not exist; its row is removed at the end. Not async: the row is in this
  # VM's links table, which `cluster_test.exs` reads.
  use ExUnit.Case, async: false

  alias Ringbus.Cluster.{Config, Link, Links}

  # A long busy_timeout unless a test asks otherwise, so that no timer of
  # the link's own flushes for it.
  setup ctx do
    node = :"link_test_#{System.unique_integer([:positive])}@nowhere"
    config = Config.new!(ctx[:link_config] || [call_timeout: 200, busy_timeout: 60_000])

    link =
      start_supervised!({Link, %{node: node, counters: Links.counters(node), config: config}})

    on_exit(fn -> :ets.delete(:ringbus_cluster_links, node) end)

    %{node: node, link: link}
  end

  test "with no peer yet, the node is down", %{node: node} do
    assert Links.call(node, "x", :len) == {:error, :node_down}
    assert Links.ack(node, {self(), make_ref()}, 1) == {:error, :no_subscription}
  end

  test "requests go out in one batch and their answers come back to each caller", ctx do
    %{node: node, link: link} = ctx
    connect(link)

    callers = for i <- 1..3, do: Task.async(fn -> Links.call(node, "ch", {:read, i, 10}) end)
    calls = receive_items(link, 3)

    assert [
             {:call, r1, "ch", {:read, 1, 10}},
             {:call, r2, "ch", {:read, 2, 10}},
             {:call, r3, "ch", {:read, 3, 10}}
           ] = Enum.sort_by(calls, &elem(elem(&1, 3), 1))

    send(
      link,
      {:ringbus_batch, self(), 1, 0,
       [{:reply, r2, :two}, {:reply, r1, :one}, {:reply, r3, :three}]}
    )

    assert Task.await_many(callers) == [:one, :two, :three]
  end

  test "whatever comes between, what is handed to the link is sent", ctx do
    %{link: link} = ctx
    peer = connect(link)

    # A message that changes nothing must not cancel the flush the one
    # before it asked for.
    :sys.suspend(link)
    send(link, {:ringbus_cast, {:dir, :first}})
    send(link, {:ringbus_link_peer, peer})
    :sys.resume(link)
    assert [{:dir, :first}] = receive_items(link, 1)

    :sys.suspend(link)
    send(link, {:ringbus_cast, {:dir, :second}})
    send(link, :something_else)
    :sys.resume(link)
    assert [{:dir, :second}] = receive_items(link, 1)
  end

  @tag link_config: [call_timeout: 50, reply_timeout: 200, busy_timeout: 300]
  test "a request that left and got no answer is a timeout; an unacknowledged batch makes the link busy",
       ctx do
    %{node: node, link: link} = ctx
    connect(link)

    # It left at once, so the caller waits reply_timeout, not call_timeout,
    # and cannot tell whether it was carried out.
    {micros, answer} = :timer.tc(fn -> Links.call(node, "ch", :len) end)
    assert answer == {:error, :timeout}
    assert micros >= 200_000 and micros < 2_000_000

    # The batch is still unacknowledged past busy_timeout: refused at once.
    assert [_call] = receive_items(link, 1)
    assert eventually(fn -> Links.info()[node].state == :busy end)
    {micros, answer} = :timer.tc(fn -> Links.call(node, "ch", :len) end)
    assert answer == {:error, :node_busy}
    assert micros < 100_000

    # Acknowledged: up again.
    send(link, {:ringbus_batch, self(), 0, 1_000, []})
    assert eventually(fn -> Links.info()[node].state == :up end)
  end

  @tag link_config: [call_timeout: 50, reply_timeout: 100, busy_timeout: 60_000]
  test "callers count their calls by outcome: answered, refused, timed out", ctx do
    %{node: node, link: link} = ctx
    assert %{calls_ok: 0, calls_refused: 0, calls_timeout: 0} = Links.info()[node]
    assert Links.call(node, "ch", :len) == {:error, :node_down}
    connect(link)

    # Answered, even with an error: the call was carried out.
    caller = Task.async(fn -> Links.call(node, "ch", :len) end)
    [{:call, ref, "ch", :len}] = receive_items(link, 1)
    send(link, {:ringbus_batch, self(), 1, 1, [{:reply, ref, {:error, :no_channel}}]})
    assert Task.await(caller) == {:error, :no_channel}

    # Left and never answered: unknown.
    assert Links.call(node, "ch", :len) == {:error, :timeout}
    [{:call, _, "ch", :len}] = receive_items(link, 1)

    # Never left: refused.
    :sys.suspend(link)
    assert Links.call(node, "ch", :len, 20) == {:error, :node_busy}
    :sys.resume(link)

    assert %{calls_ok: 1, calls_refused: 2, calls_timeout: 1} = Links.info()[node]
  end

  test "a request whose caller gave up before it left is not sent", ctx do
    %{node: node, link: link} = ctx
    peer = connect(link)
    :sys.suspend(link)
    caller = Task.async(fn -> Links.call(node, "ch", :len, 50) end)
    assert Task.await(caller) == {:error, :node_busy}
    :sys.resume(link)
    send(link, {:ringbus_cast, {:dir, :after}})
    send(link, {:ringbus_link_peer, peer})

    assert [{:dir, :after}] = receive_items(link, 1)
    assert Links.info()[ctx.node].drops == 1
  end

  test "a link that stops: a request it sent has an unknown outcome, one it held was not sent",
       ctx do
    %{node: node, link: link} = ctx
    connect(link)
    sent = Task.async(fn -> Links.call(node, "ch", {:push, "a"}, 5_000) end)
    assert [{:call, _ref, "ch", {:push, "a"}}] = receive_items(link, 1)

    # The next one stays in the link, which stops before it can send it.
    :sys.suspend(link)
    held = Task.async(fn -> Links.call(node, "ch", {:push, "b"}, 5_000) end)
    assert eventually(fn -> Process.info(link, :message_queue_len) == {:message_queue_len, 1} end)
    send(link, {:ringbus_link_down, {:node_down, :connection_closed}})
    :sys.resume(link)

    assert Task.await(sent) == {:error, :timeout}
    assert Task.await(held) == {:error, :node_down}
  end

  @tag link_config: [call_timeout: 50, reply_timeout: 100, busy_timeout: 60_000]
  test "a subscription whose caller gave up waiting is ended when its answer comes", ctx do
    %{node: node, link: link} = ctx
    connect(link)
    caller = Task.async(fn -> Links.call(node, "ch", {:subscribe, [], self()}) end)
    [{:call, ref, "ch", {:subscribe, []}}] = receive_items(link, 1)
    assert Task.await(caller) == {:error, :timeout}

    sub = {spawn(fn -> :ok end), make_ref()}
    send(link, {:ringbus_batch, self(), 1, 1, [{:reply, ref, {:ok, sub}}]})
    assert [{:unsubscribe, ^sub}] = receive_items(link, 1)
  end

  test "credit is added up per subscription and sent with the next batch", ctx do
    %{node: node, link: link} = ctx
    connect(link)
    sub = {spawn(fn -> :ok end), make_ref()}
    :sys.suspend(link)
    for n <- [1, 2, 3], do: assert(Links.ack(node, sub, n) == :ok)
    :sys.resume(link)

    assert [{:ack, ^sub, 6}] = receive_items(link, 1)
  end

  test "when the node goes down its remote subscribers are told", ctx do
    %{node: node, link: link} = ctx
    connect(link)
    sub = {spawn(fn -> :ok end), make_ref()}

    caller =
      Task.async(fn ->
        Links.call(node, "ch", {:subscribe, [], self()}) |> then(&{&1, receive_closed()})
      end)

    [{:call, ref, "ch", {:subscribe, []}}] = receive_items(link, 1)

    send(
      link,
      {:ringbus_batch, self(), 1, 1, [{:reply, ref, {:ok, sub}}, {:deliver, sub, [{0, "a"}], 0}]}
    )

    send(link, {:ringbus_link_down, {:node_down, :connection_closed}})

    assert {{:ok, ^sub}, [{:ringbus, ^sub, [{0, "a"}], 0}, {:ringbus_closed, ^sub, :node_down}]} =
             Task.await(caller)

    assert eventually(fn -> Links.info()[node].state == :down end)
  end

  defp receive_closed(acc \\ []) do
    receive do
      {:ringbus_closed, _, _} = closed -> :lists.reverse([closed | acc])
      {:ringbus, _, _, _} = batch -> receive_closed([batch | acc])
    after
      5_000 -> :lists.reverse(acc)
    end
  end

  # Makes the test process the link's peer and takes what the directory
  # sends first (its sync).
  defp connect(link) do
    send(link, {:ringbus_link_peer, self()})
    assert [{:dir, {:sync, _, _}}] = receive_items(link, 1)
    self()
  end

  # The items of the link's next batches, `count` of them (acks aside).
  defp receive_items(link, count, acc \\ []) do
    if length(acc) >= count do
      acc
    else
      receive do
        {:ringbus_batch, ^link, _seq, _ack, []} -> receive_items(link, count, acc)
        {:ringbus_batch, ^link, _seq, _ack, items} -> receive_items(link, count, acc ++ items)
      after
        5_000 -> flunk("the link sent #{length(acc)} of #{count} items")
      end
    end
  end

  defp eventually(check), do: Ringbus.Test.Eventually.eventually(check)
end
