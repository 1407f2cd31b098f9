# PropEr comes from Debian's erlang-proper (see .ci/run); without it the
# property tests cannot run, so fail loudly instead of skipping them.
case Code.ensure_loaded(:proper) do
  {:module, :proper} -> :ok
  _ -> raise "PropEr is missing: install Debian's erlang-proper (apt-get install erlang-proper)"
end

# Connections log a line when they open and close: shown only for failing tests.
# `@tag :long` tests (minutes of kills) run only with `--include long`.
ExUnit.start(capture_log: true, exclude: [:long])

# The replicated channels of this run (config/config.exs puts them there).
ExUnit.after_suite(fn _ -> File.rm_rf(Application.fetch_env!(:ringbus, :data_dir)) end)
