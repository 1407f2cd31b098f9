import Config

# One line per log entry: Elixir's console default starts each entry with a
# newline, which puts a blank line between entries.
config :logger, :console, format: "$time $metadata[$level] $message\n"
