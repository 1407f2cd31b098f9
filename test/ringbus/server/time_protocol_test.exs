defmodule Ringbus.Server.TimeProtocolTest do
  # Protocol version 6 on the server, driven by the raw test client: what
  # each version's connection takes and answers. Version 6's forms on an
  # older connection are malformed (as they were before it), and a version
  # 6 CREATE ends with max_age.
  use ExUnit.Case, async: false

  alias Ringbus.Test.RawClient

  setup do
    server = start_supervised!({Ringbus.Server, port: 0})
    on_exit(fn -> Enum.each(Ringbus.channels(), &Ringbus.delete/1) end)
    {:ok, port: Ringbus.Server.port(server)}
  end

  defp hello!(port, version) do
    client = RawClient.connect!(port)
    RawClient.send_frames(client, [{:hello, 1, version, 0, nil}])
    {[{:hello_ok, 1, ^version, _limits}], client} = RawClient.recv(client, 1)
    client
  end

  test "version 6: CREATE with max_age, INFO_OK with times, timed READ and SUBSCRIBE", %{
    port: port
  } do
    client = hello!(port, 6)

    {{:ok, 2}, client} = RawClient.call(client, {:create, 2, "t6", 10, :reject, nil, nil, 60_000})

    {:ok, 0} = Ringbus.push_many("t6", ~w(a b))
    {:ok, [{0, "a", t}, {1, "b", t1}], 0} = Ringbus.read("t6", 0, 2, times: true)

    {{:info_ok, 3, info}, client} = RawClient.call(client, {:info, 3, "t6"})
    assert %{max_age: 60_000, expired: 0, oldest_time: ^t, newest_time: ^t1, len: 2} = info

    # A batch: both messages have one time; a read from it gets both.
    read = {:read, 4, "t6", {:time, t1}, 10, nil, true}
    {{:read_timed_ok, 4, _inc, 0, 2, timed}, client} = RawClient.call(client, read)
    assert timed == [{0, "a", t}, {1, "b", t1}]
    read = {:read, 4, "t6", {:time, t1 + 1}, 10, nil, true}
    assert {{:read_timed_ok, 4, _inc, 0, 0, []}, client} = RawClient.call(client, read)

    sub = {:subscribe, 5, "t6", {:time, t}, 10, 10, nil, true}

    {[{:subscribed, 5, id, _}, {:deliver_timed, id, 0, 2, messages}], client} =
      then(RawClient.send_frames(client, [sub]), fn :ok -> RawClient.recv(client, 2) end)

    assert messages == [{0, "a", t}, {1, "b", t1}]

    # A version 6 CREATE without max_age is malformed.
    RawClient.send_frames(client, [{:create, 6, "t6b", 10, :reject, nil, nil}])
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)
  end

  test "version 5: INFO_OK as before; a CREATE with max_age or a timed READ is malformed", %{
    port: port
  } do
    client = hello!(port, 5)
    {{:ok, 2}, client} = RawClient.call(client, {:create, 2, "t5", 10, :reject, nil, nil})
    {{:info_ok, 3, info}, client} = RawClient.call(client, {:info, 3, "t5"})
    assert Map.has_key?(info, :nodes) and not Map.has_key?(info, :expired)

    RawClient.send_frames(client, [{:read, 4, "t5", {:time, 0}, 1, nil, false}])
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)

    client = hello!(port, 5)
    RawClient.send_frames(client, [{:create, 5, "t5b", 10, :reject, nil, nil, 1000}])
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)

    client = hello!(port, 5)
    RawClient.send_frames(client, [{:group_fetch_timed, 7, "t5", "g", "c", 1, 0}])
    assert [{:error, 0, :unknown_opcode, _}] = RawClient.recv_until_closed(client)

    client = hello!(port, 5)
    create = {:group_create, 8, "t5", "g", {:time, 0}, 1000, :infinity, 10, nil}
    RawClient.send_frames(client, [create])
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)
    assert Ringbus.Groups.info("t5") == {:ok, []}

    client = hello!(port, 4)
    RawClient.send_frames(client, [{:subscribe, 6, "t5", 0, 1, 1, nil, true}])
    assert [{:error, 0, :bad_frame, _}] = RawClient.recv_until_closed(client)
    refute "t5b" in Ringbus.channels()
  end
end
