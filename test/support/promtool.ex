defmodule Ringbus.Test.Promtool do
  @moduledoc """
  Runs Prometheus's own checker on metrics text: `promtool check metrics`,
  from Debian's `prometheus` package, which `bin/test` installs when missing.
  """

  @doc "`{output, exit_status}` of `promtool check metrics` on `text`."
  def check(text) do
    promtool =
      System.find_executable("promtool") ||
        raise "promtool is missing: run bin/test, which installs Debian's prometheus package"

    path =
      Path.join(System.tmp_dir!(), "ringbus-metrics-#{System.unique_integer([:positive])}.txt")

    File.write!(path, text)

    try do
      System.cmd("sh", ["-c", ~s("$0" check metrics < "$1" 2>&1), promtool, path])
    after
      File.rm(path)
    end
  end
end
