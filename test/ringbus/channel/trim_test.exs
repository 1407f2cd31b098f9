defmodule Ringbus.Channel.TrimTest do
  # Redis's streamTrim as arithmetic on seqs: nodes of 100 entries from seq 0.
  use ExUnit.Case, async: true
  doctest Ringbus.Channel.Trim

  alias Ringbus.Channel.Trim

  defp maxlen(n, approx \\ false, limit \\ nil),
    do: %{strategy: {:maxlen, n}, approx: approx, limit: limit}

  defp min_seq(seq, approx \\ false, limit \\ nil),
    do: %{strategy: {:min_seq, seq}, approx: approx, limit: limit}

  test "= trims to the threshold exactly" do
    assert Trim.count(maxlen(2), 0, 6) == 4
    assert Trim.count(maxlen(120), 0, 250) == 130
    assert Trim.count(maxlen(10), 0, 5) == 0
    assert Trim.count(maxlen(0), 30, 250) == 220
    # Seqs below 39 go.
    assert Trim.count(min_seq(39), 0, 250) == 39
    assert Trim.count(min_seq(40), 0, 250) == 40
    assert Trim.count(min_seq(0), 0, 250) == 0
    assert Trim.count(min_seq(999), 10, 250) == 240
  end

  test "~ removes whole nodes only, and LIMIT bounds it" do
    assert Trim.count(maxlen(120, true), 0, 250) == 100
    assert Trim.count(maxlen(2, true), 0, 6) == 0
    assert Trim.count(maxlen(10, true), 0, 250) == 200
    # The oldest node is part-held: its remaining entries go whole.
    assert Trim.count(maxlen(10, true), 30, 250) == 170
    assert Trim.count(maxlen(10, true, 50), 0, 250) == 0
    assert Trim.count(maxlen(10, true, 100), 0, 250) == 100
    assert Trim.count(maxlen(10, true, 0), 0, 250) == 200
    assert Trim.count(min_seq(239, true), 0, 250) == 200
    assert Trim.count(min_seq(239, true), 200, 250) == 0
    assert Trim.count(min_seq(299, true), 200, 250) == 50
  end

  test "~ without LIMIT removes at most 100 nodes' worth, as Redis" do
    assert Trim.count(maxlen(0, true), 0, 20_050) == 10_000
  end
end
