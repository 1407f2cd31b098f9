defmodule Ringbus.Resp.XaddBatchTest do
  # The XADDs of one read are stored with one push per stream
  # (`Ringbus.Resp.StreamCommands.store/2`). That must change nothing a
  # client can see: the same commands sent in one write or one at a time
  # (each its own read) get the same replies and leave the same streams,
  # entries and figures (pulled, overwritten, rejected) alike.
  use ExUnit.Case, async: false

  alias Ringbus.Cluster.Directory
  alias Ringbus.Resp.Session
  alias Ringbus.Server.ConnectionSupervisor
  alias Ringbus.Test.{RespClient, RespIds}

  import Ringbus.Test.Eventually

  @moduletag timeout: 300_000

  # xb-a, xb-b: made by XADD; xb-m: missing until an XADD without
  # NOMKSTREAM makes it; the others made here, small, to fill and lap.
  @made [
    {"xb-r", capacity: 4, overflow: :reject},
    {"xb-d", capacity: 6, overflow: :drop_oldest},
    {"xb-t", capacity: 100, overflow: :drop_oldest, max_bytes: 120},
    {"xb-u", capacity: 100, overflow: :reject, max_bytes: 100}
  ]
  @keys ["xb-a", "xb-b", "xb-m" | Enum.map(@made, &elem(&1, 0))]

  setup do
    server = start_supervised!({Ringbus.Server, port: 0, resp_port: 0})
    on_exit(fn -> Enum.each(@keys, &Ringbus.delete/1) end)
    {:ok, server: server, port: Ringbus.Server.port(server, :resp)}
  end

  test "property: a read of mixed commands answers and stores as the same commands one per read",
       %{port: port} do
    kinds =
      [:xadd, :xadd, :xadd, :xadd, :maxlen, :maxlen, :maxlen_eq, :minid, :approx, :nomk] ++
        [:explicit, :arity, :big, :bad_name, :xlen, :xrange, :xtrim, :xdel, :ping, :multi, :exec]

    command =
      :proper_types.tuple([
        :proper_types.elements(kinds),
        :proper_types.elements(@keys),
        :proper_types.choose(0, 7)
      ])

    property =
      :proper.forall(:proper_types.list(command), fn specs ->
        commands = Enum.map(specs, &command/1)
        # PropEr cannot report an exception on this OTP: say it, then fail.
        {one_by_one, in_one_read} =
          try do
            {run(port, commands, :one_by_one), run(port, commands, :one_read)}
          rescue
            e -> {{:raised, Exception.format(:error, e, __STACKTRACE__)}, :raised}
          end

        :proper.whenfail(
          fn ->
            IO.puts("commands: #{inspect(commands)}")
            IO.puts("one by one: #{inspect(one_by_one)}")
            IO.puts("one read:   #{inspect(in_one_read)}")
          end,
          fn -> one_by_one == in_one_read end
        )
      end)

    assert :proper.quickcheck(property, [:quiet, numtests: 150, max_size: 40]) == true
  end

  # The cases the property may draw seldom, each on its own.
  @table [
    interleaved: [
      ~w(XADD xb-a * f 1),
      ~w(XADD xb-b * f 2),
      ~w(XADD xb-a * f 3),
      ~w(XADD xb-b * f 4),
      ~w(XLEN xb-a),
      ~w(XADD xb-a * f 5)
    ],
    reject_full_midway: for(i <- 1..7, do: ["XADD", "xb-r", "*", "f", "#{i}"]),
    reject_full_with_maxlen:
      for(i <- 1..7, do: ["XADD", "xb-r", "MAXLEN", "3", "*", "f", "#{i}"]),
    lap_with_maxlen: for(i <- 1..9, do: ["XADD", "xb-d", "MAXLEN", "5", "*", "f", "#{i}"]),
    maxlen_steady:
      for(i <- 1..20, do: ["XADD", "xb-a", "MAXLEN", "=", "4", "*", "f", "#{i}"]) ++
        [~w(XRANGE xb-a - +)],
    maxlen_over_batch: for(i <- 1..6, do: ["XADD", "xb-a", "MAXLEN", "2", "*", "f", "#{i}"]),
    # `~` removes whole nodes of 100 entries: these runs cross several, and
    # LIMIT stops each XADD's trim short of what the bound allows.
    approx_over_nodes:
      for(i <- 1..450, do: ["XADD", "xb-a", "MAXLEN", "~", "120", "*", "f", "#{i}"]) ++
        [~w(XLEN xb-a)],
    approx_with_limit:
      for(i <- 1..300, do: ["XADD", "xb-a", "*", "f", "#{i}"]) ++
        for(
          i <- 1..40,
          do: ["XADD", "xb-a", "MAXLEN", "~", "10", "LIMIT", "100", "*", "f", "#{i}"]
        ) ++
        [~w(XLEN xb-a)],
    approx_with_limit_within_nodes:
      for(i <- 1..600, do: ["XADD", "xb-a", "*", "f", "#{i}"]) ++
        for(
          i <- 1..3,
          do: ["XADD", "xb-a", "MAXLEN", "~", "10", "LIMIT", "150", "*", "f", "#{i}"]
        ) ++
        [~w(XLEN xb-a)],
    maxlen_changes: [
      ~w(XADD xb-a MAXLEN 1 * f 1),
      ~w(XADD xb-a MAXLEN 1 * f 2),
      ~w(XADD xb-a MAXLEN 10 * f 3),
      ~w(XADD xb-b * f 4),
      ~w(XADD xb-a MAXLEN 1 * f 5)
    ],
    minid: [
      ~w(XADD xb-a * f 1),
      ~w(XADD xb-a * f 2),
      ~w(XADD xb-a MINID 2 * f 3),
      ~w(XADD xb-a MINID 5 * f 4),
      ~w(XADD xb-a MINID 5 * f 5),
      ~w(XRANGE xb-a - +)
    ],
    too_large_in_run: [
      ~w(XADD xb-t * f 1),
      ["XADD", "xb-t", "*", "f", String.duplicate("x", 200)],
      ~w(XADD xb-t * f 3),
      ~w(XADD xb-u * f 4),
      ["XADD", "xb-u", "*", "f", String.duplicate("x", 200)],
      ~w(XADD xb-u * f 6)
    ],
    bytes_full: for(i <- 1..8, do: ["XADD", "xb-u", "*", "f", String.duplicate("#{i}", 10)]),
    nomkstream: [
      ~w(XADD xb-m NOMKSTREAM * f 1),
      ~w(XADD xb-m NOMKSTREAM * f 2),
      ~w(XADD xb-m * f 3),
      ~w(XADD xb-m NOMKSTREAM * f 4),
      ~w(XADD xb-m NOMKSTREAM * f 5)
    ],
    explicit_ids: [
      ~w(XADD xb-a * f 1),
      ~w(XADD xb-a 2-0 f 2),
      ~w(XADD xb-a * f 3),
      ~w(XADD xb-a 3-0 f 4),
      ~w(XADD xb-a * f 5)
    ],
    transaction: [
      ~w(XADD xb-a * f 1),
      ~w(MULTI),
      ~w(XADD xb-a * f 2),
      ~w(XADD xb-b * f 3),
      ~w(EXEC),
      ~w(XADD xb-a * f 4)
    ],
    errors_between: [
      ~w(XADD xb-a * f 1),
      ~w(XADD xb-a * f),
      ~w(XADD xb-a MAXLEN x * f 2),
      ["XADD", "", "*", "f", "3"],
      ~w(XADD xb-a * f 4)
    ]
  ]

  for {name, commands} <- @table do
    test "#{name}: in one read as one per read", %{port: port} do
      commands = unquote(Macro.escape(commands))
      assert run(port, commands, :one_read) == run(port, commands, :one_by_one)
    end
  end

  test "the XADDs of a read, interleaved over two streams, are one push per stream" do
    session = Session.new(Ringbus.Server.Config.new!(port: 0), Session.context())
    made = [~w(XADD xb-a * f 0), ~w(XADD xb-b * f 0)]
    {:ok, _out, session} = Session.handle(made, session)

    commands = for i <- 1..8, do: ["XADD", Enum.at(["xb-a", "xb-b"], rem(i, 2)), "*", "f", "#{i}"]

    :erlang.trace_pattern({Ringbus, :run, :_}, true, [])

    # The calls come to this process from a tracer of their own.
    test = self()
    tracer = spawn_link(fn -> forward(test) end)
    :erlang.trace(self(), true, [:call, tracer: tracer])
    {:ok, out, _session} = Session.handle(commands, session)
    :erlang.trace(self(), false, [:call])
    :erlang.trace_pattern({Ringbus, :_, :_}, false, [])
    send(tracer, {:done, self()})
    assert_receive :forwarded

    assert pushes() == [{:push_run, "xb-b", 4}, {:push_run, "xb-a", 4}]

    # Each XADD is answered, in order, with the ID its entry reads back with.
    stored = fn key ->
      {:ok, messages, 0} = Ringbus.run(key, {:read, 1, 4, nil, :ids})
      for {_seq, _payload, {ms, n}} <- messages, do: "#{ms}-#{n}"
    end

    ids = Enum.zip(stored.("xb-b"), stored.("xb-a")) |> Enum.flat_map(&Tuple.to_list/1)
    assert IO.iodata_to_binary(out) == Enum.map_join(ids, &"$#{byte_size(&1)}\r\n#{&1}\r\n")

    assert {:ok, [{0, _}, {1, _}, {2, _}, {3, _}, {4, _}], 0} = Ringbus.read("xb-a", 0, 10)
  end

  test "a read's XADDs to a stream whose node is down each answer CLUSTERDOWN, the others are stored",
       %{port: port} do
    # The directory learns of a stream homed on a node that is not connected.
    ghost = :"xb-ghost@nowhere"
    stamp = System.unique_integer([:positive])
    Directory.peer(ghost, {:add, "xb-remote", [capacity: 10], stamp, 1, nil})
    on_exit(fn -> Directory.peer(ghost, {:del, "xb-remote", stamp}) end)
    assert eventually(fn -> Directory.remote_home("xb-remote") == {:ok, ghost} end)

    commands = [
      ~w(XADD xb-remote * f 1),
      ~w(XADD xb-a * f 2),
      ~w(XADD xb-remote * f 3),
      ~w(XADD xb-remote MAXLEN 1 * f 4),
      ~w(XADD xb-remote MAXLEN 1 * f 5),
      ~w(XADD xb-a * f 6)
    ]

    down = {:error, "CLUSTERDOWN the node that holds stream 'xb-remote' is not connected"}
    {replies, c} = RespClient.calls(RespClient.connect!(port), commands)
    assert [^down, first, ^down, ^down, ^down, second] = replies
    {:ok, [{0, _, id1}, {1, _, id2}], 0} = Ringbus.run("xb-a", {:read, 0, 2, nil, :ids})
    assert [first, second] == Enum.map([id1, id2], fn {ms, n} -> "#{ms}-#{n}" end)
    assert {[{:simple, "PONG"}], _c} = RespClient.call(c, ~w(PING))
  end

  test "the replies of a read go out in one socket write", %{server: server, port: port} do
    c = RespClient.connect!(port)
    {[{:simple, "PONG"}], c} = RespClient.call(c, ~w(PING))
    {_, connections, _, _} = List.keyfind(children(server), {ConnectionSupervisor, :resp}, 0)
    [{_, connection, _, _}] = DynamicSupervisor.which_children(connections)

    test = self()
    tracer = spawn_link(fn -> forward(test) end)
    :erlang.trace_pattern({Ringbus.Socket.TCP, :send, 2}, true, [])
    :erlang.trace(connection, true, [:call, tracer: tracer])

    # Two streams, interleaved, then commands that are not XADDs.
    xadds = for i <- 1..16, do: ["XADD", Enum.at(["xb-a", "xb-b"], rem(i, 2)), "*", "f", "#{i}"]
    commands = xadds ++ [~w(XLEN xb-a), ~w(PING)]

    {replies, _c} = RespClient.calls(c, commands)
    assert List.last(replies) == {:simple, "PONG"}

    :erlang.trace(connection, false, [:call])
    :erlang.trace_pattern({Ringbus.Socket.TCP, :send, 2}, false, [])
    send(tracer, {:done, test})
    assert_receive :forwarded
    assert [{Ringbus.Socket.TCP, :send, [_socket, _out]}] = sends()
  end

  defp children(server), do: Supervisor.which_children(server)

  defp sends do
    receive do
      {:trace, _pid, :call, {m, f, args}} -> [{m, f, args} | sends()]
    after
      0 -> []
    end
  end

  defp forward(test) do
    receive do
      {:done, ^test} -> send(test, :forwarded)
      message -> send(test, message) && forward(test)
    end
  end

  defp pushes do
    receive do
      {:trace, _pid, :call, {Ringbus, :run, [key, {:ids, {f, _payloads, n, _bytes}} | _]}} ->
        [{f, key, n} | pushes()]

      {:trace, _pid, :call, {Ringbus, :run, [key, op | _]}} ->
        [{op, key} | pushes()]
    after
      0 -> []
    end
  end

  ## Running commands

  defp command({kind, key, n}) do
    v = "v#{n}"

    case kind do
      :xadd -> ["XADD", key, "*", "f", v]
      :maxlen -> ["XADD", key, "MAXLEN", "#{n}", "*", "f", v]
      :maxlen_eq -> ["XADD", key, "MAXLEN", "=", "#{n}", "*", "f", v]
      :minid -> ["XADD", key, "MINID", "#{n}", "*", "f", v]
      :approx -> ["XADD", key, "MAXLEN", "~", "#{n}", "*", "f", v]
      :nomk -> ["XADD", key, "NOMKSTREAM", "*", "f", v]
      :explicit -> ["XADD", key, "#{n}-0", "f", v]
      :arity -> ["XADD", key, "*", "f"]
      :big -> ["XADD", key, "*", "f", String.duplicate("x", 150 + n)]
      :bad_name -> ["XADD", "", "*", "f", v]
      :xlen -> ["XLEN", key]
      :xrange -> ["XRANGE", key, "-", "+"]
      :xtrim -> ["XTRIM", key, "MAXLEN", "#{n}"]
      :xdel -> ["XDEL", key, "#{n}-0"]
      :ping -> ["PING"]
      :multi -> ["MULTI"]
      :exec -> ["EXEC"]
    end
  end

  # The replies, then what each stream holds and its figures; from fresh streams.
  defp run(port, commands, how) do
    Enum.each(@keys, &Ringbus.delete/1)
    for {name, opts} <- @made, do: :ok = Ringbus.create(name, opts)
    client = RespClient.connect!(port)

    {replies, client} =
      case how do
        :one_read ->
          RespClient.calls(client, commands)

        :one_by_one ->
          Enum.flat_map_reduce(commands, client, &RespClient.call(&2, &1))
      end

    # Every command has run: its reply came.
    RespClient.close(client)
    # Auto IDs are times, others in each run: named by their order.
    {RespIds.named(replies), Enum.map(@keys, &held/1)}
  end

  defp held(key) do
    case Ringbus.info(key) do
      {:ok, info} ->
        {:ok, entries, _lost} = Ringbus.read(key, 0, 1000)
        # Bytes held compare where max_bytes bounds them: without it, a drop-oldest
        # channel keeps a batch as one chunk, whose bytes go with its last entry.
        figures = [:len, :first_seq, :next_seq, :pulled, :overwritten, :rejected]
        figures = if info.max_bytes, do: [:bytes | figures], else: figures
        {key, Map.take(info, figures), entries}

      {:error, :no_channel} ->
        {key, :none}
    end
  end
end
