defmodule Ringbus.Test.Debian do
  @moduledoc """
  The programs some tests run, from Debian packages that `bin/test` installs
  when they are missing; a test fails loudly without them rather than skip.
  """

  @doc "The path of `program`, from Debian's `package`."
  def executable!(program, package) do
    System.find_executable(program) ||
      raise "#{program} is missing: run bin/test, which installs Debian's #{package} package"
  end

  @doc "Runs `fun` with a fresh path under the temporary directory, removed after."
  def with_tmp(prefix, fun) do
    path = Path.join(System.tmp_dir!(), "#{prefix}-#{System.unique_integer([:positive])}")

    try do
      fun.(path)
    after
      File.rm_rf(path)
    end
  end
end
