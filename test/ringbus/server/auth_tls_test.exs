defmodule Ringbus.Server.AuthTLSTest do
  use ExUnit.Case, async: false

  # TLS alerts from refused handshakes are expected here.
  @moduletag :capture_log

  alias Ringbus.Test.{RawClient, TLS}

  describe "tokens" do
    setup do
      tokens = %{
        "root" => :all,
        "app" => [read: ["app."], write: ["app."], manage: ["app."]],
        "reader" => [read: :all]
      }

      server = start_supervised!({Ringbus.Server, port: 0, tokens: tokens})
      on_exit(fn -> for name <- ["app.x", "other.x", "other.new"], do: Ringbus.delete(name) end)
      {:ok, port: Ringbus.Server.port(server)}
    end

    test "HELLO without a valid token is refused and closed", %{port: port} do
      for token <- [nil, "wrong", "roo", "rootx", "root" <> <<0>>] do
        client = RawClient.connect!(port)
        RawClient.send_frames(client, [{:hello, 5, 3, 0, token}])
        assert [{:error, 5, :auth_failed, _}] = RawClient.recv_until_closed(client)
      end
    end

    # Every request on a channel inside and outside the "app." prefix, for a
    # token with all rights, one with every right on "app." only, and one
    # that may only read. Each runs on a fresh, empty channel.
    @requests [
      create: :manage,
      delete: :manage,
      push: :write,
      push_batch: :write,
      pull: :write,
      read: :read,
      len: :read,
      info: :read,
      subscribe: :read
    ]

    test "the rights table: which token may do what on which channel", %{port: port} do
      for token <- ["root", "app", "reader"],
          name <- ["app.x", "other.x"],
          {op, access} <- @requests do
        Ringbus.delete(name)
        :ok = Ringbus.create(name, capacity: 10)
        {c, _} = RawClient.hello!(port, token: token)
        reply = request(c, op, name)
        RawClient.close(c)

        expected = if allowed?(token, access, name), do: allowed_reply(op), else: :forbidden
        assert outcome(reply) == expected, "#{token} #{op} #{name}: #{inspect(reply)}"
      end
    end

    test "a push the token may not make creates no channel", %{port: port} do
      {c, _} = RawClient.hello!(port, token: "reader")
      RawClient.send_frames(c, [{:push, 1, :ack, "other.new", "x"}])
      assert {[{:push_acks, 1, [{1, {:error, :forbidden}}]}], _} = RawClient.recv(c, 1)
      assert Ringbus.info("other.new") == {:error, :no_channel}

      {c, _} = RawClient.hello!(port, token: "app")
      RawClient.send_frames(c, [{:push, 1, :ack, "other.new", "x"}])
      assert {[{:push_acks, 1, [{1, {:error, :forbidden}}]}], _} = RawClient.recv(c, 1)
      assert Ringbus.info("other.new") == {:error, :no_channel}
    end

    defp allowed?("root", _access, _name), do: true
    defp allowed?("app", _access, name), do: String.starts_with?(name, "app.")
    defp allowed?("reader", access, _name), do: access == :read

    defp request(c, :create, name), do: call(c, {:create, 1, name, 10, :reject, nil, nil})
    defp request(c, :delete, name), do: call(c, {:delete, 1, name})
    defp request(c, :push, name), do: call(c, {:push, 1, :ack, name, "x"})
    defp request(c, :push_batch, name), do: call(c, {:push_batch, 1, :ack, name, 1, ["x"]})
    defp request(c, :pull, name), do: call(c, {:pull, 1, name})
    defp request(c, :read, name), do: call(c, {:read, 1, name, 0, 10})
    defp request(c, :len, name), do: call(c, {:len, 1, name})
    defp request(c, :info, name), do: call(c, {:info, 1, name})
    defp request(c, :subscribe, name), do: call(c, {:subscribe, 1, name, :latest, 1, 1})

    defp call(c, frame), do: c |> RawClient.call(frame) |> elem(0)

    defp outcome({:error, 1, :forbidden, _}), do: :forbidden
    defp outcome({:push_acks, 1, [{1, {:error, :forbidden}}]}), do: :forbidden
    defp outcome({:push_acks, 1, [{1, {:ok, 0}}]}), do: :pushed
    defp outcome(reply), do: elem(reply, 0)

    defp allowed_reply(:create), do: :error
    defp allowed_reply(:delete), do: :ok
    defp allowed_reply(op) when op in [:push, :push_batch], do: :pushed
    defp allowed_reply(:pull), do: :empty
    defp allowed_reply(:read), do: :read_ok
    defp allowed_reply(:len), do: :len_ok
    defp allowed_reply(:info), do: :info_ok
    defp allowed_reply(:subscribe), do: :subscribed
  end

  test "TLS: handshake, HELLO, push and ack" do
    {server_tls, client_tls} = TLS.configs()
    server = start_supervised!({Ringbus.Server, port: 0, tls: server_tls})
    {c, _} = RawClient.hello!(Ringbus.Server.port(server), tls: client_tls)
    RawClient.send_frames(c, [{:push, 1, :ack, "tls", "secret"}])
    assert {[{:push_acks, 1, [{1, {:ok, 0}}]}], c} = RawClient.recv(c, 1)
    assert {{:pull_ok, 2, 0, "secret"}, _} = RawClient.call(c, {:pull, 2, "tls"})
    Ringbus.delete("tls")
  end

  test "TLS: a plain TCP client is not served" do
    {server_tls, _} = TLS.configs()
    server = start_supervised!({Ringbus.Server, port: 0, tls: server_tls})
    client = RawClient.connect!(Ringbus.Server.port(server))
    RawClient.send_frames(client, [{:hello, 0, 3, 0, nil}])
    refute Enum.any?(RawClient.recv_until_closed(client), &match?({:hello_ok, _, _, _}, &1))
  end

  describe "limits" do
    test "connections over max_connections get server_busy" do
      server = start_supervised!({Ringbus.Server, port: 0, max_connections: 1, acceptors: 1})
      port = Ringbus.Server.port(server)
      {first, _} = RawClient.hello!(port)
      second = RawClient.connect!(port)
      assert [{:error, 0, :server_busy, _}] = RawClient.recv_until_closed(second)
      assert {{:pong, 1}, _} = RawClient.call(first, {:ping, 1})
      assert %{connections: 1, refused: 1} = Ringbus.Server.stats(server)
    end

    test "subscriptions over max_subscriptions are refused" do
      server = start_supervised!({Ringbus.Server, port: 0, max_subscriptions: 1})
      {c, _} = RawClient.hello!(Ringbus.Server.port(server))
      {{:ok, 1}, c} = RawClient.call(c, {:create, 1, "subs", 10, :drop_oldest, nil, nil})
      {{:subscribed, 2, _, _}, c} = RawClient.call(c, {:subscribe, 2, "subs", :latest, 10, 10})

      assert {{:error, 3, :too_many_subscriptions, _}, _} =
               RawClient.call(c, {:subscribe, 3, "subs", :latest, 10, 10})

      Ringbus.delete("subs")
    end

    test "a payload over max_payload_size fails its own frame only" do
      server = start_supervised!({Ringbus.Server, port: 0, max_frame_size: 1024})
      {c, %{max_payload_size: max}} = RawClient.hello!(Ringbus.Server.port(server))
      big = :binary.copy("x", max + 1)

      RawClient.send_frames(c, [
        {:push, 1, :ack, "limits", "a"},
        {:push_batch, 2, :ack, "limits", 2, ["b", big]},
        {:push, 3, :ack, "limits", big},
        {:push, 4, :ack, "limits", "c"}
      ])

      assert {[{:push_acks, 4, acks}], c} = RawClient.recv(c, 1)

      assert acks == [
               {1, {:ok, 0}},
               {2, {:error, :too_large}},
               {3, {:error, :too_large}},
               {4, {:ok, 1}}
             ]

      assert {{:read_ok, 5, _, 0, 2, [{0, "a"}, {1, "c"}]}, _} =
               RawClient.call(c, {:read, 5, "limits", 0, 10})

      Ringbus.delete("limits")
    end

    test "idle_timeout :infinity is announced in HELLO_OK" do
      server = start_supervised!({Ringbus.Server, port: 0, idle_timeout: :infinity})
      {c, limits} = RawClient.hello!(Ringbus.Server.port(server))
      assert limits.idle_timeout == :infinity
      assert {{:pong, 1}, _} = RawClient.call(c, {:ping, 1})
    end

    test "bad server options raise ArgumentError" do
      assert_raise ArgumentError, ~r/expected :port/, fn ->
        Ringbus.Server.start_link(port: -1)
      end

      assert_raise ArgumentError, ~r/unknown keys/, fn -> Ringbus.Server.start_link(prot: 1) end

      assert_raise ArgumentError, ~r/expected :tls/, fn ->
        Ringbus.Server.start_link(tls: [verify: :verify_none])
      end

      assert_raise ArgumentError, ~r/expected :host/, fn ->
        Ringbus.Server.start_link(host: "nowhere")
      end
    end
  end
end
