defmodule Ringbus.Bench.TableTest do
  use ExUnit.Case, async: true

  doctest Ringbus.Bench.Table

  test "a line needs a value for every column" do
    assert_raise FunctionClauseError, fn -> Ringbus.Bench.Table.line([{"a", 3, :left}], []) end
  end

  test "a value wider than its column stays apart from its neighbours" do
    columns = [{"name", 4, :left}, {"p99 ms", 6, :right}, {"max ms", 6, :right}]
    line = Ringbus.Bench.Table.line(columns, ["redis", "14361.297", "14560.968"])
    assert String.split(line) == ["redis", "14361.297", "14560.968"]
  end

  test "print writes the header and a line for each row" do
    columns = [{"name", 6, :left}, {"n", 3, :right}]

    output =
      ExUnit.CaptureIO.capture_io(fn ->
        Ringbus.Bench.Table.print(columns, [%{name: "a", n: 1}, %{name: "b", n: nil}], fn row ->
          [row.name, row.n]
        end)
      end)

    assert output == "name    n\na       1\nb       -\n"
  end
end
