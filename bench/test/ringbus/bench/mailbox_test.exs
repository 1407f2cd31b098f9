defmodule Ringbus.Bench.MailboxTest do
  use ExUnit.Case, async: true

  require Ringbus.Bench.Mailbox
  alias Ringbus.Bench.Mailbox

  doctest Ringbus.Bench.Mailbox

  defp take_all(mailbox, acc \\ []) do
    case Mailbox.next(mailbox) do
      {:ok, message, mailbox} -> take_all(mailbox, [message | acc])
      :empty -> {:lists.reverse(acc), mailbox}
    end
  end

  test "new/1 validates its options" do
    assert %Mailbox{max_len: 100_000, len: 0, stops: 0} = Mailbox.new()

    assert_raise ArgumentError, ~r/:max_len to be a positive integer/, fn ->
      Mailbox.new(max_len: 0)
    end

    assert_raise ArgumentError, fn -> Mailbox.new(max: 1) end
  end

  test "drain then next keeps the order of arrival across buffer and mailbox" do
    for i <- 1..5, do: send(self(), i)
    mailbox = Mailbox.drain(Mailbox.new())
    assert Mailbox.len(mailbox) == 5
    for i <- 6..8, do: send(self(), i)

    {messages, mailbox} = take_all(mailbox)
    assert messages == Enum.to_list(1..8)
    assert Mailbox.len(mailbox) == 0
  end

  test "a drain between takes keeps the order" do
    for i <- 1..3, do: send(self(), i)
    mailbox = Mailbox.drain(Mailbox.new())
    {:ok, 1, mailbox} = Mailbox.next(mailbox)
    send(self(), 4)
    mailbox = Mailbox.drain(mailbox)
    {messages, _} = take_all(mailbox)
    assert messages == [2, 3, 4]
  end

  test "drain stops at max_len, leaves the rest in the mailbox and counts the stop" do
    for i <- 1..10, do: send(self(), i)
    mailbox = Mailbox.drain(Mailbox.new(max_len: 4))

    assert Mailbox.len(mailbox) == 4
    assert Mailbox.full?(mailbox)
    assert mailbox.stops == 1
    assert {:message_queue_len, 6} = Process.info(self(), :message_queue_len)

    mailbox = Mailbox.drain(mailbox)
    assert mailbox.stops == 2

    {messages, mailbox} = take_all(mailbox)
    assert messages == Enum.to_list(1..10)
    assert mailbox.stops == 2
  end

  test "a full buffer with an empty mailbox is not a stop" do
    send(self(), :a)
    mailbox = Mailbox.drain(Mailbox.new(max_len: 1))
    assert Mailbox.full?(mailbox)
    assert Mailbox.drain(mailbox).stops == 0
  end

  test "next/2 waits for a message and respects its timeout" do
    mailbox = Mailbox.new()
    assert Mailbox.next(mailbox) == :empty

    started = System.monotonic_time(:millisecond)
    assert {:timeout, ^mailbox} = Mailbox.next(mailbox, 50)
    assert System.monotonic_time(:millisecond) - started >= 50

    parent = self()
    spawn(fn -> send(parent, :late) end)
    assert {:ok, :late, _} = Mailbox.next(mailbox, 5_000)
  end

  test "receive_match finds the oldest match in the buffer and keeps the others in order" do
    for m <- [{:a, 1}, {:b, 2}, {:a, 3}, {:b, 4}], do: send(self(), m)
    mailbox = Mailbox.drain(Mailbox.new())

    result =
      Mailbox.receive_match mailbox, 0 do
        {:b, n} -> n
      end

    assert {:ok, 2, mailbox} = result

    result =
      Mailbox.receive_match mailbox, 0 do
        {:b, n} when n > 2 -> n
      end

    assert {:ok, 4, mailbox} = result

    assert {messages, _} = take_all(mailbox)
    assert messages == [{:a, 1}, {:a, 3}]
  end

  test "receive_match finds a match in the mailbox behind a full buffer" do
    for i <- 1..5, do: send(self(), {:n, i})
    send(self(), {:reply, :here})
    mailbox = Mailbox.drain(Mailbox.new(max_len: 2))

    result =
      Mailbox.receive_match mailbox, 0 do
        {:reply, value} -> value
      end

    assert {:ok, :here, mailbox} = result

    assert mailbox.stops >= 1
    {messages, _} = take_all(mailbox)
    assert messages == for(i <- 1..5, do: {:n, i})
  end

  test "receive_match with a pinned reference waits for a later message" do
    tag = make_ref()
    parent = self()
    send(self(), {:reply, make_ref(), :not_this_one})
    spawn(fn -> send(parent, {:reply, tag, :this_one}) end)

    result =
      Mailbox.receive_match Mailbox.new(), 5_000 do
        {:reply, ^tag, value} -> value
      end

    assert {:ok, :this_one, mailbox} = result

    assert {[{:reply, _, :not_this_one}], _} = take_all(mailbox)
  end

  test "receive_match times out on time and loses nothing" do
    for i <- 1..3, do: send(self(), i)
    mailbox = Mailbox.new()
    started = System.monotonic_time(:millisecond)

    result =
      Mailbox.receive_match mailbox, 50 do
        :never -> :never
      end

    assert {:timeout, mailbox} = result

    elapsed = System.monotonic_time(:millisecond) - started
    assert elapsed >= 50
    assert elapsed < 2_000
    assert {[1, 2, 3], _} = take_all(mailbox)
  end

  test "receive_match with :infinity returns as soon as a match arrives" do
    parent = self()
    spawn(fn -> send(parent, :go) end)

    result =
      Mailbox.receive_match Mailbox.new(), :infinity do
        :go -> :went
      end

    assert {:ok, :went, _} = result
  end

  test "receive_match rejects a bad timeout" do
    assert_raise ArgumentError, ~r/expected timeout/, fn ->
      Mailbox.receive_match Mailbox.new(), -1 do
        :x -> :x
      end
    end
  end
end
