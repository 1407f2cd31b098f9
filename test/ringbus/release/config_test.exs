defmodule Ringbus.Release.ConfigTest do
  # The runtime configuration as a function of the environment: every
  # variable, and the one line a bad value stops the boot with.
  use ExUnit.Case, async: true

  alias Ringbus.Release.Config

  @moduletag :tmp_dir

  defp load!(env) do
    {:ok, boot} = Config.load(env)
    boot
  end

  defp error(env) do
    assert {:error, line} = Config.load(env)
    refute line =~ "\n"
    line
  end

  test "nothing set: the defaults, HTTP on 127.0.0.1:9171" do
    assert %{server: [], channels: [], join: [], log_level: :info} =
             boot = load!(%{"HOME" => "/x"})

    assert boot.http == [host: {127, 0, 0, 1}, port: 9171]
  end

  test "every server limit, address, TLS files and tokens become server options", %{tmp_dir: dir} do
    {cert, key} = Ringbus.Test.TLS.pem_files!(dir)

    env = %{
      "RINGBUS_HOST" => "0.0.0.0",
      "RINGBUS_PORT" => "7000",
      "RINGBUS_CERTFILE" => cert,
      "RINGBUS_KEYFILE" => key,
      "RINGBUS_TOKENS" => "t1, t2",
      "RINGBUS_AUTO_CREATE" => "500:reject",
      "RINGBUS_MAX_FRAME_SIZE" => "2048",
      "RINGBUS_MAX_CONNECTIONS" => "10",
      "RINGBUS_MAX_SUBSCRIPTIONS" => "3",
      "RINGBUS_MAX_CREDIT" => "100",
      "RINGBUS_MAX_OUT_BYTES" => "65536",
      "RINGBUS_HANDSHAKE_TIMEOUT" => "1000",
      "RINGBUS_IDLE_TIMEOUT" => "infinity",
      "RINGBUS_SEND_TIMEOUT" => "2000",
      "RINGBUS_SHUTDOWN_TIMEOUT" => "3000",
      "RINGBUS_ACCEPTORS" => "2",
      "RINGBUS_BUFFER_SIZE" => "8192",
      "RINGBUS_HTTP_HOST" => "127.0.0.2",
      "RINGBUS_HTTP_PORT" => "9200",
      "RINGBUS_LOG_LEVEL" => "warning"
    }

    boot = load!(env)

    assert boot.server == [
             acceptors: 2,
             auto_create: [capacity: 500, overflow: :reject],
             buffer_size: 8192,
             handshake_timeout: 1000,
             host: {0, 0, 0, 0},
             idle_timeout: :infinity,
             max_connections: 10,
             max_credit: 100,
             max_frame_size: 2048,
             max_out_bytes: 65536,
             max_subscriptions: 3,
             port: 7000,
             send_timeout: 2000,
             shutdown_timeout: 3000,
             tls: [certfile: cert, keyfile: key],
             tokens: %{"t1" => :all, "t2" => :all}
           ]

    assert %Ringbus.Server.Config{max_connections: 10} = Ringbus.Server.Config.new!(boot.server)
    assert boot.http == [host: {127, 0, 0, 2}, port: 9200]
    assert boot.log_level == :warning
    assert load!(%{"RINGBUS_AUTO_CREATE" => "off"}).server == [auto_create: false]
    assert load!(%{"RINGBUS_HTTP_PORT" => "off"}).http == nil
  end

  test "channels declared at boot" do
    boot = load!(%{"RINGBUS_CHANNELS" => "events:100000, jobs:10:reject\nlogs:5:drop_oldest"})

    assert boot.channels == [
             {"events", [capacity: 100_000, overflow: :drop_oldest]},
             {"jobs", [capacity: 10, overflow: :reject]},
             {"logs", [capacity: 5, overflow: :drop_oldest]}
           ]

    assert error(%{"RINGBUS_CHANNELS" => "a:10,a:20"}) ==
             ~s(ringbus: RINGBUS_CHANNELS declares "a" twice)

    assert error(%{"RINGBUS_CHANNELS" => "a:0"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": capacity must be a positive integer, got: 0)

    assert error(%{"RINGBUS_CHANNELS" => "a:10,b:10:sideways"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "b": overflow must be drop_oldest or reject, got: "sideways")

    assert error(%{"RINGBUS_CHANNELS" => "a:10:reject:lots"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": max_bytes must be a positive integer, got: "lots")

    assert error(%{"RINGBUS_AUTO_CREATE" => "-1"}) ==
             "ringbus: RINGBUS_AUTO_CREATE capacity must be a positive integer, got: -1"

    assert error(%{"RINGBUS_CHANNELS" => "nameonly"}) =~ "RINGBUS_CHANNELS expected NAME:CAPACITY"
  end

  test "a channel's max_bytes goes to the channel" do
    env = %{"RINGBUS_CHANNELS" => "big:10:drop_oldest:1048576"}

    assert load!(env).channels == [
             {"big", [capacity: 10, overflow: :drop_oldest, max_bytes: 1_048_576]}
           ]
  end

  test "a channel's @replicas=N makes it replicated" do
    env = %{"RINGBUS_CHANNELS" => "orders:100@replicas=3, jobs:10:reject:4096@replicas=1,a@b:5"}

    assert load!(env).channels == [
             {"orders", [capacity: 100, overflow: :drop_oldest, replicas: 3]},
             {"jobs", [capacity: 10, overflow: :reject, max_bytes: 4096, replicas: 1]},
             {"a@b", [capacity: 5, overflow: :drop_oldest]}
           ]

    assert error(%{"RINGBUS_CHANNELS" => "a:10@replicas=0"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": replicas must be a positive integer, got: 0)

    assert error(%{"RINGBUS_CHANNELS" => "a:10@replicas=x"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": replicas must be a positive integer, got: "x")

    assert error(%{"RINGBUS_CHANNELS" => "a:10@3"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": expected @replicas=N or @max_age=MS after the options, got: "@3")

    assert error(%{"RINGBUS_CHANNELS" => "a:0@replicas=1"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": capacity must be a positive integer, got: 0)

    assert error(%{"RINGBUS_CHANNELS" => "a@replicas=1"}) ==
             ~s(ringbus: RINGBUS_CHANNELS expected NAME:CAPACITY[:OVERFLOW[:MAX_BYTES]][@replicas=N][@max_age=MS], got: "a")
  end

  test "a channel's @max_age=MS goes to the channel, with or without @replicas=N" do
    env = %{
      "RINGBUS_CHANNELS" =>
        "clicks:100@max_age=60000,orders:10:reject@replicas=1@max_age=5000,a@b:5@max_age=1"
    }

    assert load!(env).channels == [
             {"clicks", [capacity: 100, overflow: :drop_oldest, max_age: 60_000]},
             {"orders", [capacity: 10, overflow: :reject, replicas: 1, max_age: 5000]},
             {"a@b", [capacity: 5, overflow: :drop_oldest, max_age: 1]}
           ]

    assert error(%{"RINGBUS_CHANNELS" => "a:10@max_age=0"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": max_age must be a positive integer, got: 0)

    assert error(%{"RINGBUS_CHANNELS" => "a:10@max_age=soon"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": max_age must be a positive integer, got: "soon")

    assert error(%{"RINGBUS_CHANNELS" => "a:10@max_age=5@max_age=6"}) ==
             ~s(ringbus: RINGBUS_CHANNELS "a": @max_age given twice)
  end

  test "RESP and cluster members go on as options" do
    assert load!(%{"RINGBUS_RESP_PORT" => "6379"}).server[:resp_port] == 6379

    assert load!(%{"RINGBUS_RESP_STREAM_MAX_BYTES" => "1048576"}).server[
             :resp_stream_max_bytes
           ] == 1_048_576

    assert load!(%{"RINGBUS_RESP_STREAM_REPLICAS" => "3"}).server[:resp_stream_replicas] == 3

    assert error(%{"RINGBUS_RESP_STREAM_REPLICAS" => "0"}) ==
             "ringbus: RINGBUS_RESP_STREAM_REPLICAS must be a positive integer, got: 0"

    join = %{"RINGBUS_JOIN" => "a@host1,b@host2"}

    assert load!(join).join == [:a@host1, :b@host2]

    assert error(%{"RINGBUS_JOIN" => "a@host1,nohost"}) =~
             ~s{RINGBUS_JOIN must be comma-separated node names (name@host), got: "nohost"}
  end

  test "a bad value stops with one line that names the variable" do
    for {env, line} <- [
          {%{"RINGBUS_PORT" => "abc"},
           ~s(ringbus: RINGBUS_PORT must be an integer in 0..65535, got: "abc")},
          {%{"RINGBUS_PORT" => "70000"},
           "ringbus: RINGBUS_PORT must be an integer in 0..65535, got: 70000"},
          {%{"RINGBUS_HOST" => "localhost"},
           ~s(ringbus: RINGBUS_HOST must be an IP address, got: "localhost")},
          {%{"RINGBUS_MAX_CREDIT" => "0"},
           "ringbus: RINGBUS_MAX_CREDIT must be a positive integer, got: 0"},
          {%{"RINGBUS_IDLE_TIMEOUT" => "soon"},
           ~s(ringbus: RINGBUS_IDLE_TIMEOUT must be a positive integer or infinity, got: "soon")},
          {%{"RINGBUS_HTTP_PORT" => "on"},
           ~s(ringbus: RINGBUS_HTTP_PORT must be an integer in 0..65535 or off, got: "on")},
          {%{"RINGBUS_LOG_LEVEL" => "loud"},
           ~s(ringbus: RINGBUS_LOG_LEVEL must be one of debug, info, notice, warning, error, critical, alert, emergency, got: "loud")},
          {%{"RINGBUS_PROT" => "7000"},
           "ringbus: RINGBUS_PROT is not a Ringbus variable (see Ringbus.Release)"},
          {%{"RINGBUS_CERTFILE" => "/nonexistent.pem"},
           ~s(ringbus: RINGBUS_CERTFILE must name a readable file: "/nonexistent.pem": no such file or directory)}
        ] do
      assert error(env) == line
    end
  end

  test "a value the server's own checks refuse is reported under its variable" do
    assert error(%{"RINGBUS_MAX_FRAME_SIZE" => "100"}) ==
             "ringbus: RINGBUS_MAX_FRAME_SIZE expected :max_frame_size to be at least 1024, got: 100"
  end

  test "TLS files are read at load: each must hold a PEM certificate or key", %{tmp_dir: dir} do
    {cert, key} = Ringbus.Test.TLS.pem_files!(dir)
    garbage = Path.join(dir, "garbage.pem")
    File.write!(garbage, :crypto.strong_rand_bytes(512))
    broken = Path.join(dir, "broken.pem")
    File.write!(broken, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")

    assert error(%{"RINGBUS_CERTFILE" => garbage, "RINGBUS_KEYFILE" => key}) ==
             "ringbus: RINGBUS_CERTFILE holds no PEM certificate: #{inspect(garbage)}"

    assert error(%{"RINGBUS_CERTFILE" => broken, "RINGBUS_KEYFILE" => key}) ==
             "ringbus: RINGBUS_CERTFILE holds a certificate that cannot be decoded: #{inspect(broken)}"

    assert error(%{"RINGBUS_CERTFILE" => cert, "RINGBUS_KEYFILE" => cert}) ==
             "ringbus: RINGBUS_KEYFILE holds no PEM private key: #{inspect(cert)}"

    assert load!(%{"RINGBUS_CERTFILE" => cert, "RINGBUS_KEYFILE" => key}).server[:tls] ==
             [certfile: cert, keyfile: key]
  end

  @tag :tmp_dir
  test "RINGBUS_DATA_DIR: where replicated channels live, made if missing", %{tmp_dir: tmp} do
    dir = Path.join(tmp, "data")
    assert %{data_dir: ^dir} = load!(%{"RINGBUS_DATA_DIR" => dir})
    assert File.dir?(dir)
    assert %{data_dir: nil} = load!(%{})

    file = Path.join(tmp, "a-file")
    File.write!(file, "")

    assert error(%{"RINGBUS_DATA_DIR" => Path.join(file, "sub")}) =~
             ~r/^ringbus: RINGBUS_DATA_DIR cannot be made a directory: /
  end

  test "RINGBUS_WAL_MAX_BYTES: where the Raft WAL rolls over, a positive integer" do
    assert %{wal_max_bytes: 5_000_000} = load!(%{"RINGBUS_WAL_MAX_BYTES" => "5000000"})
    assert %{wal_max_bytes: nil} = load!(%{})
    assert error(%{"RINGBUS_WAL_MAX_BYTES" => "0"}) =~ ~r/^ringbus: RINGBUS_WAL_MAX_BYTES /
  end

  test "the node's name, cookie and net_ticktime: the variables mix ringbus.server reads too" do
    boot =
      load!(%{
        "RINGBUS_NAME" => "a@10.0.0.1",
        "RINGBUS_COOKIE" => "s3cret",
        "RINGBUS_NET_TICKTIME" => "15"
      })

    assert %{name: :"a@10.0.0.1", cookie: :s3cret, net_ticktime: 15} = boot
    assert %{name: nil, cookie: nil, net_ticktime: nil} = load!(%{})

    assert error(%{"RINGBUS_NAME" => "a"}) ==
             ~s(ringbus: RINGBUS_NAME must be a node name, NAME@HOST, got: "a")

    # The cookie is a secret: not shown.
    assert error(%{"RINGBUS_COOKIE" => "has space"}) ==
             "ringbus: RINGBUS_COOKIE must be printable ASCII without spaces"

    assert error(%{"RINGBUS_NET_TICKTIME" => "0"}) ==
             "ringbus: RINGBUS_NET_TICKTIME must be a positive integer, got: 0"
  end

  test "a port that cannot be bound is one line naming its variable" do
    {:ok, taken} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(taken)

    boot = load!(%{"RINGBUS_PORT" => "0", "RINGBUS_HTTP_PORT" => "#{port}"})

    assert Ringbus.Release.listen_check(boot) ==
             {:error,
              "ringbus: RINGBUS_HTTP_PORT cannot listen on 127.0.0.1:#{port}: " <>
                "address already in use (:eaddrinuse)"}

    boot =
      load!(%{
        "RINGBUS_RESP_PORT" => "#{port}",
        "RINGBUS_PORT" => "0",
        "RINGBUS_HTTP_PORT" => "off"
      })

    assert {:error, "ringbus: RINGBUS_RESP_PORT cannot listen on " <> _} =
             Ringbus.Release.listen_check(boot)

    boot =
      load!(%{
        "RINGBUS_HOST" => "10.255.255.1",
        "RINGBUS_PORT" => "0",
        "RINGBUS_HTTP_PORT" => "off"
      })

    boot = %{boot | server: Keyword.put(boot.server, :port, 1)}

    assert {:error, "ringbus: RINGBUS_HOST cannot listen on 10.255.255.1:1: " <> _} =
             Ringbus.Release.listen_check(boot)

    assert Ringbus.Release.listen_check(
             load!(%{"RINGBUS_PORT" => "0", "RINGBUS_HTTP_PORT" => "0"})
           ) == :ok
  end

  test "TLS needs both files", %{tmp_dir: dir} do
    cert = Path.join(dir, "cert.pem")
    File.write!(cert, "")

    assert error(%{"RINGBUS_CERTFILE" => cert}) ==
             "ringbus: RINGBUS_CERTFILE needs RINGBUS_KEYFILE too"
  end

  test "a tokens file grants channel prefixes; its errors never show a token", %{tmp_dir: dir} do
    path = Path.join(dir, "tokens")

    File.write!(path, """
    # operators
    admin-token
    reader read=events.,logs.   # dashboards
    writer write=events. read=*
    owner read=app. write=app. manage=app.
    """)

    boot = load!(%{"RINGBUS_TOKENS_FILE" => path, "RINGBUS_TOKENS" => "extra"})

    assert boot.server[:tokens] == %{
             "admin-token" => :all,
             "reader" => [read: ["events.", "logs."], write: [], manage: []],
             "writer" => [read: :all, write: ["events."], manage: []],
             "owner" => [read: ["app."], write: ["app."], manage: ["app."]],
             "extra" => :all
           }

    assert %Ringbus.Server.Config{} = Ringbus.Server.Config.new!(boot.server)

    File.write!(path, "s3cr3t-token admin=everything\n")
    line = error(%{"RINGBUS_TOKENS_FILE" => path})
    assert line =~ "ringbus: RINGBUS_TOKENS_FILE #{path} line 1: expected TOKEN"
    refute line =~ "s3cr3t"
  end

  test "RINGBUS_CONFIG names a file of the same variables; the environment wins", %{tmp_dir: dir} do
    path = Path.join(dir, "ringbus.conf")

    File.write!(path, """
    # Ringbus
    RINGBUS_PORT=7100
    RINGBUS_CHANNELS="events:100"

    RINGBUS_MAX_CONNECTIONS = '50'
    """)

    boot = load!(%{"RINGBUS_CONFIG" => path, "RINGBUS_PORT" => "7200"})
    assert boot.server[:port] == 7200
    assert boot.server[:max_connections] == 50
    assert boot.channels == [{"events", [capacity: 100, overflow: :drop_oldest]}]

    File.write!(path, "RINGBUS_PORT=7100\nRINGBUS_MAX_CREDIT=none\n")

    assert error(%{"RINGBUS_CONFIG" => path}) ==
             ~s{ringbus: RINGBUS_MAX_CREDIT (#{path} line 2) must be a positive integer, got: "none"}

    File.write!(path, "RINGBUS_TOKENS s3cr3t\n")

    assert error(%{"RINGBUS_CONFIG" => path}) ==
             "ringbus: RINGBUS_CONFIG #{path} line 1: expected NAME=value"

    File.write!(path, "\nRINGBUS_PROT=7100\n")

    assert error(%{"RINGBUS_CONFIG" => path}) ==
             ~s(ringbus: RINGBUS_CONFIG #{path} line 2: "RINGBUS_PROT" is not a variable the file may set)

    assert error(%{"RINGBUS_CONFIG" => Path.join(dir, "missing")}) =~
             "ringbus: RINGBUS_CONFIG cannot read #{dir}/missing: no such file or directory"
  end

  test "Ringbus.Release documents every variable" do
    {:docs_v1, _, _, _, %{"en" => doc}, _, _} = Code.fetch_docs(Ringbus.Release)
    for {name, _, _, _} <- Config.variables(), do: assert(doc =~ "`#{name}`")
  end
end
