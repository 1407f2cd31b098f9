defmodule Ringbus.Bench.TableTest do
  use ExUnit.Case, async: true

  doctest Ringbus.Bench.Table

  test "a line needs a value for every column" do
    assert_raise FunctionClauseError, fn -> Ringbus.Bench.Table.line([{"a", 3, :left}], []) end
  end
end
