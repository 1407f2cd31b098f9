defmodule Ringbus.Resp.ArgsTest do
  use ExUnit.Case, async: true

  alias Ringbus.Resp.Args

  test "integers: a sign and digits, whole, within 64 bits, as Integer.parse/1 reads them" do
    reference = fn text ->
      case Integer.parse(text) do
        {n, ""} when n >= -0x8000_0000_0000_0000 and n <= 0x7FFF_FFFF_FFFF_FFFF -> {:ok, n}
        _ -> :error
      end
    end

    texts =
      ~w(0 -0 +5 007 200000 -9223372036854775808 9223372036854775807 9223372036854775808) ++
        ["-9223372036854775809", "", "-", "+", "5x", " 5", "5 ", "1_000", "0x10", "1.0", "١"]

    for text <- texts, do: assert(Args.integer(text) == reference.(text), inspect(text))
  end

  test "upcase changes ASCII letters only, and gives back a name already in upper case" do
    assert Args.upcase("xAdd") == "XADD"
    assert Args.upcase("maxlen") == "MAXLEN"
    assert Args.upcase("MAXLEN") == "MAXLEN"
    assert Args.upcase("é-*~z") == "é-*~Z"
    assert Args.upcase("") == ""
  end
end
