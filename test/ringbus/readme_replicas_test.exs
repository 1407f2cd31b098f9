defmodule Ringbus.ReadmeReplicasTest do
  # README's "Three replicas on one machine, and `kill -9` of the leader"
  # runs as written, in bash: three `mix ringbus.server` nodes, a
  # replicated channel, its leader's node killed, a push and a read after.
  # Only the node names, cookie and ports are this run's own, so that it
  # shares the machine with anything else.
  use ExUnit.Case, async: true

  @moduletag timeout: 300_000
  @section "### Three replicas on one machine, and `kill -9` of the leader"

  test "the commands of README's kill -9 demo work and print what it says" do
    [_, section] = String.split(File.read!("README.md"), @section, parts: 2)
    [section | _] = String.split(section, "\n## ", parts: 2)

    commands = for "    " <> line <- String.split(section, "\n"), do: line

    assert Enum.any?(commands, &String.starts_with?(&1, "mix ringbus.server --name a@"))
    assert "kill $(jobs -p); wait; rm -rf $d" in commands

    u = System.unique_integer([:positive])
    ports = Map.new(~w(7171 7172 7173 9171 9172 9173), &{&1, Integer.to_string(free_port())})

    script =
      commands
      |> Enum.join("\n")
      |> String.replace(~r/\b(a|b|c|demo)@127\.0\.0\.1/, "\\1_readme#{u}@127.0.0.1")
      |> String.replace("--cookie demo", "--cookie readme#{u}")
      |> String.replace(~r/\b(717[1-3]|917[1-3])\b/, &ports[&1])

    # Whatever fails, the nodes it started stop with it and their data goes.
    script = """
    trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$d"' EXIT INT TERM
    #{script}
    echo "leader=$leader"
    """

    {output, status} =
      System.cmd("timeout", ["240", "bash", "-c", script],
        stderr_to_stdout: true,
        env: [{"MIX_ENV", "test"}]
      )

    assert status == 0, output

    printed = [
      ":ok",
      "{:ok, 0}",
      "{:ok, 3}",
      ~s({:ok, [{0, "o-1"}, {1, "o-2"}, {2, "o-3"}, {3, "o-4"}], 0})
    ]

    lines = String.split(output, "\n")
    for p <- printed, do: assert(p in lines, "#{p} not printed in:\n#{output}")
    # README says the same.
    flat = String.replace(section, ~r/\s+/, " ")
    for p <- printed, do: assert(flat =~ "`#{p}`")

    # The members' table of each survivor shows the killed leader down.
    [_, leader] = Regex.run(~r/^leader=(\S+)$/m, output)
    assert [_, _] = Regex.scan(~r/^CHANNEL +NODE +ROLE /m, output)
    assert [_, _] = Regex.scan(~r/^orders +#{Regex.escape(leader)} +down /m, output)
  end

  defp free_port do
    {:ok, socket} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(socket)
    :gen_tcp.close(socket)
    port
  end
end
