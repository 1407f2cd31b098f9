# The rules of docs/ARCHITECTURE.md ("Layers"), checked on the code.
# `elixir .ci/layers.exs` runs them on the test build (.ci/run does);
# test/ci/layers_test.exs runs each on planted input. Exits 1 with the list
# of what is broken.
#
#   1. Arrows. Every file of lib/ belongs to a layer (@layer_of), and every
#      dependency between two files of lib/, as `mix xref graph` lists them
#      (calls, structs, macros, aliases), stays in its layer or goes along an
#      arrow of @allowed; the arrows never make a cycle.
#   2. lib/ stands alone. No file of lib/ depends on a file of bench/ or
#      test/ (xref in MIX_ENV=test, which compiles bench/lib and
#      test/support, lists those edges too).
#   3. Long files. No file of lib/ is over @max_lines lines unless
#      @long_files names it, with a cap and the reason; it stays under its cap.
#
# Known exceptions are listed below with the work that removes them. An
# entry of @exceptions or @long_files that allows nothing any more is
# printed as a note to remove it, not a failure.

defmodule Layers do
  # Which layer each file of lib/ is in: the first prefix that matches.
  @layer_of [
    {"lib/mix/", :mix},
    {"lib/ringbus.ex", :api},
    {"lib/ringbus/application.ex", :application},
    {"lib/ringbus/store.ex", :store},
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
    {"lib/ringbus/socket.ex", :leaf},
    {"lib/ringbus/error.ex", :leaf},
    {"lib/ringbus/histogram.ex", :leaf}
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
    # Calls down into the channel layer and the store, never lib/ringbus.ex;
    # a replicated channel's writes from other nodes go to its replica layer.
    cluster: [:channel, :store, :replica, :leaf],
    # Replicated channels: a Ra machine applying into the channel layer's rings.
    replica: [:channel, :store, :leaf],
    # lib/ringbus.ex: creates, deletes and names the store lacks go to the cluster.
    api: [:channel, :store, :cluster, :replica, :leaf],
    # The client uses the wire only, never the server.
    client: [:wire, :leaf],
    # The server uses the wire and the channel API.
    server: [:wire, :api, :channel, :leaf],
    # Front end: on top of the server and the channel API.
    resp: [:server, :wire, :api, :channel, :leaf],
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

  @max_lines 600

  # Files of lib/ over @max_lines, each with the most lines it may have and
  # why it is not split.
  @long_files %{
    "lib/ringbus.ex" =>
      {1010,
       "the public API in one module, whose documentation (half its lines) is the user's " <>
         "guide; every operation is one line over on_channel/2"},
    "lib/ringbus/client.ex" =>
      {1000,
       "the client's public API in one module, whose documentation is half its lines; the " <>
         "work is in Client.Connection, Client.Session and Client.Handshake"},
    "lib/ringbus/channel/ring.ex" =>
      {1100,
       "one lock-free algorithm over one channel's atomics slots and ETS keys; push, pull, " <>
         "read and the replicated writes each rely on the others' cursor and chunk invariants"},
    "lib/ringbus/cluster/directory/core.ex" =>
      {720,
       "one state machine whose events (claims, syncs, relays, replicated members, forgets) " <>
         "all apply the same stamp and claim rules to the same state; the tests drive it " <>
         "event by event as one"},
    "lib/ringbus/wire/frame.ex" =>
      {1160,
       "each frame's encoder and decoder side by side on one set of opcodes and field " <>
         "guards, so a layout is written and read in one place"}
  }

  @typedoc "A dependency as `mix xref graph` lists it: from, to, kind."
  @type edge :: {Path.t(), Path.t(), String.t()}

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

  @doc "What the rules read, from the tree in the current directory."
  def collect do
    lines = for file <- Path.wildcard("lib/**/*.ex"), do: {file, line_count(File.read!(file))}
    %{edges: xref_edges(), lines: lines}
  end

  @doc "Every rule over `data` (see collect/0): {problems, notes}; no problem is a pass."
  def check(%{edges: edges, lines: lines}) do
    problems =
      table_problems(@allowed) ++
        layer_problems(Enum.map(lines, &elem(&1, 0))) ++
        edge_problems(edges) ++
        outside_problems(edges) ++
        length_problems(lines)

    {problems, stale_entries(edges, lines)}
  end

  # Entries of the tables that allow nothing any more: notes, not failures,
  # so that the change removing what they allow need not edit this file.
  defp stale_entries(edges, lines) do
    exceptions =
      for {from, to} <- @exceptions, not Enum.any?(edges, &match?({^from, ^to, _}, &1)) do
        "#{from} -> #{to} no longer exists; remove its exception"
      end

    long =
      for file <- Map.keys(@long_files),
          Enum.all?(lines, fn {f, count} -> f != file or count <= @max_lines end) do
        "#{file} is no longer over #{@max_lines} lines; remove it from @long_files"
      end

    exceptions ++ long
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

  ## Long files

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
