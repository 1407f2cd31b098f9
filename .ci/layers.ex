# The rules of docs/ARCHITECTURE.md ("Layers", "Rules every change keeps"),
# checked on the code. `elixir .ci/layers.exs` runs them on the test build
# (.ci/run does); test/ci/layers_test.exs runs each on planted input. Exits 1
# with the list of what is broken.
#
#   1. Arrows. Every file of lib/ belongs to a layer (@layer_of), and every
#      dependency between two files of lib/, as `mix xref graph` lists them
#      (calls, structs, macros, aliases), stays in its layer or goes along an
#      arrow of @allowed; the arrows never make a cycle.
#   2. lib/ stands alone. No file of lib/ depends on a file of bench/ or
#      test/ (xref in MIX_ENV=test, which compiles bench/lib and
#      test/support, lists those edges too).
#   3. Forbidden calls (@forbidden). The wire codec is pure: a file of wire/
#      calls no socket, no OS, nothing of processes (no send, spawn, link,
#      monitor, timer, GenServer, process dictionary, and no `receive`) and no
#      shared state (ETS, :persistent_term, :atomics, :counters). The channel
#      layer (lib/ringbus/channel.ex and channel/) is processes and ETS: its
#      subscriptions send batches and its pushes wake them, but it calls no
#      socket (nor Ringbus.Socket) and no OS.
#   4. Dynamic dispatch. A function of lib/ that calls apply/2,3 (or builds a
#      fun from atoms) or makes an atom at run time (String.to_atom and
#      friends, Module.concat, "#{}" in an atom) is listed in @dynamic with
#      what it dispatches to: xref cannot follow a module that is data, so
#      each is a dependency the arrows cannot check.
#   5. Long files. No file of lib/ is over @max_lines lines unless
#      @long_files names it, with a cap and the reason; it stays under its cap.
#
# Rules 3 and 4 read what each module of lib/ calls from its BEAM: the
# debug info (Elixir's expanded code, kept by Mix in every environment)
# gives each remote call (send/2 and Process.send/3 are :erlang.send/2,3
# there) and each `receive` with its function and line, including what the
# Erlang compiler folds away (`apply(m, :f, [x])` becomes a plain call
# `m:f(X)`); the imports chunk (every remote call the BEAM makes) is a net
# under it: a forbidden call it lists that the debug info did not show is
# reported without a line. A call on a module held in a variable (how a
# behaviour is called: `protocol.decode(...)`) is not flagged; the module is
# an alias written somewhere in lib/, which xref lists as a dependency where
# it is written.
#
# Known exceptions are listed below with the work that removes them. An
# entry of @exceptions, @dynamic or @long_files that allows nothing any more
# is printed as a note to remove it, not a failure.

