# Checks docs/ARCHITECTURE.md's layer rules on the code: see .ci/layers.ex,
# which holds the rules and their tables. Run from the project's root:
# `elixir .ci/layers.exs` (.ci/run does); it compiles the test build first.
Code.require_file("layers.ex", __DIR__)
Layers.main()
