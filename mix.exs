defmodule Ringbus.MixProject do
  use Mix.Project

  def project do
    [
      app: :ringbus,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      elixirc_paths: elixirc_paths(Mix.env()),
      test_paths: ["test", "bench/test"],
      # The benchmarks live in bench/ and compile only in the bench (and test)
      # environment, so that no application depending on :ringbus ships them.
      preferred_cli_env: ["ringbus.bench": :bench, "ringbus.chaos": :bench],
      deps: [],
      # `MIX_ENV=prod mix release`: configured at boot by config/runtime.exs
      # (see Ringbus.Release).
      releases: [ringbus: [include_executables_for: [:unix]]],
      # PropEr comes from Debian's erlang-proper and is used by the tests only.
      xref: [exclude: [:proper, :proper_types, :proper_gen]]
    ]
  end

  def application do
    [
      extra_applications: [:logger, :crypto, :ssl, :public_key, :inets],
      mod: {Ringbus.Application, []}
    ]
  end

  defp elixirc_paths(:test), do: ["lib", "bench/lib", "test/support", "bench/test/support"]
  defp elixirc_paths(:bench), do: ["lib", "bench/lib"]
  defp elixirc_paths(_), do: ["lib"]
end
