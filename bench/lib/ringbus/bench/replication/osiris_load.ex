defmodule Ringbus.Bench.Replication.OsirisLoad do
  @moduledoc false
  # What the replication bench runs on the :peer nodes for Osiris
  # (RabbitMQ's replicated log, from Debian's rabbitmq-server package, see
  # bin/setup-ra): starting it with a data dir, a cluster of three members,
  # and a writer with a window of outstanding writes. A write is confirmed
  # by `{:osiris_written, reference, writer_id, corrs}` once a quorum of the
  # members has it (written, not fsynced).

  alias Ringbus.Bench.Replication.{Samples, Window}

  @doc "Starts the osiris application on this node, its logs under `dir`."
  @spec start(Path.t()) :: :ok
  def start(dir) do
    # Loading sets the env from osiris.app: the dir is set after, not before.
    :ok = Application.load(:osiris)
    :ok = Application.put_env(:osiris, :data_dir, String.to_charlist(dir))
    {:ok, _} = Application.ensure_all_started(:osiris)
    :ok
  end

  @doc """
  Starts stream `name` with its writer on this node and replicas on
  `replica_nodes`; returns its config (with `:leader_pid`).
  """
  @spec start_cluster(String.t(), [node()], pos_integer()) :: map()
  def start_cluster(name, replica_nodes, max_bytes) do
    config = %{
      name: String.to_charlist(name),
      reference: name,
      epoch: 1,
      leader_node: node(),
      replica_nodes: replica_nodes,
      retention: [{:max_bytes, max_bytes}],
      # Retention drops whole segments: a quarter of the bound each.
      max_segment_size_bytes: div(max_bytes, 4)
    }

    {:ok, started} = :osiris.start_cluster(config)
    started
  end

  @doc "Deletes the stream's members and their logs."
  @spec delete_cluster(map()) :: :ok
  def delete_cluster(config), do: :osiris.delete_cluster(config)

  @doc """
  Writes `size`-byte entries to the stream whose writer is `leader`, at
  most `window` unconfirmed, for `ms` or until `max` are written; latency
  is write to confirm. Confirms missing 5 s after the last write count as
  errors.
  """
  @spec write(pid(), pos_integer(), pos_integer(), pos_integer(), pos_integer()) ::
          Samples.summary()
  def write(leader, size, window, ms, max) do
    payload = :binary.copy("x", size)
    samples = Samples.new(max)
    start = Samples.now()
    run = %{leader: leader, payload: payload, samples: samples, window: window, max: max}
    pump(Map.put(run, :deadline, start + ms * 1_000), %{}, 0)
    Samples.summary(samples, (Samples.now() - start) / 1_000_000, size)
  end

  defp pump(run, pending, sent) do
    send = fn ids ->
      for id <- ids, do: :ok = :osiris.write(run.leader, :undefined, id, run.payload)
      :ok
    end

    case Window.fill(run, pending, sent, send) do
      {pending, _sent, false, _timeout} when map_size(pending) == 0 ->
        :ok

      {pending, sent, _open?, timeout} ->
        receive do
          {:osiris_written, _reference, _writer, corrs} ->
            pump(run, confirm(corrs, pending, run.samples), sent)
        after
          timeout -> for _ <- Map.keys(pending), do: Samples.error(run.samples)
        end
    end
  end

  defp confirm(corrs, pending, samples) do
    now = Samples.now()

    Enum.reduce(corrs, pending, fn id, pending ->
      {sent_at, pending} = Map.pop(pending, id)
      if sent_at, do: Samples.add(samples, now - sent_at)
      pending
    end)
  end
end
