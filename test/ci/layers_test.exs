Code.require_file("../../.ci/layers.ex", __DIR__)

defmodule Ringbus.CI.LayersTest do
  # Each rule of .ci/layers.ex on planted input, then the script on the tree.
  # Not async: mix test loads test files without debug info, which the rules
  # read, and async tests run while it loads; the planted modules turn it on.
  use ExUnit.Case, async: false

  # The calls of a module compiled from `body` as if it were the file `file`
  # of the project (its BEAM records that source), as the script reads them.
  defp calls(file, body) do
    name = "Ringbus.CI.LayersTest.Planted#{System.unique_integer([:positive])}"
    source = "defmodule #{name} do\n#{body}\nend\n"
    previous = Code.compiler_options(debug_info: true)

    try do
      [{_, beam}] = Code.compile_string(source, Path.expand(file))
      Layers.beam_calls(beam)
    after
      Code.compiler_options(previous)
    end
  end

  defp problems(file, body) do
    calls = calls(file, body)
    Layers.call_problems(calls) ++ Layers.dispatch_problems(calls)
  end

  describe "forbidden calls" do
    test "the wire may not send, by send/2 or Process.send/3" do
      assert [problem] = problems("lib/ringbus/wire/planted.ex", "def f(p), do: send(p, :x)")
      assert problem =~ "lib/ringbus/wire/planted.ex:2 (f/1) calls :erlang.send/2"
      assert problem =~ "the wire layer may not call anything of processes"

      assert [_] = problems("lib/ringbus/wire/planted.ex", "def f(p), do: Process.send(p, 1, [])")
    end

    test "the wire may not receive, spawn or keep shared state" do
      assert [problem] =
               problems("lib/ringbus/wire/planted.ex", "def f, do: receive(do: (x -> x))")

      assert problem =~ "(f/0) receives"

      assert [_] = problems("lib/ringbus/wire/planted.ex", "def f, do: spawn(fn -> :ok end)")
      assert [_] = problems("lib/ringbus/wire/planted.ex", "def f(t), do: :ets.lookup(t, 1)")
    end

    test "the wire may not call a socket, called or captured" do
      assert [problem] =
               problems("lib/ringbus/wire/frame.ex", ~s{def f(s), do: :gen_tcp.send(s, "x")})

      assert problem =~ "calls :gen_tcp.send/2: the wire layer may not call a socket"

      assert [_] = problems("lib/ringbus/wire/frame.ex", "def f, do: &:ssl.send/2")
    end

    test "the channel layer may not call Ringbus.Socket, a socket or the OS" do
      body = "def f(s), do: Ringbus.Socket.controlling_process(:tcp, s, self())"

      for file <- ["lib/ringbus/channel/ring.ex", "lib/ringbus/channel.ex"] do
        assert [problem] = problems(file, body)
        assert problem =~ "calls Ringbus.Socket.controlling_process/3"
        assert problem =~ "the channel layer may not call a socket"
      end

      assert [_] = problems("lib/ringbus/channel/ring.ex", ~s{def f, do: System.cmd("ls", [])})
      assert [_] = problems("lib/ringbus/channel/ring.ex", ~s{def f, do: :os.cmd('ls')})
    end

    test "the channel layer sends and receives: subscriptions and wakes are processes" do
      body = "def f(p), do: (send(p, :wake); receive(do: (x -> x)))"
      assert problems("lib/ringbus/channel/subscription.ex", body) == []
      # Above the wire, sockets are what the server is for.
      assert problems("lib/ringbus/server/planted.ex", ~s{def f(s), do: :gen_tcp.send(s, "x")}) ==
               []
    end
  end

  describe "dynamic dispatch" do
    test "apply and runtime module names into the cluster and RESP fail" do
      body = """
      def f(x), do: apply(Module.concat(Ringbus.Resp, x), :run, [])
      def g(x), do: String.to_atom("Elixir.Ringbus.Cluster." <> x).call()
      def h(m), do: :"Elixir.Ringbus.Cluster.\#{m}"
      """

      assert [apply, concat, to_atom, interpolated] =
               problems("lib/ringbus/server/planted.ex", body)

      assert apply =~ "lib/ringbus/server/planted.ex:2 (f/1) calls :erlang.apply/3"
      assert concat =~ "(f/1) calls Module.concat/2"
      assert to_atom =~ "(g/1) calls :erlang.binary_to_atom/2"
      assert interpolated =~ "(h/1) calls :erlang.binary_to_atom/2"
      assert apply =~ "list it in @dynamic"
    end

    test "apply with a literal argument list is caught, though the compiler makes it a call" do
      body = "def f(x), do: apply(:\"Elixir.Ringbus.Cluster.Router\", :call, [x])"
      assert [problem] = problems("lib/ringbus/resp/planted.ex", body)
      assert problem =~ "calls :erlang.apply/3"
    end

    test "an entry of @dynamic allows its function of its file, and no other" do
      dispatch = "def dispatch({m, f}, args, s), do: apply(m, f, [args, s])"
      assert problems("lib/ringbus/resp/session.ex", dispatch) == []

      other = "def run({m, f}, args, s), do: apply(m, f, [args, s])"
      assert [_] = problems("lib/ringbus/resp/session.ex", other)
      assert [_] = problems("lib/ringbus/resp/groups.ex", dispatch)
    end

    test "a call on a module held in a variable, as a behaviour is called, is not dispatch" do
      assert problems("lib/ringbus/server/planted.ex", "def f(p, x), do: p.decode(x)") == []
    end
  end

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

      %{"lib/ringbus/wire/frame.ex" => {cap, _reason}} = Layers.long_files()
      assert Layers.length_problems([{"lib/ringbus/wire/frame.ex", cap}]) == []
      assert [over] = Layers.length_problems([{"lib/ringbus/wire/frame.ex", cap + 1}])
      assert over =~ "#{cap + 1} lines, over its cap of #{cap}"
    end
  end

  test "the tree passes every rule" do
    {out, status} = System.cmd("elixir", [".ci/layers.exs"], stderr_to_stdout: true)
    assert status == 0, out
    assert out =~ "lib/ keeps every rule of docs/ARCHITECTURE.md"
  end
end
