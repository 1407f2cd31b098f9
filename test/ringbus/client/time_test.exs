defmodule Ringbus.Client.TimeTest do
  # Protocol version 6 end to end: Ringbus.Client against a real server,
  # on a memory and a replicated channel: CREATE with max_age, INFO_OK's
  # times, READ and SUBSCRIBE from a time and with each message's time.
  use ExUnit.Case, async: false

  alias Ringbus.Client

  setup do
    server = start_supervised!({Ringbus.Server, port: 0})
    client = Client.connect!(port: Ringbus.Server.port(server))
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    {:ok, client: client}
  end

  for {kind, opts} <- [memory: [], replicated: [replicas: 1]] do
    test "create with max_age, info's times, read and subscribe at a time (#{kind})", %{
      client: client
    } do
      name = "client-time-#{unquote(kind)}"
      opts = [capacity: 100, max_age: 3_600_000] ++ unquote(opts)
      assert :ok = Client.create(client, name, opts)
      {:ok, 0} = Client.push_many(client, name, ~w(a b c))

      # The times the server's channel gave them, through the Elixir API.
      {:ok, timed, 0} = Ringbus.read(name, 0, 3, times: true)
      [{0, "a", t0}, {1, "b", _}, {2, "c", t2}] = timed

      assert {:ok, info} = Client.info(client, name)
      assert %{max_age: 3_600_000, expired: 0, oldest_time: ^t0, newest_time: ^t2} = info

      assert {:ok, ^timed, 0, inc} = Client.read(client, name, 0, 10, times: true)
      assert {:ok, ^timed, 0, ^inc} = Client.read(client, name, {:time, t0}, 10, times: true)
      assert {:ok, [{0, "a"} | _], 0} = Client.read(client, name, {:time, 0}, 10)
      # After the newest: nothing, nothing lost.
      assert {:ok, [], 0} = Client.read(client, name, {:time, t2 + 1}, 10)

      assert {:ok, [_ | _], 0, ^inc} =
               Client.read(client, name, {:time, t0}, 1, times: true, incarnation: inc)

      assert {:error, :new_incarnation} =
               Client.read(client, name, {:time, t0}, 1, times: true, incarnation: inc + 1)

      {:ok, sub} = Client.subscribe(client, name, from: {:time, t0}, times: true)
      assert_receive {:ringbus, ^sub, ^timed, 0}, 5_000
      {:ok, 3} = Client.push(client, name, "d")
      assert_receive {:ringbus, ^sub, [{3, "d", t3}], 0}, 5_000
      assert t3 >= t2

      # From d's time: d, and any message stored in the same ms before it.
      {:ok, all, 0} = Ringbus.read(name, 0, 4, times: true)
      expected = for {seq, payload, ms} <- all, ms >= t3, do: {seq, payload}
      {:ok, plain} = Client.subscribe(client, name, from: {:time, t3})
      assert_receive {:ringbus, ^plain, ^expected, 0}, 5_000
      assert List.last(expected) == {3, "d"}
    end
  end

  for {kind, opts} <- [memory: [], replicated: [replicas: 1]] do
    test "a group created at a time, fetched with times (#{kind})", %{client: client} do
      name = "client-time-group-#{unquote(kind)}"
      :ok = Client.create(client, name, [capacity: 100] ++ unquote(opts))
      {:ok, 0} = Client.push_many(client, name, ~w(a b))
      {:ok, 2} = Client.push(client, name, "c")
      {:ok, timed, 0} = Ringbus.read(name, 0, 3, times: true)
      {2, "c", t2} = List.last(timed)
      first = Enum.find(timed, fn {_, _, ms} -> ms >= t2 end)

      assert :ok = Client.Groups.create(client, name, "since", from: {:time, t2})
      {seq, payload, ^t2} = first

      assert {:ok, [{^seq, ^payload, 1, ^t2} | _]} =
               Client.Groups.fetch(client, name, "since", "c1", 10, times: true)

      :ok = Client.Groups.create(client, name, "all", from: :earliest)
      expected = for {seq, payload, ms} <- timed, do: {seq, payload, 1, ms}
      assert {:ok, ^expected} = Client.Groups.fetch(client, name, "all", "c1", 10, times: true)
      {:ok, 3} = Client.Groups.nack(client, name, "all", [0, 1, 2])
      # Without times, as before.
      assert {:ok, [{0, "a", 2}, {1, "b", 2}, {2, "c", 2}]} =
               Client.Groups.fetch(client, name, "all", "c1", 10)
    end
  end

  test "max_age over the wire: what is older leaves, counted expired", %{client: client} do
    :ok = Client.create(client, "client-time-age", capacity: 10, max_age: 50)
    {:ok, 0} = Client.push(client, "client-time-age", "old")
    {:ok, %{newest_time: t}} = Client.info(client, "client-time-age")
    Process.sleep(max(t + 51 - System.system_time(:millisecond), 0))

    assert {:ok, %{expired: 1, len: 0, oldest_time: nil, newest_time: nil}} =
             Client.info(client, "client-time-age")

    assert {:ok, [], 1} = Client.read(client, "client-time-age", 0, 10)
  end

  test "bad times are refused before they are sent", %{client: client} do
    assert_raise ArgumentError, ~r/:from/, fn -> Client.read(client, "x", {:time, -1}, 1) end
    assert_raise ArgumentError, ~r/:times/, fn -> Client.read(client, "x", 0, 1, times: 1) end
    assert_raise ArgumentError, ~r/:from/, fn -> Client.subscribe(client, "x", from: {:t, 1}) end

    assert_raise ArgumentError, ~r/:max_age/, fn ->
      Client.create(client, "x", capacity: 1, max_age: 0)
    end
  end
end
