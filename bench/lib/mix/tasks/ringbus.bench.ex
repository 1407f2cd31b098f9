defmodule Mix.Tasks.Ringbus.Bench do
  @shortdoc "Runs a Ringbus benchmark: buffer, len, backlog, ingest, frames, resp, latency, openloop, cluster, replication, groups or footprint"

  @moduledoc """
  Runs one of Ringbus's benchmarks. Each one reproduces a field report and
  compares Ringbus with the naive way (and with peers where they apply) in the
  same run, prints the figures and can write them as CSV with `--out FILE`.

      mix ringbus.bench buffer [options]    # ETS ring vs :queue in a GenServer, 1 and 6 callers
      mix ringbus.bench len [options]       # O(1) len vs length/1 and :queue.len/1
      mix ringbus.bench backlog [options]   # selective receive under a backlog
      mix ringbus.bench ingest [options]    # TCP ingest, CPU per message, vs Redis XADD
      mix ringbus.bench frames [options]    # large frames over TCP and TLS
      mix ringbus.bench resp [options]      # redis-benchmark: Redis vs the RESP listener
      mix ringbus.bench latency [options]   # open-loop latency at fixed rates vs Redis
      mix ringbus.bench openloop [options]  # the same with a generator in C, down to µs tails
      mix ringbus.bench cluster [options]   # a silent node: naive sends vs links
      mix ringbus.bench replication [options] # replicas: 3 vs JetStream R3, Osiris, Redis AOF
      mix ringbus.bench groups [options]    # consumer groups vs Redis XREADGROUP, JetStream R3
      mix ringbus.bench footprint [options]   # a replicated channel's memory and disk vs its bounds
      mix ringbus.bench seek [options]        # a read from a time vs from a seq vs a scan, by ring size

  Run `mix help ringbus.bench` and see each bench module
  (`Ringbus.Bench.Buffer`, ...) for its options.

  ## Command line options

  The first argument names the bench; the rest are that bench's options.
  """

  use Mix.Task

  @benches %{
    "buffer" => Ringbus.Bench.Buffer,
    "len" => Ringbus.Bench.Len,
    "backlog" => Ringbus.Bench.Backlog,
    "ingest" => Ringbus.Bench.Ingest,
    "frames" => Ringbus.Bench.Frames,
    "resp" => Ringbus.Bench.Resp,
    "latency" => Ringbus.Bench.Latency,
    "openloop" => Ringbus.Bench.OpenLoop,
    "cluster" => Ringbus.Bench.Cluster,
    "replication" => Ringbus.Bench.Replication,
    "groups" => Ringbus.Bench.Groups,
    "footprint" => Ringbus.Bench.Footprint,
    "seek" => Ringbus.Bench.Seek
  }

  @impl Mix.Task
  def run([name | args]) do
    case Map.fetch(@benches, name) do
      {:ok, module} ->
        Mix.Task.run("app.start")
        module.run(args)

      :error ->
        Mix.raise("unknown bench #{inspect(name)}; expected one of: #{names()}")
    end
  end

  def run([]), do: Mix.raise("expected a bench name, one of: #{names()}")

  defp names, do: @benches |> Map.keys() |> Enum.sort() |> Enum.join(", ")
end
