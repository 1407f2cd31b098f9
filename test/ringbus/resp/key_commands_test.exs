defmodule Ringbus.Resp.KeyCommandsTest do
  # KEYS, SCAN, FLUSHDB, FLUSHALL and UNLINK; FLUSHDB deletes every channel
  # of the VM, so this module runs alone (async: false modules run after
  # the async ones, one at a time).
  use ExUnit.Case, async: false

  alias Ringbus.Resp.KeyCommands
  alias Ringbus.Test.RespClient

  test "glob patterns match as Redis's stringmatchlen" do
    for {pattern, name, expected} <- [
          {"*", "", true},
          {"*", "abc", true},
          {"a*", "abc", true},
          {"a*c", "abbbc", true},
          {"a*c", "abbb", false},
          {"a**c", "ac", true},
          {"h?llo", "hello", true},
          {"h?llo", "hllo", false},
          {"h[ae]llo", "hallo", true},
          {"h[ae]llo", "hillo", false},
          {"h[^e]llo", "hallo", true},
          {"h[^e]llo", "hello", false},
          {"h[a-b]llo", "hbllo", true},
          {"h[b-a]llo", "hallo", true},
          {"h[a-b]llo", "hcllo", false},
          {"h\\*llo", "h*llo", true},
          {"h\\*llo", "hello", false},
          {"[\\]]", "]", true},
          {"abc", "abcd", false},
          {"", "", true}
        ] do
      assert KeyCommands.glob?(pattern, name) == expected, "#{pattern} on #{name}"
    end
  end

  test "SCAN's pages cover every name once, whole hashes at a time" do
    names = for i <- 1..95, do: "k#{i}"
    {all, calls} = scan_all(names, 0, 10, [], 0)
    assert Enum.sort(all) == Enum.sort(names)
    assert calls == 10

    # A name added between calls cannot make one held all along go missing.
    {next, first} = KeyCommands.page(names, 0, 10)
    {rest, _} = scan_all(["new" | names -- [hd(first)]], next, 10, [], 0)
    assert Enum.sort(first ++ rest) -- ["new"] == Enum.sort(names)
  end

  defp scan_all(names, cursor, count, acc, calls) do
    case KeyCommands.page(names, cursor, count) do
      {0, page} -> {acc ++ page, calls + 1}
      {next, page} -> scan_all(names, next, count, acc ++ page, calls + 1)
    end
  end

  describe "over RESP" do
    setup do
      Enum.each(Ringbus.channels(), &Ringbus.delete/1)

      tokens = %{
        "root" => :all,
        "app" => [read: ["kc."], write: ["kc."], manage: ["kc."]]
      }

      server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0, tokens: tokens})
      on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
      {:ok, port: Ringbus.Server.port(server, :resp)}
    end

    test "KEYS and SCAN list the streams the token may read", %{port: port} do
      root = RespClient.auth!(port, "root")
      names = ~w(kc.a kc.b kc.c other)

      root =
        Enum.reduce(names, root, fn n, c ->
          elem(RespClient.call(c, ["XADD", n, "*", "f", "v"]), 1)
        end)

      {[keys], root} = RespClient.call(root, ~w(KEYS *))
      assert Enum.sort(keys) == names
      {[["kc.a", "kc.b"]], root} = RespClient.call(root, ["KEYS", "kc.[ab]"])
      {[["0", keys]], root} = RespClient.call(root, ~w(SCAN 0 COUNT 100))
      assert Enum.sort(keys) == names
      {[["0", ["other"]]], root} = RespClient.call(root, ~w(SCAN 0 MATCH o* COUNT 100))
      {[["0", []]], root} = RespClient.call(root, ~w(SCAN 0 TYPE string COUNT 100))
      {[["0", keys]], root} = RespClient.call(root, ~w(SCAN 0 TYPE stream COUNT 100))
      assert length(keys) == 4
      {[{:error, "ERR invalid cursor"}], root} = RespClient.call(root, ~w(SCAN x))
      {[{:error, "ERR syntax error"}], root} = RespClient.call(root, ~w(SCAN 0 COUNT 0))
      {[{:error, "ERR syntax error"}], _} = RespClient.call(root, ~w(SCAN 0 FOO 1))

      app = RespClient.auth!(port, "app")
      {[keys], app} = RespClient.call(app, ~w(KEYS *))
      assert Enum.sort(keys) == ~w(kc.a kc.b kc.c)
      {[["0", keys]], _} = RespClient.call(app, ~w(SCAN 0 COUNT 100))
      assert Enum.sort(keys) == ~w(kc.a kc.b kc.c)
    end

    test "UNLINK deletes as DEL; FLUSHDB and FLUSHALL need manage on every stream", %{port: port} do
      root = RespClient.auth!(port, "root")

      root =
        Enum.reduce(~w(kc.a kc.b other), root, fn n, c ->
          elem(RespClient.call(c, ["XADD", n, "*", "f", "v"]), 1)
        end)

      app = RespClient.auth!(port, "app")
      {[{:error, "NOPERM" <> _}], app} = RespClient.call(app, ~w(UNLINK other))
      {[{:error, "NOPERM" <> _}], app} = RespClient.call(app, ~w(FLUSHDB))
      {[{:error, "NOPERM" <> _}], _} = RespClient.call(app, ~w(FLUSHALL))
      {[3], root} = RespClient.call(root, ~w(DBSIZE))
      {[1], root} = RespClient.call(root, ~w(UNLINK kc.a kc.zz))
      {[{:error, "ERR syntax error"}], root} = RespClient.call(root, ~w(FLUSHDB NOW))
      {[{:simple, "OK"}], root} = RespClient.call(root, ~w(FLUSHDB ASYNC))
      {[0], root} = RespClient.call(root, ~w(DBSIZE))
      {[_], root} = RespClient.call(root, ~w(XADD x * f v))
      {[{:simple, "OK"}], root} = RespClient.call(root, ~w(FLUSHALL))
      assert Ringbus.channels() == []
      {[[]], _} = RespClient.call(root, ~w(KEYS *))
    end
  end
end
