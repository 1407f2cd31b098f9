# The bench tests run with the rest of the suite (`bin/test`); ExUnit and
# PropEr are set up by test/test_helper.exs.
