defmodule Ringbus.Bench.OpenLoop.ProgramTest do
  # The C generator and floor (bench/c/openloop.c), driven by small servers
  # of the test's own: its histogram, its RESP and PUSH_ACKS parsing, its
  # timing from the intended send, its bursts, and the build.
  use ExUnit.Case, async: true

  alias Ringbus.Bench.OpenLoop.Program
  alias Ringbus.Wire.Frame
  alias Ringbus.Test.Debian

  @moduletag timeout: 120_000
  @ping "*1\r\n$4\r\nPING\r\n"

  setup_all do
    Debian.executable!("gcc", "gcc")
    %{exe: Program.build!()}
  end

  describe "build!/1" do
    @describetag :tmp_dir

    test "compiles when the binary is missing or older than the source, not otherwise",
         %{tmp_dir: dir} do
      out = Path.join(dir, "openloop")
      assert Program.build!(out: out) == out
      assert {_, 1} = System.cmd(out, [], stderr_to_stdout: true)

      # Fresh: no compiler is needed.
      assert Program.build!(out: out, cc: nil) == out

      # Older than its source: rebuilt, and without gcc that is a clear error.
      written = File.stat!(Program.source(), time: :posix).mtime
      File.touch!(out, written - 10)

      assert_raise Mix.Error, ~r/gcc is not on the PATH.*apt-get install gcc/s, fn ->
        Program.build!(out: out, cc: nil)
      end

      assert Program.build!(out: out) == out

      assert File.stat!(out, time: :posix).mtime >= written
    end

    test "a source that does not compile is an error with gcc's output", %{tmp_dir: dir} do
      source = Path.join(dir, "bad.c")
      File.write!(source, "int main(void) { return nope; }\n")

      assert_raise Mix.Error, ~r/gcc failed.*nope/s, fn ->
        Program.build!(source: source, out: Path.join(dir, "bad"))
      end

      refute File.exists?(Path.join(dir, "bad"))
    end
  end

  describe "the histogram" do
    test "percentiles are nearest-rank, at most 0.2% above the value, the max exact", %{exe: exe} do
      # Latencies from 1 us to 2 s, in ns, in no order.
      values = for _ <- 1..20_000, do: trunc(:math.pow(10, 3 + :rand.uniform() * 6.3))
      sorted = values |> Enum.sort() |> List.to_tuple()
      result = hist(exe, values)

      assert result["count"] == "20000"

      for {key, p} <- [p50_us: 0.5, p99_us: 0.99, p999_us: 0.999, p9999_us: 0.9999] do
        exact = elem(sorted, ceil(p * 20_000 - 1.0e-9) - 1) / 1000
        got = String.to_float(result[Atom.to_string(key)])
        assert got >= exact - 0.05 and got <= exact * 1.002 + 0.05, "#{key}: #{got} vs #{exact}"
      end

      assert_in_delta String.to_float(result["max_us"]), elem(sorted, 19_999) / 1000, 0.051

      # The spectrum: a point each 0.1 nines while there are 10^x values, rising.
      curve = result["curve_us"] |> String.split(",") |> Enum.map(&String.to_float/1)
      assert length(curve) == 44
      assert curve == Enum.sort(curve)
      assert_in_delta hd(curve), elem(sorted, 0) / 1000, 0.051
    end

    test "values past the last bucket keep an exact max; negative ones count as 0", %{exe: exe} do
      result = hist(exe, [-5, 0, 3_000_000_000_000])
      assert result["count"] == "3"
      assert result["p50_us"] == "0.0"
      assert result["max_us"] == "3000000000.0"
      assert result["p9999_us"] == "3000000000.0"
    end
  end

  describe "RESP" do
    # Replies of every RESP2 kind, nested arrays and a bulk string with CRLF inside.
    @replies [
      "+OK\r\n",
      "-ERR bad\r\n",
      ":42\r\n",
      ":-7\r\n",
      "$5\r\nhello\r\n",
      "$0\r\n\r\n",
      "$-1\r\n",
      "*0\r\n",
      "*-1\r\n",
      "$4\r\na\r\nb\r\n",
      "*2\r\n$1\r\na\r\n*2\r\n:1\r\n-ERR nested\r\n",
      "*3\r\n*1\r\n*1\r\n+deep\r\n$-1\r\n*0\r\n",
      "-WRONGTYPE other\r\n"
    ]

    test "every kind of reply is counted once, split anywhere; top-level errors as errors",
         %{exe: exe} do
      errors = :counters.new(1, [])

      port = serve(fn socket -> reply_loop(socket, <<>>, 0, errors) end)

      {:ok, r} = Program.generate(exe, gen_args(port, 2_600, 0.5, 3), nil)

      assert r.requests == 1_300
      assert r.answered == 1_300 and r.unanswered == 0
      assert r.errors == :counters.get(errors, 1)
      assert r.errors > 0
    end

    test "a byte no reply starts with fails the run, naming the connection", %{exe: exe} do
      port = serve(fn socket -> answer_each(socket, "?what\r\n") end)
      assert {:error, output} = Program.generate(exe, gen_args(port, 100, 0.05, 1), nil)
      assert output =~ "connection 0: not a RESP reply"
    end
  end

  test "latencies run from the intended send: a server that holds replies 20 ms", %{exe: exe} do
    port = serve(&hold_loop(&1, <<>>))
    {:ok, r} = Program.generate(exe, gen_args(port, 200, 1, 2), nil)

    assert r.answered == 200
    assert r.max_us >= 19_000
    assert r.p50_us >= 19_000
    # The generator did not wait for the replies: it sent on schedule.
    assert r.achieved_rate >= 180
  end

  test "bursts: B requests due together, written to a connection at once", %{exe: exe} do
    parent = self()
    port = serve(fn socket -> count_reads(socket, <<>>, parent) end)
    {:ok, r} = Program.generate(exe, gen_args(port, 1_000, 0.2, 1) ++ ~w(--burst 50), nil)
    assert r.answered == 200

    reads = collect_reads([])
    assert Enum.sum(reads) == 200
    assert Enum.max(reads) >= 50
    assert length(reads) <= 8
  end

  describe "the floor" do
    setup %{exe: exe} do
      floor = Program.start_floor!(exe, nil)
      on_exit(fn -> System.cmd("kill", ["#{floor.os_pid}"], stderr_to_stdout: true) end)
      %{floor: floor}
    end

    test "answers PING with +PONG and anything else with +OK, split anywhere", %{floor: floor} do
      {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", floor.port, [:binary, active: false])

      commands =
        @ping <> "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n" <> "*1\r\n$4\r\nping\r\n"

      for <<byte <- commands>>, do: :ok = :gen_tcp.send(socket, <<byte>>)
      assert recv(socket, 19) == "+PONG\r\n+OK\r\n+PONG\r\n"
      :gen_tcp.close(socket)
    end

    test "a second of PING at 20,000/s: every request answered, at the rate", %{
      exe: exe,
      floor: floor
    } do
      args = gen_args(floor.port, 20_000, 1, 16) ++ ~w(--spin-us 50)
      {:ok, r} = Program.generate(exe, args, nil)
      assert r.requests == 20_000 and r.sent == 20_000
      assert r.answered == 20_000 and r.errors == 0
      assert r.target_rate == 20_000.0
      # The achieved rate counts the generator's own writes; loaded machines delay them a little.
      assert r.achieved_rate >= 0.9 * 20_000
      assert r.p50_us <= r.p99_us and r.p99_us <= r.p999_us and r.p999_us <= r.p9999_us
      assert r.p9999_us <= r.max_us
      assert r.lag_p999_us <= r.lag_max_us
      assert r.elapsed_s >= 0.99
    end

    test "it exits when its stdin closes", %{exe: exe} do
      floor = Program.start_floor!(exe, nil)
      ref = Port.monitor(floor.os_port)
      Port.close(floor.os_port)
      assert_receive {:DOWN, ^ref, :port, _, _}
      assert eventually_gone(floor.os_pid, 100)
    end
  end

  describe "the binary protocol" do
    setup do
      server = start_supervised!({Ringbus.Server, port: 0, auto_create: false})
      %{port: Ringbus.Server.port(server)}
    end

    test "HELLO, then PUSH frames, each acked", %{exe: exe, port: port} do
      name = "openloop-#{System.unique_integer([:positive])}"
      :ok = Ringbus.create(name, capacity: 1_000, overflow: :drop_oldest)
      args = gen_args(port, 5_000, 0.5, 4) ++ ~w(--proto push --channel #{name} --payload 16)

      {:ok, r} = Program.generate(exe, args, nil)
      assert r.answered == 2_500 and r.errors == 0
      assert {:ok, %{pushed: 2_500}} = Ringbus.info(name)
      Ringbus.delete(name)
    end

    test "an ack with an error status is an answer and an error", %{exe: exe, port: port} do
      name = "openloop-#{System.unique_integer([:positive])}"
      :ok = Ringbus.create(name, capacity: 10, overflow: :reject)
      args = gen_args(port, 1_000, 0.2, 2) ++ ~w(--proto push --channel #{name})

      {:ok, r} = Program.generate(exe, args, nil)
      assert r.answered == 200
      assert r.errors == 190
      Ringbus.delete(name)

      # No such channel, and this server creates none: every entry says no_channel.
      missing = ~w(--proto push --channel missing-#{System.unique_integer([:positive])})
      {:ok, r} = Program.generate(exe, gen_args(port, 1_000, 0.05, 1) ++ missing, nil)
      assert r.answered == 50 and r.errors == 50
    end

    test "the bytes of docs/PROTOCOL.md's test vectors, and acks in any grouping", %{exe: exe} do
      parent = self()
      # The generator speaks version 4, which has all it sends.
      hello = vector("hello_v4")
      pushes = for corr <- 1..4, do: Frame.encode({:push, corr, :ack, "events", "vvvvv"})

      port =
        serve(fn socket ->
          {:ok, got} = :gen_tcp.recv(socket, byte_size(hello), 5_000)
          send(parent, {:hello, got})
          :ok = :gen_tcp.send(socket, vector("hello_ok"))
          {:ok, got} = :gen_tcp.recv(socket, IO.iodata_length(pushes), 5_000)
          send(parent, {:pushes, got})

          # Two acks in one frame (one refused), an ERROR for the third, the fourth alone,
          # written a byte at a time.
          replies =
            IO.iodata_to_binary([
              Frame.encode({:push_acks, 2, [{1, {:ok, 0}}, {2, {:error, :full}}]}),
              Frame.encode({:error, 3, :too_large, "too large"}),
              Frame.encode({:push_acks, 1, [{4, {:ok, 1}}]})
            ])

          for <<byte <- replies>>, do: :ok = :gen_tcp.send(socket, <<byte>>)
          answer_each(socket, "")
        end)

      args = gen_args(port, 1_000, 0.004, 1) ++ ~w(--proto push --channel events --payload 5)
      assert {:ok, r} = Program.generate(exe, args, nil)
      assert_received {:hello, ^hello}
      assert_received {:pushes, got}
      assert got == IO.iodata_to_binary(pushes)
      assert r.answered == 4 and r.errors == 2
    end

    test "acks out of order, or an ERROR tied to no request, fail the run", %{exe: exe} do
      for reply <- [
            Frame.encode({:push_acks, 1, [{2, {:ok, 0}}]}),
            vector("error_connection")
          ] do
        port =
          serve(fn socket ->
            {:ok, _} = :gen_tcp.recv(socket, byte_size(vector("hello_no_token")), 5_000)
            :ok = :gen_tcp.send(socket, vector("hello_ok"))
            answer_each(socket, reply)
          end)

        args = gen_args(port, 100, 0.01, 1) ++ ~w(--proto push)
        assert {:error, output} = Program.generate(exe, args, nil)
        assert output =~ ~r/ack for corr 2, expected 1|ERROR 8: idle/
      end
    end

    test "a port that does not speak it fails the run", %{exe: exe} do
      port = serve(fn socket -> answer_each(socket, "") end)

      assert {:error, output} =
               Program.generate(exe, gen_args(port, 10, 0.1, 1) ++ ~w(--proto push), nil)

      assert output =~ "no answer to HELLO"
    end
  end

  test "a port no one listens on fails the run", %{exe: exe} do
    {:ok, listen} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(listen)
    :gen_tcp.close(listen)
    assert {:error, output} = Program.generate(exe, gen_args(port, 10, 0.1, 1), nil)
    assert output =~ "connect to 127.0.0.1:#{port}"
  end

  ## Helpers

  defp gen_args(port, rate, seconds, connections) do
    ~w(--port #{port} --rate #{rate} --seconds #{seconds} --connections #{connections} --drain 5)
  end

  # A frame of test/fixtures/protocol/, which docs/PROTOCOL.md shows.
  defp vector(name) do
    "test/fixtures/protocol/#{name}.hex"
    |> File.read!()
    |> String.replace(~r/\s+/, "")
    |> Base.decode16!(case: :lower)
  end

  defp hist(exe, values) do
    path = Path.join(System.tmp_dir!(), "openloop-hist-#{System.unique_integer([:positive])}")
    File.write!(path, Enum.join(values, "\n"))

    try do
      {out, 0} = System.cmd("sh", ["-c", ~s("$0" hist < "$1"), exe, path])

      for field <- String.split(out), into: %{} do
        [key, value] = String.split(field, "=", parts: 2)
        {key, value}
      end
    after
      File.rm(path)
    end
  end

  # A listener on a free port; each connection is handled by `handle` in a process of its own.
  defp serve(handle) do
    {:ok, listen} =
      :gen_tcp.listen(0, [:binary, ip: {127, 0, 0, 1}, active: false, nodelay: true])

    {:ok, port} = :inet.port(listen)
    acceptor = spawn_link(fn -> accept(listen, handle) end)
    :ok = :gen_tcp.controlling_process(listen, acceptor)
    port
  end

  defp accept(listen, handle) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        pid = spawn(fn -> receive(do: (:go -> handle.(socket))) end)
        :ok = :gen_tcp.controlling_process(socket, pid)
        send(pid, :go)
        accept(listen, handle)

      {:error, _} ->
        :ok
    end
  end

  # Answers the PINGs of each read with the next of @replies in turn, the
  # bytes split at random offsets over several writes; counts the error replies.
  defp reply_loop(socket, rest, n, errors) do
    case :gen_tcp.recv(socket, 0) do
      {:ok, data} ->
        {count, rest} = pings(rest <> data)
        replies = for i <- n..(n + count - 1)//1, do: Enum.at(@replies, rem(i, length(@replies)))
        :counters.add(errors, 1, Enum.count(replies, &String.starts_with?(&1, "-")))
        send_split(socket, IO.iodata_to_binary(replies))
        reply_loop(socket, rest, n + count, errors)

      {:error, _} ->
        :ok
    end
  end

  defp pings(data), do: pings(data, 0)
  defp pings(@ping <> rest, n), do: pings(rest, n + 1)
  defp pings(rest, n), do: {n, rest}

  defp send_split(_socket, <<>>), do: :ok

  defp send_split(socket, data) do
    at = min(:rand.uniform(7), byte_size(data))
    <<chunk::binary-size(at), rest::binary>> = data
    :gen_tcp.send(socket, chunk)
    # Pacing, so that the generator reads the pieces apart.
    if :rand.uniform(4) == 1, do: receive(after: (1 -> :ok))
    send_split(socket, rest)
  end

  defp answer_each(socket, reply) do
    case :gen_tcp.recv(socket, 0) do
      {:ok, _} ->
        :gen_tcp.send(socket, reply)
        answer_each(socket, reply)

      {:error, _} ->
        :ok
    end
  end

  # Answers each PING 20 ms after it came.
  defp hold_loop(socket, rest) do
    :ok = :inet.setopts(socket, active: :once)

    receive do
      {:tcp, ^socket, data} ->
        {count, rest} = pings(rest <> data)
        Process.send_after(self(), {:reply, count}, 20)
        hold_loop(socket, rest)

      {:reply, count} ->
        :gen_tcp.send(socket, String.duplicate("+PONG\r\n", count))
        hold_loop(socket, rest)

      {:tcp_closed, ^socket} ->
        :ok
    end
  end

  # Answers every PING at once, and tells the test how many came in each read.
  defp count_reads(socket, rest, parent) do
    case :gen_tcp.recv(socket, 0) do
      {:ok, data} ->
        {count, rest} = pings(rest <> data)
        send(parent, {:read, count})
        :gen_tcp.send(socket, String.duplicate("+PONG\r\n", count))
        count_reads(socket, rest, parent)

      {:error, _} ->
        send(parent, :closed)
    end
  end

  defp collect_reads(acc) do
    receive do
      {:read, count} -> collect_reads([count | acc])
      :closed -> Enum.reverse(acc)
    after
      5_000 -> flunk("the connection did not close")
    end
  end

  defp recv(socket, size) do
    {:ok, data} = :gen_tcp.recv(socket, size, 5_000)
    data
  end

  defp eventually_gone(_os_pid, 0), do: false

  defp eventually_gone(os_pid, tries) do
    case System.cmd("kill", ["-0", "#{os_pid}"], stderr_to_stdout: true) do
      {_, 0} ->
        receive after: (20 -> :ok)
        eventually_gone(os_pid, tries - 1)

      _ ->
        true
    end
  end
end
