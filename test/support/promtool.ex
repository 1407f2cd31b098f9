defmodule Ringbus.Test.Promtool do
  @moduledoc """
  Runs Prometheus's own checker on metrics text: `promtool check metrics`,
  from Debian's `prometheus` package, which `bin/test` installs when missing.
  """

  @doc "`{output, exit_status}` of `promtool check metrics` on `text`."
  def check(text) do
    promtool = Ringbus.Test.Debian.executable!("promtool", "prometheus")

    Ringbus.Test.Debian.with_tmp("ringbus-metrics", fn path ->
      File.write!(path, text)
      System.cmd("sh", ["-c", ~s("$0" check metrics < "$1" 2>&1), promtool, path])
    end)
  end
end
