defmodule Ringbus.Resp.ParserTest do
  use ExUnit.Case, async: true

  alias Ringbus.Resp.Parser
  alias Ringbus.Test.RespClient

  @moduletag timeout: 120_000

  defp parser, do: Parser.new(1024, 1024 * 1024, 4 * 1024 * 1024)

  # Feeds the chunks one by one; returns every command, or the error.
  defp feed_all(parser, chunks) do
    Enum.reduce_while(chunks, {:ok, [], parser}, fn chunk, {:ok, acc, parser} ->
      case Parser.feed(parser, chunk) do
        {:ok, commands, parser} -> {:cont, {:ok, acc ++ commands, parser}}
        {:error, message, commands} -> {:halt, {:error, message, acc ++ commands}}
      end
    end)
  end

  @stream IO.iodata_to_binary([
            RespClient.encode(["XADD", "s", "*", "f", "v"]),
            "PING\r\n",
            RespClient.encode(["ECHO", ""]),
            ~s(SET "a b" 'c\\'d' "\\x41\\n"\n),
            "*0\r\n",
            "\r\n",
            RespClient.encode(["XADD", "s", "*", "payload", :binary.copy(<<0, 13, 10, 255>>, 300)]),
            "*-1\r\n",
            RespClient.encode(["PING"])
          ])

  @commands [
    ["XADD", "s", "*", "f", "v"],
    ["PING"],
    ["ECHO", ""],
    ["SET", "a b", "c'd", "A\n"],
    ["XADD", "s", "*", "payload", :binary.copy(<<0, 13, 10, 255>>, 300)],
    ["PING"]
  ]

  test "the same stream split at every offset gives the same commands" do
    assert {:ok, @commands, %{stage: :idle, command: nil}} = feed_all(parser(), [@stream])

    for at <- 0..byte_size(@stream) do
      <<a::binary-size(at), b::binary>> = @stream
      assert {:ok, @commands, _} = feed_all(parser(), [a, b]), "split at #{at}"
    end

    bytes = for <<byte::binary-size(1) <- @stream>>, do: byte
    assert {:ok, @commands, _} = feed_all(parser(), bytes)
  end

  test "a bulk split over many reads is held as the reads, then joined once" do
    value = :binary.copy("x", 100_000)
    wire = IO.iodata_to_binary(RespClient.encode(["XADD", "s", "*", "f", value]))
    chunks = for <<chunk::binary-size(1000) <- wire>>, do: chunk
    rest = binary_part(wire, 1000 * length(chunks), byte_size(wire) - 1000 * length(chunks))

    {:ok, [], p} = feed_all(parser(), Enum.take(chunks, 50))
    assert {:bulk, 100_000, pieces, _size} = p.stage
    assert Enum.all?(pieces, &is_binary/1) and length(pieces) > 1
    assert Parser.buffered(p) < 50_001

    assert {:ok, [["XADD", "s", "*", "f", ^value]], _} =
             feed_all(p, Enum.drop(chunks, 50) ++ [rest])
  end

  test "every declared length is checked before its bytes are kept" do
    p = Parser.new(16, 1024, 4096)
    assert {:error, "Protocol error: invalid multibulk length", []} = Parser.feed(p, "*17\r\n")

    assert {:error, "Protocol error: invalid multibulk length", []} =
             Parser.feed(p, "*1073741824\r\n")

    assert {:error, "Protocol error: invalid multibulk length", []} = Parser.feed(p, "*x\r\n")
    assert {:error, "Protocol error: invalid bulk length", []} = Parser.feed(p, "*1\r\n$1025\r\n")
    assert {:error, "Protocol error: invalid bulk length", []} = Parser.feed(p, "*1\r\n$-1\r\n")

    assert {:error, "Protocol error: invalid bulk length", []} =
             Parser.feed(p, "*1\r\n$4294967296\r\n")

    assert {:error, "Protocol error: invalid bulk length", []} =
             Parser.feed(p, "*1\r\n$99999999999999999999\r\n")

    # The command's budget: four bulks of 1,000 bytes pass 4,096 with their cost,
    # whether they come in one read or bulk by bulk.
    bulks = List.duplicate("$1000\r\n" <> :binary.copy("a", 1000) <> "\r\n", 4)

    assert {:error, "Protocol error: invalid bulk length", []} = feed_all(p, ["*4\r\n" | bulks])

    assert {:error, "Protocol error: invalid bulk length", []} =
             Parser.feed(p, IO.iodata_to_binary(["*4\r\n" | bulks]))

    assert {:ok, [[_, _, _]], _} = Parser.feed(p, IO.iodata_to_binary(["*3\r\n" | tl(bulks)]))

    assert {:error, "Protocol error: expected '$', got ':'", []} = Parser.feed(p, "*1\r\n:1\r\n")

    assert {:error, "Protocol error: unbalanced quotes in request", []} =
             Parser.feed(p, "GET \"a\r\n")

    assert {:error, "Protocol error: unbalanced quotes in request", []} =
             Parser.feed(p, "GET \"a\"b\r\n")

    assert {:error, "Protocol error: expected '\\r\\n' after a bulk string", []} =
             Parser.feed(p, "*1\r\n$3\r\nabcd\r\n")
  end

  test "lines past 64 KiB are refused, however they arrive" do
    long = :binary.copy("a", 64 * 1024 + 1)
    assert {:error, "Protocol error: too big inline request", []} = Parser.feed(parser(), long)

    assert {:error, "Protocol error: too big inline request", []} =
             feed_all(parser(), [long <> "\r\n"])

    halves = [binary_part(long, 0, 40_000), binary_part(long, 40_000, byte_size(long) - 40_000)]
    assert {:error, "Protocol error: too big inline request", []} = feed_all(parser(), halves)

    assert {:error, "Protocol error: too big mbulk count string", []} =
             feed_all(parser(), ["*" <> long])

    assert {:error, "Protocol error: too big bulk count string", []} =
             feed_all(parser(), ["*1\r\n", "$" <> long])
  end

  test "commands before an error are returned with it" do
    assert {:error, _, [["PING"], ["ECHO", "x"]]} =
             Parser.feed(parser(), "PING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n*zz\r\n")
  end

  test "inline commands split as Redis splits them" do
    assert {:ok, ["a", "b c", "d\"e", "\x01"]} = Parser.split_inline(~s(a  "b c" 'd"e' "\\x01"))
    assert {:ok, []} = Parser.split_inline("   ")
    assert :error = Parser.split_inline(~s("abc))
    assert :error = Parser.split_inline(~s('abc))
  end

  test "property: any commands, encoded and cut anywhere, parse back" do
    assert :proper.quickcheck(property(), [:quiet, numtests: 300]) == true
  end

  defp property do
    arg = :proper_types.binary()
    command = :proper_types.non_empty(:proper_types.list(arg))
    commands = :proper_types.list(command)

    :proper.forall({commands, :proper_types.list(:proper_types.pos_integer())}, fn {commands,
                                                                                    cuts} ->
      commands = Enum.map(commands, fn args -> Enum.map(args, &IO.iodata_to_binary/1) end)
      wire = commands |> Enum.map(&RespClient.encode/1) |> IO.iodata_to_binary()
      {:ok, parsed, p} = feed_all(parser(), cut(wire, cuts))
      parsed == commands and p.stage == :idle and p.command == nil
    end)
  end

  defp cut(wire, []), do: [wire]

  defp cut(wire, [n | rest]) do
    at = rem(n, byte_size(wire) + 1)
    <<a::binary-size(at), b::binary>> = wire
    [a | cut(b, rest)]
  end
end
