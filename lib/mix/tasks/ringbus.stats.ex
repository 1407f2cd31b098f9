defmodule Mix.Tasks.Ringbus.Stats do
  @shortdoc "Prints the channel table of a running Ringbus"

  @moduledoc """
  Prints what a running Ringbus node is doing, as tables a person reads in a
  terminal: per channel its length, capacity, bytes held, pushed, pulled,
  overwritten and rejected counts, push and pull rates, subscriptions, the
  largest subscriber lag and the messages lost; per server its connections,
  frames and errors; the cluster's links.

      mix ringbus.stats
      mix ringbus.stats --url http://10.0.0.5:9171
      mix ringbus.stats --every 2 --count 30

  It reads `/status.txt` from the node's HTTP endpoint (`Ringbus.HTTP`). A
  release prints the same with `bin/ringbus rpc 'Ringbus.Release.stats()'`
  (see `Ringbus.Release.stats/1`), and `curl 127.0.0.1:9171/status.txt` too.
  When the endpoint cannot be read it says why in one line, with status 1.

  ## Command line options

    * `--url URL` - the node's HTTP endpoint. Default `http://127.0.0.1:9171`.
    * `--every N` - print the tables again every N seconds, each under a
      line with the time, like `redis-cli --stat`. Default: once.
    * `--count N` - with `--every`, stop after N prints. Default: until
      interrupted.
  """

  use Mix.Task

  @impl Mix.Task
  def run(args) do
    {opts, _rest} =
      OptionParser.parse!(args, strict: [url: :string, every: :integer, count: :integer])

    Mix.Task.run("compile")
    url = opts[:url] || "http://127.0.0.1:9171"

    for key <- [:every, :count],
        opts[key] != nil and opts[key] < 1,
        do: Mix.raise("expected --#{key} to be a positive integer, got: #{opts[key]}")

    write = fn text -> Mix.shell().info(String.trim_trailing(IO.iodata_to_binary(text))) end

    case Ringbus.Release.watch(url, opts[:every], opts[:count], write) do
      :ok -> :ok
      {:error, line} -> Mix.raise(line)
    end
  end
end
