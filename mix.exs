defmodule Ringbus.MixProject do
  use Mix.Project

  def project do
    [
      app: :ringbus,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      elixirc_paths: elixirc_paths(Mix.env()),
      deps: [],
      # PropEr comes from Debian's erlang-proper and is used by the tests only.
      xref: [exclude: [:proper, :proper_types, :proper_gen]]
    ]
  end

  def application do
    [
      extra_applications: [:logger, :crypto, :ssl, :public_key, :runtime_tools],
      mod: {Ringbus.Application, []}
    ]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]
end
