defmodule Ringbus.MixProject do
  use Mix.Project

  def project do
    vendor_ra!()

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
      # PropEr comes from Debian's erlang-proper and is used by the tests only;
      # Osiris (bin/setup-ra) by the replication bench only.
      xref: [exclude: [:proper, :proper_types, :proper_gen, :osiris]]
    ]
  end

  def application do
    [
      # :ra is RabbitMQ's Raft, for replicated channels (see vendor_ra!/0).
      extra_applications: [:logger, :crypto, :ssl, :public_key, :inets, :ra],
      mod: {Ringbus.Application, []},
      # The protocols a `Ringbus.Server` may serve besides the binary one,
      # unless its `:protocols` option names others: RESP, on `:resp_port`.
      env: [protocols: [Ringbus.Resp.Protocol]]
    ]
  end

  # Ra and the apps it needs (aten, gen_batch_server, seshat) come from
  # Debian's rabbitmq-server package, fetched by bin/setup-ra into _vendor/ra/
  # the first time any mix command runs (with Osiris, for the replication
  # bench only, which runs bin/setup-ra itself when an older copy lacks it). Their ebin directories go on the code
  # path, so every environment compiles and runs against them and `mix release`
  # copies them into the release as it copies OTP's own applications.
  defp vendor_ra! do
    dir = Path.expand("_vendor/ra", __DIR__)

    if Path.wildcard(Path.join(dir, "ra-*/ebin/ra.app")) == [] do
      setup = Path.expand("bin/setup-ra", __DIR__)
      {_, status} = System.cmd(setup, [], into: IO.stream(:stdio, :line))
      if status != 0, do: Mix.raise("#{setup} failed (exit #{status}): Ra is missing, see above")
    end

    for ebin <- Path.wildcard(Path.join(dir, "*/ebin")), do: Code.prepend_path(ebin)
    :ok
  end

  defp elixirc_paths(:test), do: ["lib", "bench/lib", "test/support", "bench/test/support"]
  # The benches start peer nodes, redis-server and OS processes as the tests
  # do, with the tests' helpers.
  defp elixirc_paths(:bench) do
    ["lib", "bench/lib"] ++
      Enum.map(~w(nodes os_process redis_server resp_client), &"test/support/#{&1}.ex")
  end

  defp elixirc_paths(_), do: ["lib"]
end
