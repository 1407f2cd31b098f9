defmodule Ringbus.SuiteTest do
  # The suite keeps its own rule: a test that needs a program fails, naming
  # the Debian package bin/test installs, rather than skip.
  use ExUnit.Case, async: true

  test "no test is tagged to skip, nor looks a program up without failing when it is missing" do
    files = Path.wildcard("test/**/*.exs") ++ Path.wildcard("bench/test/**/*.exs")
    files = files -- [__ENV__.file |> Path.relative_to_cwd()]
    assert files != []

    skip = ~r/@(module)?tag\(?\s*(:skip\b|skip:)/
    # A lookup whose miss is not an error at once (`|| flunk(...)` is).
    lookup = ~r/System\.find_executable\([^)]*\)(?!\s*\|\|)/

    for file <- files, text = File.read!(file), pattern <- [skip, lookup] do
      refute text =~ pattern,
             "#{file} matches #{inspect(pattern.source)}: use Ringbus.Test.Debian.executable!/2"
    end
  end
end