defmodule Layers do
  # Which layer each file of lib/ is in: the first prefix that matches.
  @layer_of [
    {"lib/mix/", :mix},
    {"lib/ringbus.ex", :api},
    {"lib/ringbus/groups.ex", :api},
    {"lib/ringbus/groups/", :api},
    {"lib/ringbus/op.ex", :op},
    {"lib/ringbus/op/", :op},
    {"lib/ringbus/group.ex", :group},
    {"lib/ringbus/group/", :group},
    {"lib/ringbus/application.ex", :application},
    {"lib/ringbus/store.ex", :store},
    {"lib/ringbus/store/", :store},
    {"lib/ringbus/channel.ex", :channel},
    {"lib/ringbus/channel/", :channel},
    {"lib/ringbus/wire/", :wire},
    {"lib/ringbus/server", :server},
    {"lib/ringbus/client", :client},
    {"lib/ringbus/cluster", :cluster},
    {"lib/ringbus/replica", :replica},
    {"lib/ringbus/resp", :resp},
    {"lib/ringbus/metrics", :metrics},
    {"lib/ringbus/http", :http},
    {"lib/ringbus/release", :release},
    # Leaves any layer above the wire may use.
    {"lib/ringbus/options.ex", :leaf},
    {"lib/ringbus/socket", :leaf},
    {"lib/ringbus/error.ex", :leaf},
    {"lib/ringbus/histogram.ex", :leaf},
    {"lib/ringbus/sentinel.ex", :leaf}
  ]

  # What the release and the mix tasks, which run a node, may use.
  @operations [
    :http,
    :metrics,
    :resp,
    :server,
    :client,
    :wire,
    :api,
    :channel,
    :store,
    :op,
    :group,
    :cluster,
    :leaf
  ]

  # The arrows: layer => the layers its files may depend on (besides its own).
  @allowed %{
    # Ringbus.Options, Ringbus.Socket, Ringbus.Error: depend on nothing.
    leaf: [],
    # The protocol codec: depends on nothing.
    wire: [],
    # Ringbus.Channel.* (ring, subscriptions, anchor): never the wire.
    channel: [:leaf],
    # The store owns every channel's tables: it makes its ring and anchor.
    store: [:channel, :leaf],
    # Every channel operation, as data, and the one place that runs one
    # (Ringbus.Op): on the channel layer, the channel's consumer groups, or
    # through a replicated channel's log.
    op: [:channel, :group, :replica, :leaf],
    # Consumer groups (Ringbus.Group): a table beside the channels, run by
    # the op layer on a channel's handle; they read its ring.
    group: [:channel, :leaf],
    # Another node's operations on a channel of this one run through the op
    # layer; replicated channels' deletes, memberships and leaders are the
    # replica layer's.
    cluster: [:op, :channel, :store, :replica, :leaf],
    # Replicated channels: a Ra machine applying into the channel layer's
    # rings and the group layer's tables.
    replica: [:channel, :store, :group, :leaf],
    # lib/ringbus.ex: creates, deletes and names the store lacks go to the cluster.
    api: [:op, :channel, :store, :cluster, :replica, :leaf],
    # The client uses the wire only, never the server.
    client: [:wire, :leaf],
    # The server uses the wire and the channel API.
    server: [:wire, :api, :channel, :leaf],
    # Front end: on top of the server and the channel API; the node's groups
    # for its listener's figures (their requests go through the API).
    resp: [:server, :wire, :api, :channel, :group, :leaf],
    # Operations, on top of everything, in this order.
    metrics: [:server, :wire, :api, :channel, :store, :cluster, :leaf],
    http: [:metrics, :server, :api, :channel, :cluster, :leaf],
    release: @operations,
    application: [:release, :server, :cluster, :replica, :store, :api, :channel, :leaf],
    mix: [:release | @operations]
  }

  # Dependencies that break the arrows today, file to file: each is allowed
  # as it is, and no other like it.
  @exceptions []

  # The functions of :erlang on processes. send/2 and Process.send/3 compile
  # to :erlang.send/2,3, Process.send_after/3 to :erlang.send_after/3.
  @erlang_process ~w(send send_nosuspend send_after start_timer cancel_timer read_timer
                     spawn spawn_link spawn_monitor spawn_opt link unlink monitor demonitor
                     self register unregister whereis registered process_info process_flag
                     is_process_alive processes group_leader hibernate yield
                     put get erase get_keys)a

  # What a layer's files may not call, by kind. A pattern is a module (any of
  # its functions), {module, function} (any arity), {module, function,
  # arity}, or :receive.
  @calls %{
    socket: [
      :gen_tcp,
      :gen_udp,
      :gen_sctp,
      :ssl,
      :socket,
      :inet,
      :prim_inet,
      Ringbus.Socket
    ],
    os: [
      :os,
      Port,
      File,
      :file,
      :prim_file,
      {System, :cmd},
      {System, :shell},
      {:erlang, :open_port},
      {:erlang, :port_command},
      {:erlang, :port_control},
      {:erlang, :port_call},
      {:erlang, :port_close},
      {:erlang, :port_connect}
    ],
    process:
      [:receive, {:erlang, :exit, 2} | Enum.map(@erlang_process, &{:erlang, &1})] ++
        [Process, Task, Agent, GenServer, Supervisor, DynamicSupervisor, Registry, Node] ++
        [:gen_server, :gen_statem, :gen_event, :gen, :proc_lib, :supervisor, :sys] ++
        [:global, :pg, :rpc, :erpc, :timer],
    state: [:ets, :persistent_term, :atomics, :counters]
  }

  @kinds %{
    socket: "a socket (nor Ringbus.Socket)",
    os: "the OS (commands, ports, files)",
    process: "anything of processes (send, spawn, monitor, timers, receive...)",
    state: "shared state (ETS, :persistent_term, :atomics, :counters)"
  }

  # Layer => the kinds of @calls its files may not make.
  @forbidden %{
    # A pure codec: takes and returns data.
    wire: [:socket, :os, :process, :state],
    # Processes and ETS: subscriptions send their batches, pushes wake them.
    channel: [:socket, :os]
  }

  # The calls that dispatch on data (rule 4): apply, a fun made of atoms,
  # and every way of making an atom (a module name) at run time.
  # String.to_atom/1 and an atom with "#{}" compile to :erlang.binary_to_atom/2.
  @dispatch [
    {:erlang, :apply},
    {Kernel, :apply},
    {:erlang, :make_fun, 3},
    {Function, :capture, 3},
    {:erlang, :binary_to_atom},
    {:erlang, :binary_to_existing_atom},
    {:erlang, :list_to_atom},
    {:erlang, :list_to_existing_atom},
    {String, :to_atom},
    {String, :to_existing_atom},
    {List, :to_atom},
    {List, :to_existing_atom},
    {Module, :concat},
    {Module, :safe_concat}
  ]

  # The functions of lib/ that dispatch on data (rule 4) today, each with
  # what it dispatches to. An entry allows any call of @dispatch in that
  # function, and nothing in any other.
  @dynamic %{
    {"lib/ringbus/resp/session.ex", "dispatch/3"} =>
      "RESP's command table names each command's {module, function}, all in lib/ringbus/resp/",
    {"lib/ringbus/replica.ex", "change/4"} =>
      ":ra.add_member/3 or :ra.remove_member/3, the membership change asked for",
    {"lib/ringbus/replica.ex", "handle/2"} =>
      "Ra's server and writer names (registered names, not modules), one per replicated " <>
        "channel, from a hash of its name",
    {"lib/ringbus/release/config.ex", "value/2"} =>
      "node names and the cookie from the environment (atoms, not modules); the log level " <>
        "an existing atom of a fixed list",
    {"lib/ringbus/release/files.ex", "grants/2"} =>
      "a token's access, one of read, write or manage, as an existing atom (an option key)",
    {"lib/ringbus/release.ex", "remote_endpoint/1"} =>
      "`bin/ringbus eval`'s node name, the target node's name and the cookie (atoms, not " <>
        "modules)"
  }

  @max_lines 600

  # Files of lib/ over @max_lines, each with the most lines it may have and
  # why it is not split.
  @long_files %{
    "lib/ringbus.ex" =>
      {1010,
       "the public API in one module, whose documentation (half its lines) is the user's " <>
         "guide; every operation is one line over the operation path (Ringbus.Op)"},
    "lib/ringbus/client.ex" =>
      {1000,
       "the client's public API in one module, whose documentation is half its lines; the " <>
         "work is in Client.Connection, Client.Session and Client.Handshake"},
    "lib/ringbus/channel/ring.ex" =>
      {1355,
       "one lock-free algorithm over one channel's atomics slots and ETS keys; push, pull, " <>
         "read and the replicated writes each rely on the others' cursor and chunk invariants; " <>
         "a message's time is read inside its seq reservation, and probed and expired through " <>
         "the same rows, chunks and tail (the search over times is Ringbus.Channel.Times); " <>
         "a reject push that finds the ring full frees what holding groups acked; a trim " <>
         "claims its seqs with one swap of tail and takes a chunk's with one count down, on every member of a replicated channel too; a replicated snapshot reads the ring in one select; an expiry sweep bounds its work; " <>
         "a message's Redis stream ID is reserved with its time inside the seq reservation and " <>
         "stored in the same rows and chunks (the stamp's rules are Ringbus.Channel.Ids)"},
    "lib/ringbus/cluster/directory/core.ex" =>
      {800,
       "one state machine whose events (claims, syncs, relays, replicated members, forgets) " <>
         "all apply the same stamp and claim rules to the same state; the tests drive it " <>
         "event by event as one"},
    "lib/ringbus/group/table.ex" =>
      {815,
       "one ETS table's row layouts (groups, consumers, the PEL and its due index, push " <>
         "subscriptions) and every atomic change to them, and a replicated channel's " <>
         "snapshot of them; the match specs of each row kind must agree, so they are " <>
         "written in one place"},
    "lib/ringbus/wire/frame.ex" =>
      {1310,
       "each frame's encoder and decoder side by side on one set of opcodes and field " <>
         "guards, so a layout is written and read in one place, with the sizes other " <>
         "layers read from it"}
  }

  @build "_build/test/lib/ringbus/ebin"

  @typedoc "A dependency as `mix xref graph` lists it: from, to, kind."
  @type edge :: {Path.t(), Path.t(), String.t()}

  @typedoc """
  A call a file's compiled code makes: the file, the function making it
  ("name/arity") and the line (both nil when only the imports chunk shows
  it), and what it calls: {module, function, arity} or :receive.
  """
  @type call :: {Path.t(), String.t() | nil, pos_integer() | nil, mfa() | :receive}

  def main do
    {problems, notes} = check(collect())
    Enum.each(notes, &IO.puts("layers: note: " <> &1))

    if problems == [] do
      IO.puts("layers: lib/ keeps every rule of docs/ARCHITECTURE.md that .ci/layers.ex checks")
    else
      IO.puts(:stderr, "Layer rules broken (docs/ARCHITECTURE.md; the tables are .ci/layers.ex):")
      Enum.each(problems, &IO.puts(:stderr, "  " <> &1))
      System.halt(1)
    end
  end

  @doc "What the rules read, from the test build of the tree in the current directory."
  def collect do
    # xref compiles first, so the BEAMs read below are the sources'.
    edges = xref_edges()
    beams = Path.wildcard(Path.join(@build, "*.beam"))
    if beams == [], do: fail("no BEAM in #{@build}: compile with MIX_ENV=test")
    calls = for beam <- beams, call <- beam_calls(beam), lib?(elem(call, 0)), do: call
    if calls == [], do: fail("no BEAM in #{@build} was compiled from lib/")
    lines = for file <- Path.wildcard("lib/**/*.ex"), do: {file, line_count(File.read!(file))}
    %{edges: edges, calls: calls, lines: lines}
  end

  @doc "Every rule over `data` (see collect/0): {problems, notes}; no problem is a pass."
  def check(%{edges: edges, calls: calls, lines: lines}) do
    problems =
      table_problems(@allowed) ++
        layer_problems(Enum.map(lines, &elem(&1, 0))) ++
        edge_problems(edges) ++
        outside_problems(edges) ++
        call_problems(calls) ++
        dispatch_problems(calls) ++
        length_problems(lines)

    {problems, stale_entries(edges, calls, lines)}
  end

  # Entries of the tables that allow nothing any more: notes, not failures,
  # so that the change removing what they allow need not edit this file.
  defp stale_entries(edges, calls, lines) do
    exceptions =
      for {from, to} <- @exceptions, not Enum.any?(edges, &match?({^from, ^to, _}, &1)) do
        "#{from} -> #{to} no longer exists; remove its exception"
      end

    dynamic =
      for {file, fun} <- Map.keys(@dynamic),
          not Enum.any?(calls, &(dispatch?(&1) and match?({^file, ^fun, _, _}, &1))) do
        "#{file} #{fun} no longer dispatches on data; remove it from @dynamic"
      end

    long =
      for file <- Map.keys(@long_files),
          Enum.all?(lines, fn {f, count} -> f != file or count <= @max_lines end) do
        "#{file} is no longer over #{@max_lines} lines; remove it from @long_files"
      end

    exceptions ++ dynamic ++ long
  end

  ## The arrows

  @doc "The arrows make a cycle when some layer reaches itself."
  def table_problems(allowed) do
    for layer <- Map.keys(allowed), layer in reach(allowed, Map.fetch!(allowed, layer), []) do
      "the table of allowed arrows lets #{layer} reach itself"
    end
  end

  defp reach(_allowed, [], seen), do: seen

  defp reach(allowed, [layer | rest], seen) do
    if layer in seen,
      do: reach(allowed, rest, seen),
      else: reach(allowed, Map.fetch!(allowed, layer) ++ rest, [layer | seen])
  end

  @doc "Files of lib/ in no layer."
  def layer_problems(files) do
    for file <- files, lib?(file), layer(file) == nil do
      "#{file} is in no layer: add it to @layer_of in .ci/layers.ex"
    end
  end

  @doc "Dependencies between two files of lib/ against the arrows."
  def edge_problems(edges) do
    for {from, to, label} <- edges,
        a = lib?(from) && layer(from),
        b = lib?(to) && layer(to),
        a && b && a != b,
        b not in Map.fetch!(@allowed, a),
        {from, to} not in @exceptions do
      "#{from} (#{a}) -> #{to} (#{b}), #{label}: #{a} may depend on " <>
        Enum.join([a | Map.fetch!(@allowed, a)], ", ")
    end
  end

  ## lib/ stands alone

  @doc "Dependencies of a file of lib/ on bench/ or test/."
  def outside_problems(edges) do
    for {from, to, label} <- edges,
        lib?(from),
        String.starts_with?(to, ["bench/", "test/"]) do
      "#{from} -> #{to}, #{label}: lib/ never depends on bench/ or test/, which no " <>
        "release compiles"
    end
  end

  ## Forbidden calls

  @doc "Calls of the wire and channel layers' files that @forbidden names."
  def call_problems(calls) do
    for {file, _fun, _line, what} = call <- calls,
        layer = lib?(file) && layer(file),
        kind <- Map.get(@forbidden, layer, []),
        Enum.any?(Map.fetch!(@calls, kind), &matches?(&1, what)) do
      "#{where(call)} #{describe(what)}: the #{layer} layer may not call #{@kinds[kind]}"
    end
    |> Enum.uniq()
  end

  ## Dynamic dispatch

  @doc "Calls of @dispatch in lib/ outside the functions @dynamic lists."
  def dispatch_problems(calls) do
    for {file, fun, _line, what} = call <- calls,
        lib?(file),
        dispatch?(call),
        not Map.has_key?(@dynamic, {file, fun}) do
      "#{where(call)} #{describe(what)}: a dispatch on data xref cannot follow; list it in " <>
        "@dynamic with what it dispatches to, or call the module by name"
    end
  end

  defp dispatch?({_file, _fun, _line, what}), do: Enum.any?(@dispatch, &matches?(&1, what))

  ## Long files

  @doc "The named long files: file => {cap, reason}."
  def long_files, do: @long_files

  @doc "Files of lib/ ({file, lines}) over @max_lines not in @long_files, or over their cap."
  def length_problems(lines) do
    for {file, count} <- lines, lib?(file), count > @max_lines do
      case Map.fetch(@long_files, file) do
        {:ok, {cap, _reason}} when count <= cap ->
          nil

        {:ok, {cap, _reason}} ->
          "#{file}: #{count} lines, over its cap of #{cap} in @long_files; split it"

        :error ->
          "#{file}: #{count} lines, over #{@max_lines}; split it, or name it in @long_files " <>
            "with a cap and why it is kept whole"
      end
    end
    |> Enum.reject(&is_nil/1)
  end

  def line_count(text), do: text |> :binary.matches("\n") |> length()

  ## What the code calls

  @doc """
  The calls of one BEAM (a path or the binary), as call/0 tuples, its file
  relative to `root`.
  """
  def beam_calls(beam, root \\ File.cwd!()) do
    beam = if match?(<<"FOR1", _::binary>>, beam), do: beam, else: to_charlist(beam)

    {:ok, {module, [imports: imports, compile_info: info]}} =
      :beam_lib.chunks(beam, [:imports, :compile_info])

    file = info |> Keyword.fetch!(:source) |> to_string() |> Path.relative_to(root)

    calls =
      case :beam_lib.chunks(beam, [:debug_info]) do
        {:ok, {^module, [debug_info: {:debug_info_v1, backend, data}]}} when data != :none ->
          {:ok, %{definitions: definitions}} = backend.debug_info(:elixir_v1, module, data, [])

          calls =
            for {{name, arity}, _kind, _meta, clauses} <- definitions,
                {meta, args, guards, body} <- clauses,
                {line, what} <- walk([args, guards, body], meta[:line]),
                do: {file, "#{name}/#{arity}", line, what}

          Enum.sort_by(calls, &elem(&1, 2))

        _ ->
          fail("#{inspect(module)} (#{file}) has no Elixir debug info; compile with debug_info")
      end

    seen = MapSet.new(calls, &elem(&1, 3))
    calls ++ for(mfa <- imports, not MapSet.member?(seen, mfa), do: {file, nil, nil, mfa})
  end

  # Every remote call, remote capture and receive in expanded code, with its line.
  defp walk(ast, line) do
    {_, found} =
      Macro.prewalk(ast, {line, []}, fn
        {:&, meta, [{:/, _, [{{:., _, [m, f]}, _, []}, a]}]}, {line, acc}
        when is_atom(m) and is_atom(f) and is_integer(a) ->
          {:captured, {line, [{meta[:line] || line, {m, f, a}} | acc]}}

        {{:., _, [m, f]}, meta, args} = node, {line, acc}
        when is_atom(m) and is_atom(f) and is_list(args) ->
          {node, {line, [{meta[:line] || line, {m, f, length(args)}} | acc]}}

        {:receive, meta, [_]} = node, {line, acc} ->
          {node, {line, [{meta[:line] || line, :receive} | acc]}}

        {_, meta, _} = node, {line, acc} when is_list(meta) ->
          {node, {Keyword.get(meta, :line, line), acc}}

        node, acc ->
          {node, acc}
      end)

    found |> elem(1) |> Enum.reverse()
  end

  defp matches?(:receive, what), do: what == :receive
  defp matches?({m, f}, what), do: match?({^m, ^f, _}, what)
  defp matches?({m, f, a}, what), do: what == {m, f, a}
  defp matches?(m, what) when is_atom(m), do: match?({^m, _, _}, what)

  defp where({file, nil, nil, _}), do: "#{file} (its BEAM's imports)"
  defp where({file, fun, line, _}), do: "#{file}:#{line} (#{fun})"

  defp describe(:receive), do: "receives"
  defp describe({m, f, a}), do: "calls #{inspect(m)}.#{f}/#{a}"

  ## Dependencies

  # Every dependency between two files of the project, from `mix xref
  # graph`'s plain format in the test environment (which compiles bench/lib
  # and test/support beside lib/).
  defp xref_edges do
    {out, status} =
      System.cmd("mix", ["xref", "graph", "--format", "plain"], env: [{"MIX_ENV", "test"}])

    if status != 0, do: fail("mix xref graph exited #{status}:\n#{out}")
    edges = xref_edges(out)
    if edges == [], do: fail("mix xref graph listed no dependencies:\n#{out}")
    edges
  end

  @doc """
  The edges of `mix xref graph --format plain`'s output: a file at the start
  of a line, then one line per file it depends on, "|-- path" or "`-- path",
  with " (compile)" or " (export)" after it for those kinds.
  """
  def xref_edges(out) do
    {edges, _source} =
      out
      |> String.split("\n")
      |> Enum.reduce({[], nil}, fn line, {edges, source} ->
        case Regex.run(~r/^[|`]-- (\S+)(?: \((\w+)\))?$/, line) do
          [_, target | label] when source != nil ->
            {[{source, target, List.first(label, "runtime")} | edges], source}

          [_ | _] ->
            fail("a dependency line before any file in mix xref's output: #{line}")

          nil ->
            if Regex.match?(~r/^\S+\.exs?$/, line), do: {edges, line}, else: {edges, source}
        end
      end)

    Enum.reverse(edges)
  end

  @doc "The layer of a file of lib/, or nil."
  def layer(file) do
    Enum.find_value(@layer_of, fn {prefix, layer} ->
      if String.starts_with?(file, prefix), do: layer
    end)
  end

  defp lib?(file), do: is_binary(file) and String.starts_with?(file, "lib/")

  defp fail(message) do
    IO.puts(:stderr, "layers: " <> message)
    System.halt(1)
  end
end
