import Config

# One line per log entry: Elixir's console default starts each entry with a
# newline, which puts a blank line between entries.
config :logger, :console, format: "$time $metadata[$level] $message\n"

# Tests keep replicated channels in a directory of their own run.
if config_env() == :test do
  config :ringbus, data_dir: Path.join(System.tmp_dir!(), "ringbus_test_#{System.pid()}")
end
