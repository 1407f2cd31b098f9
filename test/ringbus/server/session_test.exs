defmodule Ringbus.Server.SessionTest do
  # The protocol as functions: frames and a session in, frames and a session
  # out, with no socket and no connection process.
  use ExUnit.Case, async: true

  import Bitwise

  alias Ringbus.Server.{Config, Session}
  alias Ringbus.Wire.Decoder

  setup do
    prefix = "session-#{System.unique_integer([:positive])}-"

    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, prefix),
          do: Ringbus.delete(name)
    end)

    {:ok, prefix: prefix}
  end

  defp open(opts \\ []) do
    session = Session.new(Config.new!([port: 0] ++ opts))

    assert {:ok, [{:hello_ok, 1, 3, _limits}], session} =
             Session.handle([{:hello, 1, 3, 0, nil}], session)

    assert Session.open?(session)
    session
  end

  test "the first frame must be HELLO, and nothing after a connection error runs" do
    session = Session.new(Config.new!(port: 0))

    assert {{:close, :not_hello_first}, [{:error, 0, :not_hello_first, _}], _} =
             Session.handle([{:ping, 1}, {:ping, 2}], session)

    assert {{:close, :bad_version}, [{:error, 7, :bad_version, _}], _} =
             Session.handle([{:hello, 7, 1, 0, nil}], session)
  end

  test "a HELLO without a token is refused when tokens are required" do
    session = Session.new(Config.new!(port: 0, tokens: %{"t" => :all}))

    assert {{:close, :auth_failed}, [{:error, 1, :auth_failed, _}], _} =
             Session.handle([{:hello, 1, 3, 0, nil}], session)

    assert {:ok, [{:hello_ok, 1, 3, _}], _} = Session.handle([{:hello, 1, 3, 0, "t"}], session)
  end

  test "answers come in order, with the PUSH_ACKS of the read last", %{prefix: p} do
    frames = [
      {:push, 1, :ack, p <> "a", "x"},
      {:ping, 2},
      {:push, 3, :ack, p <> "a", "y"},
      {:push, 4, :no_ack, p <> "a", "z"},
      {:len, 5, p <> "a"}
    ]

    assert {:ok, out, _} = Session.handle(frames, open())

    assert out == [
             {:pong, 2},
             {:len_ok, 5, 3},
             {:push_acks, 2, [{1, {:ok, 0}}, {3, {:ok, 1}}]}
           ]
  end

  test "pushes grouped by the decoder are answered as the same frames one by one", %{prefix: p} do
    frames = fn name ->
      for(c <- 1..20, do: {:push, c, :ack, name, "m#{c}"}) ++
        [{:ping, 21}, {:push, 22, :no_ack, name, "n"}, {:push, 23, :ack, name, "o"}]
    end

    bytes = fn name ->
      IO.iodata_to_binary(Enum.map(frames.(name), &Ringbus.Wire.Frame.encode/1))
    end

    {:ok, grouped, _} = Decoder.feed(Decoder.new(1 <<< 20, group_pushes: 100), bytes.(p <> "g"))
    assert [{:pushes, _, 20, _, _, _} | _] = grouped

    assert {:ok, out, _} = Session.handle(grouped, open())
    assert {:ok, ^out, _} = Session.handle(frames.(p <> "f"), open())
    assert {:ok, %{pushed: 22}} = Ringbus.info(p <> "g")
  end

  test "a PUSH_BATCH of more bytes than the channel's max_bytes is refused whole",
       %{prefix: p} do
    name = p <> "bytes"
    :ok = Ringbus.create(name, capacity: 10, max_bytes: 10)

    frames = [
      {:push_batch, 1, :ack, name, 3, ["aaaa", "bbbb", "cccc"]},
      {:push, 2, :ack, name, :binary.copy("x", 11)},
      # Pushes of one read that pass max_bytes together: each fits, and the
      # oldest is overwritten.
      {:push, 3, :ack, name, "dddd"},
      {:push, 4, :ack, name, "eeee"},
      {:push, 5, :ack, name, "ffff"}
    ]

    assert {:ok, [{:push_acks, 5, acks}], _} = Session.handle(frames, open())

    assert acks == [
             {1, {:error, :too_large}},
             {2, {:error, :too_large}},
             {3, {:ok, 0}},
             {4, {:ok, 1}},
             {5, {:ok, 2}}
           ]

    assert {:ok, [{1, "eeee"}, {2, "ffff"}], 1} = Ringbus.read(name, 0, 10)
    assert {:ok, %{rejected: 4, pushed: 3, overwritten: 1}} = Ringbus.info(name)
  end

  test "PUSH_ACKS frames stay within max_frame_size", %{prefix: p} do
    session = open(max_frame_size: 1024)
    pushes = for corr <- 1..200, do: {:push, corr, :ack, p <> "split", "m"}
    assert {:ok, out, _} = Session.handle(pushes, session)

    # (1024 - 5) div 14 = 72 entries a frame at most.
    assert Enum.map(out, &elem(&1, 1)) == [56, 72, 72]
    assert Enum.flat_map(out, &elem(&1, 2)) == Enum.map(1..200, &{&1, {:ok, &1 - 1}})

    for frame <- out,
        do: assert(IO.iodata_length(Ringbus.Wire.Frame.encode(frame)) - 4 <= 1024)
  end

  test "deliveries of a subscription it does not hold are dropped", %{prefix: p} do
    session = open()
    assert Session.deliver(session, make_ref(), [{0, "x"}], 0) == []

    name = p <> "sub"
    :ok = Ringbus.create(name, capacity: 4)

    assert {:ok, [{:subscribed, 9, id}], session} =
             Session.handle([{:subscribe, 9, name, :latest, 10, 10}], session)

    # The session ran in this process, so the subscription delivers here.
    {:ok, 0} = Ringbus.push(name, "x")
    assert_receive {:ringbus, sub, [{0, "x"}] = messages, 0}
    assert Session.deliver(session, sub, messages, 2) == [{:deliver, id, 2, 1, [{0, "x"}]}]
    assert {[{:sub_closed, ^id, _}], session} = Session.closed(session, sub, :channel_deleted)
    assert Session.deliver(session, sub, messages, 0) == []
  end
end
