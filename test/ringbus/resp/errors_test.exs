defmodule Ringbus.Resp.ErrorsTest do
  # Every error reason of the channel API gets a Redis-style reply, and no
  # channel error ends a client's connection.
  use ExUnit.Case, async: false

  alias Ringbus.Cluster.Directory
  alias Ringbus.Resp.Errors
  alias Ringbus.Test.RespClient

  import Ringbus.Test.Eventually

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})

    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name) and String.starts_with?(name, "er-"),
          do: Ringbus.delete(name)
    end)

    {:ok, port: Ringbus.Server.port(server, :resp)}
  end

  defp reasons, do: Ringbus.Test.Reasons.all()

  test "every reason of Ringbus.reason() has a reply of its own, with a Redis error code" do
    reasons = reasons()
    assert :too_large in reasons and :node_busy in reasons and :node_down in reasons
    assert :timeout in reasons

    replies =
      for reason <- reasons do
        assert {:error, text} = Errors.reply(reason, "er-k")
        assert text =~ ~r/\A[A-Z]+ /, "#{inspect(reason)}: #{text}"
        assert text =~ "'er-k'"
        # Not the catch-all for terms outside the type.
        refute text =~ inspect(reason), "#{inspect(reason)} has no reply of its own"
        {reason, text}
      end

    assert replies |> Enum.map(&elem(&1, 1)) |> Enum.uniq() |> Enum.count() ==
             Enum.count(reasons)

    assert {:error, "CLUSTERDOWN " <> _} = Errors.reply(:node_down, "er-k")
    assert {:error, "TRYAGAIN " <> _} = Errors.reply(:node_busy, "er-k")
    # Not TRYAGAIN: a retry after an unknown outcome may apply a command twice.
    assert {:error, "TIMEOUT " <> _} = Errors.reply(:timeout, "er-k")
  end

  test "an XADD over a stream's max_bytes answers an error, and the connection goes on",
       %{port: port} do
    :ok = Ringbus.create("er-bytes", capacity: 100, max_bytes: 64)
    c = RespClient.connect!(port)
    big = String.duplicate("x", 100)

    {[{:error, "ERR the entry is larger than the max_bytes of stream 'er-bytes'"}], c} =
      RespClient.call(c, ["XADD", "er-bytes", "*", "f", big])

    # Pipelined XADDs go in as one batch: each is answered.
    RespClient.send_commands(c, [
      ["XADD", "er-bytes", "*", "f", "small"],
      ["XADD", "er-bytes", "*", "f", big],
      ~w(PING)
    ])

    {[_, {:error, "ERR the entry is larger" <> _}, {:simple, "PONG"}], c} = RespClient.recv(c, 3)

    # An explicit ID takes the other path.
    {[{:error, "ERR the entry is larger" <> _}], c} =
      RespClient.call(c, ["XADD", "er-bytes", "99999999999999-0", "f", big])

    {[1], _c} = RespClient.call(c, ~w(XLEN er-bytes))
  end

  test "a rejecting stream over its max_bytes answers XADD with an error", %{port: port} do
    :ok = Ringbus.create("er-rbytes", capacity: 100, max_bytes: 64, overflow: :reject)
    c = RespClient.connect!(port)
    mid = String.duplicate("x", 30)
    {[_], c} = RespClient.call(c, ["XADD", "er-rbytes", "*", "f", mid])

    {[{:error, "ERR stream 'er-rbytes' is full and its overflow is reject"}], c} =
      RespClient.call(c, ["XADD", "er-rbytes", "*", "f", mid])

    {[{:simple, "PONG"}], _c} = RespClient.call(c, ~w(PING))
  end

  test "a stream whose node is down: every command answers CLUSTERDOWN, the connection stays",
       %{port: port} do
    # The directory learns of a channel homed on a node that is not
    # connected, as it keeps the channels of a node that went down.
    ghost = :"er-ghost@nowhere"
    name = "er-remote"
    stamp = System.unique_integer([:positive])
    Directory.peer(ghost, {:add, name, [capacity: 10], stamp, 1, nil})
    on_exit(fn -> Directory.peer(ghost, {:del, name, stamp}) end)
    assert eventually(fn -> Directory.remote_home(name) == {:ok, ghost} end)
    assert Ringbus.len(name) == {:error, :node_down}

    c = RespClient.connect!(port)

    commands = [
      ~w(XADD er-remote * f v),
      ~w(XADD er-remote 1-0 f v),
      ~w(XLEN er-remote),
      ~w(XRANGE er-remote - +),
      ~w(XREVRANGE er-remote + -),
      ~w(XREAD STREAMS er-remote 0),
      ~w(XREAD STREAMS er-remote $),
      ~w(XREAD BLOCK 100 STREAMS er-remote $),
      ~w(XTRIM er-remote MAXLEN 1),
      ~w(XDEL er-remote 1-0),
      ~w(XINFO STREAM er-remote),
      ~w(XINFO GROUPS er-remote),
      ~w(XINFO CONSUMERS er-remote g),
      ~w(XGROUP CREATE er-remote g $),
      ~w(XGROUP CREATE er-remote g 0 MKSTREAM),
      ~w(XREADGROUP GROUP g c STREAMS er-remote >),
      ~w(XPENDING er-remote g),
      ~w(XAUTOCLAIM er-remote g c 0 0),
      ~w(EXISTS er-remote),
      ~w(TYPE er-remote),
      ~w(DEL er-remote)
    ]

    for command <- commands do
      {[reply], _} = RespClient.call(c, command)

      assert {:error, "CLUSTERDOWN the node that holds stream 'er-remote' is not connected"} ==
               reply,
             "#{Enum.join(command, " ")}: #{inspect(reply)}"
    end

    # In a transaction, the error is the command's reply in EXEC's array.
    :ok = RespClient.send_commands(c, [~w(MULTI), ~w(XLEN er-remote), ~w(EXEC)])

    {[{:simple, "OK"}, {:simple, "QUEUED"}, [{:error, "CLUSTERDOWN " <> _}]], c} =
      RespClient.recv(c, 3)

    {[{:simple, "PONG"}], _c} = RespClient.call(c, ~w(PING))
  end

  test "stream names are 1 to Ringbus.Channel.max_name_bytes() bytes, as the wire's",
       %{port: port} do
    max = Ringbus.Channel.max_name_bytes()
    assert max == Ringbus.Wire.Frame.max_name_size()
    longest = "er-" <> :binary.copy("n", max - 3)
    c = RespClient.connect!(port)

    {[_], c} = RespClient.call(c, ["XADD", longest, "*", "f", "v"])
    {[{:error, text}], c} = RespClient.call(c, ["XADD", longest <> "n", "*", "f", "v"])
    assert text == "ERR Ringbus stream names are 1 to #{max} bytes"
    {[{:error, ^text}], _c} = RespClient.call(c, ["XINFO", "STREAM", longest <> "n"])
  end
end
