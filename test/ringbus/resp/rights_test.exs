defmodule Ringbus.Resp.RightsTest do
  # The rights each command needs follow Redis's flags: every command Redis
  # flags `write` (and XGROUP, whose subcommands all are) changes state, so a
  # token that may only read gets -NOPERM for it, as a read-only token gets
  # `forbidden` for PULL on the binary protocol.
  use ExUnit.Case, async: false

  alias Ringbus.Resp.Commands
  alias Ringbus.Test.RespClient

  # One command line per command, known to Ringbus or not yet: each command
  # of the table needs one here.
  @samples %{
    "PING" => ~w(PING),
    "QUIT" => ~w(QUIT),
    "ECHO" => ~w(ECHO x),
    "HELLO" => ~w(HELLO 2),
    "AUTH" => ~w(AUTH reader),
    "SELECT" => ~w(SELECT 0),
    "CLIENT" => ~w(CLIENT ID),
    "COMMAND" => ~w(COMMAND COUNT),
    "CONFIG" => ~w(CONFIG GET save),
    "FUNCTION" => ~w(FUNCTION LIST),
    "INFO" => ~w(INFO server),
    "DBSIZE" => ~w(DBSIZE),
    "KEYS" => ~w(KEYS rt-*),
    "SCAN" => ~w(SCAN 0),
    "FLUSHDB" => ~w(FLUSHDB),
    "FLUSHALL" => ~w(FLUSHALL),
    "EXISTS" => ~w(EXISTS rt-s),
    "TYPE" => ~w(TYPE rt-s),
    "DEL" => ~w(DEL rt-s),
    "UNLINK" => ~w(UNLINK rt-s),
    "XADD" => ~w(XADD rt-s * f v),
    "XREAD" => ~w(XREAD STREAMS rt-s 0),
    "XRANGE" => ~w(XRANGE rt-s - +),
    "XREVRANGE" => ~w(XREVRANGE rt-s + -),
    "XLEN" => ~w(XLEN rt-s),
    "XTRIM" => ~w(XTRIM rt-s MAXLEN 10),
    "XDEL" => ~w(XDEL rt-s 1-0),
    "XINFO" => ~w(XINFO STREAM rt-s),
    "XGROUP" => ~w(XGROUP CREATECONSUMER rt-s g c2),
    "XSETID" => ~w(XSETID rt-s 5-0),
    "XREADGROUP" => ~w(XREADGROUP GROUP g c STREAMS rt-s >),
    "XACK" => ~w(XACK rt-s g 1-0),
    "XPENDING" => ~w(XPENDING rt-s g),
    "XCLAIM" => ~w(XCLAIM rt-s g c 0 1-0),
    "XAUTOCLAIM" => ~w(XAUTOCLAIM rt-s g c 0 0),
    "MULTI" => ~w(MULTI),
    "EXEC" => ~w(EXEC),
    "DISCARD" => ~w(DISCARD),
    "WATCH" => ~w(WATCH rt-s),
    "UNWATCH" => ~w(UNWATCH)
  }

  setup do
    tokens = %{
      "reader" => [read: ["rt-"]],
      "writer" => [read: ["rt-"], write: ["rt-"], manage: ["rt-"]]
    }

    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, tokens: tokens})
    on_exit(fn -> Ringbus.delete("rt-s") end)
    {:ok, port: Ringbus.Server.port(server, :resp)}
  end

  defp changes_state?(name) do
    {flags, _, _, _} = Commands.redis_info(name)
    "write" in flags or name == "XGROUP"
  end

  test "every command has Redis's flags, and a write-flagged one needs write" do
    for name <- Commands.names() do
      assert {flags, _, _, _} = Commands.redis_info(name), "#{name} has no Redis flags"
      assert Map.has_key?(@samples, name), "#{name} has no sample in this test"
      {:ok, _, {_, _, access, _}} = Commands.lookup(name)

      if changes_state?(name),
        do: assert(access in [:write, :manage], "#{name} changes state but needs #{access}"),
        else: refute("write" in flags)
    end
  end

  test "a read-only token gets NOPERM for every command that changes state, and only for those",
       %{port: port} do
    writer = RespClient.auth!(port, "writer")

    {[_, {:simple, "OK"}, _], _} =
      RespClient.calls(writer, [
        ~w(XADD rt-s * f v),
        ~w(XGROUP CREATE rt-s g 0),
        ~w(XREADGROUP GROUP g c STREAMS rt-s >)
      ])

    for name <- Commands.names() do
      command = Map.fetch!(@samples, name)
      # A fresh connection each time: MULTI, QUIT and the like leave none behind.
      reader = RespClient.auth!(port, "reader")
      {[reply], _} = RespClient.call(reader, command)
      RespClient.close(reader)

      if changes_state?(name) do
        assert reply ==
                 {:error,
                  "NOPERM this user has no permissions to access one of the keys used as arguments"},
               "#{Enum.join(command, " ")}: #{inspect(reply)}"
      else
        refute match?({:error, "NOPERM" <> _}, reply),
               "#{Enum.join(command, " ")}: #{inspect(reply)}"
      end
    end

    # The writer may do what the reader may not. DEL would end the stream;
    # FLUSHDB and FLUSHALL need manage on every channel of the VM, other
    # tests' too (KeyCommandsTest covers them).
    for name <- Commands.names(), changes_state?(name), name not in ~w(DEL FLUSHDB FLUSHALL) do
      {[reply], _} = RespClient.call(RespClient.auth!(port, "writer"), Map.fetch!(@samples, name))
      refute match?({:error, "NOPERM" <> _}, reply), "#{name}: #{inspect(reply)}"
    end
  end
end
