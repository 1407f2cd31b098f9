Code.require_file("../../.ci/layers.ex", __DIR__)

defmodule Ringbus.CI.LayersTest do
  # Each rule of .ci/layers.ex on planted input, then the script on the tree.
  use ExUnit.Case, async: true

  describe "dependencies" do
    test "an arrow against @allowed fails; one along it passes" do
      against = {"lib/ringbus/channel/ring.ex", "lib/ringbus/wire/frame.ex", "runtime"}
      assert [problem] = Layers.edge_problems([against])
      assert problem =~ "(channel) -> lib/ringbus/wire/frame.ex (wire), runtime"

      along = {"lib/ringbus/server/session.ex", "lib/ringbus/wire/frame.ex", "compile"}
      assert Layers.edge_problems([along]) == []
    end

    test "a table of arrows with a cycle, and a file in no layer, fail" do
      assert [_, _] = Layers.table_problems(%{store: [:channel], channel: [:store]})
      assert Layers.table_problems(%{store: [:channel], channel: []}) == []
      assert [problem] = Layers.layer_problems(["lib/ringbus/planted.ex"])
      assert problem =~ "in no layer"
    end

    test "lib/ depending on bench/ or test/ fails, as mix xref lists it" do
      out = """
      lib/ringbus/metrics.ex
      |-- bench/lib/ringbus/bench/stats.ex
      `-- lib/ringbus/server.ex (export)
      bench/lib/ringbus/bench/stats.ex
      `-- lib/ringbus.ex
      lib/ringbus/http.ex
      `-- test/support/cluster_probe.ex (compile)
      """

      edges = Layers.xref_edges(out)
      assert {"lib/ringbus/metrics.ex", "lib/ringbus/server.ex", "export"} in edges
      assert [bench, test] = Layers.outside_problems(edges)
      assert bench =~ "lib/ringbus/metrics.ex -> bench/lib/ringbus/bench/stats.ex, runtime"
      assert test =~ "lib/ringbus/http.ex -> test/support/cluster_probe.ex, compile"
    end
  end

  describe "long files" do
    test "a file over 600 lines needs an entry of @long_files, and stays under its cap" do
      assert Layers.length_problems([{"lib/ringbus/server/planted.ex", 600}]) == []
      assert [unlisted] = Layers.length_problems([{"lib/ringbus/server/planted.ex", 601}])
      assert unlisted =~ "over 600; split it, or name it in @long_files"

      assert Layers.length_problems([{"lib/ringbus/wire/frame.ex", 1160}]) == []
      assert [over] = Layers.length_problems([{"lib/ringbus/wire/frame.ex", 1161}])
      assert over =~ "1161 lines, over its cap of 1160"
    end
  end

  test "the tree passes every rule" do
    {out, status} = System.cmd("elixir", [".ci/layers.exs"], stderr_to_stdout: true)
    assert status == 0, out
    assert out =~ "lib/ keeps every rule of docs/ARCHITECTURE.md"
  end
end
