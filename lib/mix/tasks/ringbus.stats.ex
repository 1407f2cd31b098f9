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

  It reads `/status.txt` from the node's HTTP endpoint (`Ringbus.HTTP`). A
  release prints the same with `bin/ringbus eval 'Ringbus.Release.stats()'`,
  and `curl 127.0.0.1:9171/status.txt` too.

  ## Command line options

    * `--url URL` - the node's HTTP endpoint. Default `http://127.0.0.1:9171`.
  """

  use Mix.Task

  @impl Mix.Task
  def run(args) do
    {opts, _rest} = OptionParser.parse!(args, strict: [url: :string])
    Mix.Task.run("compile")
    url = opts[:url] || "http://127.0.0.1:9171"

    case Ringbus.HTTP.get_status_text(url) do
      {:ok, text} -> Mix.shell().info(String.trim_trailing(text))
      {:error, reason} -> Mix.raise("cannot read #{url}/status.txt: #{inspect(reason)}")
    end
  end
end
