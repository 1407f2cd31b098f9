defmodule Ringbus.Bench.OpenLoop.ResultTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.OpenLoop.Result

  doctest Result

  @line "requests=100 sent=100 answered=98 errors=3 unanswered=2 target_rate=1000 " <>
          "achieved_rate=999 elapsed_s=0.110 p50_us=20.0 p99_us=31.5 p999_us=40.0 " <>
          "p9999_us=41.0 max_us=41.0 lag_p999_us=4.1 lag_max_us=4.1 curve_us=12.0,20.0,25.5"

  test "reads every field of the generator's line" do
    assert {:ok, r} = Result.parse(@line)
    assert %{requests: 100, answered: 98, errors: 3, unanswered: 2} = r
    assert %{target_rate: 1000.0, achieved_rate: 999.0, p999_us: 40.0, lag_max_us: 4.1} = r
    assert r.curve_us == [12.0, 20.0, 25.5]
    assert Result.curve(r) |> List.last() == {:math.log10(98), 41.0}
  end

  test "a missing or malformed field is an error that names it" do
    assert {:error, "no p999_us in" <> _} =
             Result.parse(String.replace(@line, "p999_us=40.0", ""))

    assert {:error, "no answered in" <> _} =
             Result.parse(String.replace(@line, "answered=98", "answered=9.8"))

    assert {:error, "no curve_us in" <> _} = Result.parse(String.replace(@line, "25.5", "x"))
  end

  test "an empty spectrum (nothing answered) parses" do
    assert {:ok, %{curve_us: []} = r} = Result.parse(String.replace(@line, "12.0,20.0,25.5", ""))
    assert Result.curve(%{r | answered: 0}) == []
  end
end
