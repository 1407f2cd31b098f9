# The rules of docs/ARCHITECTURE.md ("Layers"), checked on the code:
#
#   1. every file of lib/ belongs to a layer, and every dependency between
#      two files of lib/ (as `mix xref graph` lists them: calls, structs,
#      macros) goes along an arrow of @allowed below, or stays in its layer;
#   2. the arrows themselves never make a cycle, so layers call one way;
#   3. no file of lib/ is over @max_lines lines unless @long_files names it,
#      with the most lines it may have and why it is kept whole.
#
# Known exceptions are listed below with the work that removes them. Run
# from the project's root, after compiling: `elixir .ci/layers.exs` (.ci/run
# does). Exits 1 with the list of what is broken.

defmodule Layers do
  # Which layer each file of lib/ is in: the first prefix that matches.
  @layer_of [
    {"lib/mix/", :mix},
    {"lib/ringbus.ex", :api},
    {"lib/ringbus/application.ex", :application},
    {"lib/ringbus/store.ex", :store},
    {"lib/ringbus/channel", :channel},
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

  def main do
    problems = cycles_in_table() ++ edge_problems(edges()) ++ length_problems()

    if problems == [] do
      IO.puts("layers: every dependency of lib/ follows docs/ARCHITECTURE.md's arrows")
    else
      IO.puts(:stderr, "Layer rules broken (docs/ARCHITECTURE.md; the table is .ci/layers.exs):")
      Enum.each(problems, &IO.puts(:stderr, "  " <> &1))
      System.halt(1)
    end
  end

  # Every dependency between two files of lib/, from `mix xref graph`'s
  # plain format: a file at the start of a line, then one line per file it
  # depends on, "|-- path" or "`-- path", with " (compile)" or " (export)"
  # after it for those kinds.
  defp edges do
    {out, status} = System.cmd("mix", ["xref", "graph", "--format", "plain"])
    if status != 0, do: fail("mix xref graph exited #{status}:\n#{out}")

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

    if edges == [], do: fail("mix xref graph listed no dependencies:\n#{out}")
    for {from, to, _} = edge <- Enum.reverse(edges), lib?(from), lib?(to), do: edge
  end

  defp edge_problems(edges) do
    present = MapSet.new(edges, fn {from, to, _} -> {from, to} end)

    for {from, to} <- @exceptions, not MapSet.member?(present, {from, to}) do
      IO.puts("layers: note: #{from} -> #{to} no longer exists; remove its exception")
    end

    for {from, to, label} <- edges,
        {:ok, a} = layer(from),
        {:ok, b} = layer(to),
        a != b,
        b not in Map.fetch!(@allowed, a),
        {from, to} not in @exceptions do
      "#{from} (#{a}) -> #{to} (#{b}), #{label}: #{a} may depend on " <>
        Enum.join([a | Map.fetch!(@allowed, a)], ", ")
    end
  end

  # The arrows make a cycle when some layer reaches itself.
  defp cycles_in_table do
    for layer <- Map.keys(@allowed), layer in reach(Map.fetch!(@allowed, layer), MapSet.new()) do
      "the table of allowed arrows lets #{layer} reach itself"
    end
  end

  defp reach([], seen), do: seen

  defp reach([layer | rest], seen) do
    if MapSet.member?(seen, layer),
      do: reach(rest, seen),
      else: reach(Map.fetch!(@allowed, layer) ++ rest, MapSet.put(seen, layer))
  end

  defp length_problems do
    for file <- Path.wildcard("lib/**/*.ex"), {:ok, _} = layer(file), problem <- long(file) do
      problem
    end
  end

  defp long(file) do
    lines = file |> File.read!() |> :binary.matches("\n") |> length()

    case Map.fetch(@long_files, file) do
      _ when lines <= @max_lines ->
        []

      {:ok, {cap, _reason}} when lines <= cap ->
        []

      {:ok, {cap, _reason}} ->
        ["#{file}: #{lines} lines, over its cap of #{cap} in @long_files; split it"]

      :error ->
        [
          "#{file}: #{lines} lines, over #{@max_lines}; split it, or name it in @long_files " <>
            "with a cap and why it is kept whole"
        ]
    end
  end

  defp layer(file) do
    case Enum.find(@layer_of, fn {prefix, _} -> String.starts_with?(file, prefix) end) do
      {_, layer} -> {:ok, layer}
      nil -> fail("#{file} is in no layer: add it to @layer_of in .ci/layers.exs")
    end
  end

  defp lib?(file), do: String.starts_with?(file, "lib/")

  defp fail(message) do
    IO.puts(:stderr, "layers: " <> message)
    System.halt(1)
  end
end

Layers.main()
