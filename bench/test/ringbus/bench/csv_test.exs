defmodule Ringbus.Bench.CSVTest do
  use ExUnit.Case, async: true

  doctest Ringbus.Bench.CSV

  @tag :tmp_dir
  test "write!/3 writes a header and a row per result", %{tmp_dir: dir} do
    path = Path.join(dir, "out.csv")
    :ok = Ringbus.Bench.CSV.write!(path, ["a", "b"], [[1, 2.5], ["x\"y", nil]])

    assert File.read!(path) == "a,b\n1,2.50\n\"x\"\"y\",\n"
  end
end
