defmodule Ringbus.Cluster.RespFaultsTest do
  # A redis-py client on one connection to node b's RESP port works on a
  # stream homed on node a while a is stopped (SIGSTOP), continued, killed
  # (SIGKILL) and started again. Every command answers promptly, with its
  # result or one of the errors docs/RESP.md lists for a stream of another
  # node, and the connection stays the same one throughout (CLIENT ID).
  use ExUnit.Case, async: false

  alias Ringbus.Test.Nodes
  alias Ringbus.Test.ClusterProbe, as: Probe
  alias Ringbus.Test.RedisTools

  @moduletag timeout: 120_000
  @ticktime 2

  # What "promptly" means: the call and reply timeouts (5 and 100 ms) or a
  # BLOCK of 200 ms, with room for a loaded machine; far below what waiting
  # on the silent node would cost (the rest of net_ticktime, or 7 s).
  @prompt_ms 1_000
  @cluster_errors ["TRYAGAIN", "CLUSTERDOWN", "TIMEOUT"]

  # One command a line, on one connection (single_connection_client: a
  # reconnection would change CLIENT ID). Each answer is a line:
  # "ok|err|fatal <tab> ms <tab> text".
  @client """
  import sys, time, redis
  r = redis.Redis(port=int(sys.argv[1]), single_connection_client=True,
                  socket_timeout=30, retry_on_timeout=False)
  for line in sys.stdin:
      cmd = line.split()
      t = time.monotonic()
      try:
          if cmd[0] == "id": out = r.client_id()
          elif cmd[0] == "xadd": out = r.xadd(cmd[1], {"k": "v"})
          elif cmd[0] == "xread": out = r.xread({cmd[1]: "0"}, count=3)
          elif cmd[0] == "xblock": out = r.xread({cmd[1]: "$"}, block=int(cmd[2]))
          kind, text = "ok", repr(out)
      except redis.exceptions.ResponseError as e:
          kind, text = "err", str(e)
      except Exception as e:
          kind, text = "fatal", type(e).__name__ + ": " + str(e)
      ms = (time.monotonic() - t) * 1000
      print(kind + "\\t" + str(round(ms)) + "\\t" + text.replace("\\n", " "), flush=True)
  """

  test "a RESP client on one node keeps its connection through the stop and death of another" do
    [a, b] = nodes = Nodes.start(2, "respfault", net_ticktime: @ticktime)
    on_exit(fn -> Nodes.stop(nodes) end)
    :ok = Nodes.join(nodes)
    :ok = call(a, Ringbus, :create, ["s", [capacity: 1_000]])
    port = call(b, Probe, :start_server, [[resp_port: 0, protocol: :resp]])

    client = start_client(port)
    {:ok, id} = run(client, "id")
    # The first call to a new node loads the code of its path there, which on
    # a busy machine can outlast the reply timeout: a read, which changes
    # nothing, goes first until it answers.
    assert eventually(fn -> run(client, "xread s") == {:ok, "[]"} end)
    # The first entry's ID, as XADD answered it (docs/RESP.md, "IDs").
    {:ok, "b'" <> quoted} = run(client, "xadd s")
    first = String.trim_trailing(quoted, "'")
    assert first_read?(run(client, "xread s"), first)

    # a is silent for longer than net_ticktime: first node_busy or timeout,
    # then, once a is declared down, node_down; never a wait on a.
    Nodes.signal(a, :stop)
    silent = commands_for(client, @ticktime * 1_000 + 1_500)
    Nodes.signal(a, :cont)
    assert_prompt(silent, "while a was stopped")
    assert "CLUSTERDOWN" in codes(silent), "a was not declared down: #{inspect(silent)}"
    assert run(client, "id") == {:ok, id}

    # After SIGCONT the links heal, and commands succeed again.
    assert eventually(fn -> match?({:ok, _}, run(client, "xadd s")) end)
    assert first_read?(run(client, "xread s"), first)
    assert run(client, "id") == {:ok, id}

    # Killed: node_down at once.
    Nodes.signal(a, :kill)
    dead = commands_for(client, 1_000)
    assert_prompt(dead, "after a was killed")
    assert eventually(fn -> match?({:err, "CLUSTERDOWN" <> _}, run(client, "xadd s")) end)
    assert run(client, "id") == {:ok, id}

    # Back under the same name: the stream is back, empty, at a.
    a = Nodes.restart(a)
    on_exit(fn -> Nodes.stop([a]) end)
    assert :ok = Nodes.await_links([a, b])
    # Made again: its IDs go on from the clock, later than the old ones.
    assert eventually(fn -> match?({:ok, "b'" <> _}, run(client, "xadd s")) end)
    {:ok, read} = run(client, "xread s")
    [_, again] = Regex.run(~r/^\[\[b's', \[\(b'(\d+-\d+)'/, read)
    assert id_of(again) > id_of(first)
    assert run(client, "id") == {:ok, id}
    stop_client(client)
  end

  defp id_of(text),
    do: text |> String.split("-") |> Enum.map(&String.to_integer/1) |> List.to_tuple()

  defp first_read?({:ok, read}, id), do: String.starts_with?(read, "[[b's', [(b'#{id}'")
  defp first_read?(_answer, _tag), do: false

  # Runs XADD, XREAD and XREAD BLOCK in turn for `ms`; returns
  # `{command, answer, ms}` for each.
  defp commands_for(client, ms) do
    deadline = System.monotonic_time(:millisecond) + ms

    Stream.cycle(["xadd s", "xread s", "xblock s 200"])
    |> Enum.reduce_while([], fn command, acc ->
      if System.monotonic_time(:millisecond) > deadline do
        {:halt, Enum.reverse(acc)}
      else
        {answer, took} = timed_run(client, command)
        {:cont, [{command, answer, took} | acc]}
      end
    end)
  end

  defp assert_prompt(records, context) do
    answers = Enum.frequencies_by(records, fn {_, answer, _} -> summary(answer) end)
    slowest = records |> Enum.map(&elem(&1, 2)) |> Enum.max(fn -> 0 end)

    IO.puts(
      "\n  #{context}: #{length(records)} commands, slowest #{slowest} ms, #{inspect(answers)}"
    )

    for {command, answer, took} <- records do
      assert took < @prompt_ms, "#{command} took #{took} ms #{context}: #{inspect(answer)}"

      case answer do
        {:ok, _} -> :ok
        {:err, text} -> assert code(text) in @cluster_errors, "#{command}: #{text} #{context}"
        other -> flunk("#{command}: #{inspect(other)} #{context}")
      end
    end
  end

  defp summary({:err, text}), do: code(text)
  defp summary({kind, _}), do: kind

  defp codes(records), do: for({_, {:err, text}, _} <- records, do: code(text))
  defp code(text), do: text |> String.split(" ", parts: 2) |> hd()

  defp start_client(port) do
    python = RedisTools.python()

    Port.open({:spawn_executable, python}, [
      :binary,
      :exit_status,
      {:line, 65_536},
      args: ["-c", @client, Integer.to_string(port)]
    ])
  end

  # Closing its stdin ends the script's loop.
  defp stop_client(client) do
    {:os_pid, pid} = Port.info(client, :os_pid)
    Port.close(client)
    System.cmd("kill", ["-TERM", Integer.to_string(pid)], stderr_to_stdout: true)
  end

  defp run(client, command), do: client |> timed_run(command) |> elem(0)

  defp timed_run(client, command) do
    true = Port.command(client, command <> "\n")

    receive do
      {^client, {:data, {:eol, line}}} ->
        [kind, ms, text] = String.split(line, "\t", parts: 3)
        answer = if kind == "ok" and command == "id", do: String.to_integer(text), else: text
        {{String.to_atom(kind), answer}, String.to_integer(ms)}

      {^client, {:exit_status, status}} ->
        flunk("the redis-py client exited with #{status}")
    after
      30_000 -> flunk("no answer to #{command} in 30 s")
    end
  end

  defp call(n, module, fun, args), do: Nodes.call(n, module, fun, args)

  defp eventually(check),
    do: Nodes.wait_until(System.monotonic_time(:millisecond) + 15_000, check) == :ok
end
