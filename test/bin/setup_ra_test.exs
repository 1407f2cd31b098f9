defmodule Ringbus.SetupRaTest do
  # bin/setup-ra against stand-ins for apt-get and dpkg (first on the PATH),
  # in a copy of the project's layout: no network, no package lists.
  use ExUnit.Case, async: true

  @moduletag :tmp_dir
  @apps ~w(ra aten gen_batch_server seshat osiris)

  setup %{tmp_dir: dir} do
    File.mkdir_p!(Path.join(dir, "bin"))
    File.cp!("bin/setup-ra", Path.join(dir, "bin/setup-ra"))
    shims = Path.join(dir, "shims")
    File.mkdir_p!(shims)
    log = Path.join(dir, "calls.log")

    # apt-get download: an empty .deb in the current dir.
    shim!(shims, "apt-get", """
    echo "apt-get $*" >> "#{log}"
    touch rabbitmq-server_9.9_all.deb
    """)

    # dpkg -x DEB DIR: the package's plugins and copyright.
    shim!(shims, "dpkg", """
    echo "dpkg $*" >> "#{log}"
    plugins="$3/usr/lib/rabbitmq/lib/rabbitmq_server-9.9/plugins"
    for app in #{Enum.join(@apps, " ")} lobster; do
      mkdir -p "$plugins/$app-1.0/ebin"
      echo "{application, $app, []}." > "$plugins/$app-1.0/ebin/$app.app"
    done
    mkdir -p "$3/usr/share/doc/rabbitmq-server"
    echo "the package's copyright" > "$3/usr/share/doc/rabbitmq-server/copyright"
    """)

    %{env: [{"PATH", shims <> ":" <> System.get_env("PATH")}], log: log}
  end

  defp shim!(dir, name, body) do
    path = Path.join(dir, name)
    File.write!(path, "#!/usr/bin/env bash\nset -e\n" <> body)
    File.chmod!(path, 0o755)
  end

  defp setup_ra(dir, env),
    do: System.cmd(Path.join(dir, "bin/setup-ra"), [], env: env, stderr_to_stdout: true)

  defp vendored(dir), do: dir |> Path.join("_vendor/ra") |> File.ls!() |> Enum.sort()

  test "a fresh clone gets every app, the copyright and the package name",
       %{tmp_dir: dir} = ctx do
    assert {_, 0} = setup_ra(dir, ctx.env)

    assert vendored(dir) ==
             ~w(COPYRIGHT.debian SOURCE aten-1.0 gen_batch_server-1.0 osiris-1.0 ra-1.0 seshat-1.0)

    assert File.read!(Path.join(dir, "_vendor/ra/SOURCE")) == "rabbitmq-server_9.9_all.deb\n"
  end

  test "an older _vendor/ra without Osiris gets it added and keeps what it has",
       %{tmp_dir: dir} = ctx do
    for app <- @apps -- ["osiris"] do
      ebin = Path.join(dir, "_vendor/ra/#{app}-0.5/ebin")
      File.mkdir_p!(ebin)
      File.write!(Path.join(ebin, "#{app}.app"), "old")
    end

    assert {_, 0} = setup_ra(dir, ctx.env)
    assert "osiris-1.0" in vendored(dir)
    assert "ra-0.5" in vendored(dir)
    refute "ra-1.0" in vendored(dir)
    assert File.read!(Path.join(dir, "_vendor/ra/ra-0.5/ebin/ra.app")) == "old"
    # Its temp dir is gone.
    assert Path.wildcard(Path.join(dir, "_vendor/.setup-ra.*")) == []
  end

  test "with every app there it fetches nothing", %{tmp_dir: dir} = ctx do
    assert {_, 0} = setup_ra(dir, ctx.env)
    File.rm!(ctx.log)
    assert {_, 0} = setup_ra(dir, ctx.env)
    refute File.exists?(ctx.log)
  end
end
