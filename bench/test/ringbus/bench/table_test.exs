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
end
