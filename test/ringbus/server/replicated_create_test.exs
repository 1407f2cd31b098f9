defmodule Ringbus.Server.ReplicatedCreateTest do
  # CREATE with `replicas` (docs/PROTOCOL.md, version 3): a replicated,
  # durable channel made over TCP, from bytes written after the spec's field
  # table and from `Ringbus.Client`, and the errors a bad value gets.
  # (Replicated channels share this node's one Ra system: async: false.)
  use ExUnit.Case, async: false

  alias Ringbus.Client
  alias Ringbus.Test.RawClient

  setup do
    server = start_supervised!({Ringbus.Server, port: 0})

    on_exit(fn ->
      for name <- Ringbus.channels(),
          is_binary(name),
          String.starts_with?(name, "wire_rep_"),
          do: Ringbus.delete(name)
    end)

    {:ok, port: Ringbus.Server.port(server)}
  end

  # CREATE as section 5 lays it out: corr, name, capacity, overflow,
  # max_bytes, replicas.
  defp create_bytes(corr, name, capacity, overflow, max_bytes, replicas) do
    body =
      <<0x02, corr::32, byte_size(name)::16, name::binary, capacity::32, overflow, max_bytes::64,
        replicas>>

    <<byte_size(body)::32, body::binary>>
  end

  test "a raw CREATE with replicas 1 makes a durable channel", %{port: port} do
    {c, _limits} = RawClient.hello!(port)
    RawClient.send_raw(c, create_bytes(7, "wire_rep_raw", 10, 1, 0, 1))
    assert {[{:ok, 7}], c} = RawClient.recv(c, 1)

    assert {:ok, %{replicas: 1, members: [node], capacity: 10, overflow: :reject}} =
             Ringbus.info("wire_rep_raw")

    assert node == node()

    assert {{:push_acks, 1, [{8, {:ok, 0}}]}, c} =
             RawClient.call(c, {:push, 8, :ack, "wire_rep_raw", "a"})

    assert {:ok, [{0, "a"}], 0} = Ringbus.read("wire_rep_raw", 0, 10)

    # Replicas 0 is a memory channel, as before.
    RawClient.send_raw(c, create_bytes(9, "wire_rep_mem", 10, 0, 0, 0))
    assert {[{:ok, 9}], c} = RawClient.recv(c, 1)
    {:ok, info} = Ringbus.info("wire_rep_mem")
    refute Map.has_key?(info, :replicas)

    # More replicas than the cluster has nodes: node_down, saying why.
    RawClient.send_raw(c, create_bytes(10, "wire_rep_many", 10, 0, 0, 200))
    assert {[{:error, 10, :node_down, message}], _c} = RawClient.recv(c, 1)
    assert message =~ ~r"^replicas 200 needs 200 nodes, \d+ connected$"
    assert {:error, :no_channel} = Ringbus.info("wire_rep_many")
  end

  test "the client creates a replicated channel; too many replicas, or a bad value, are errors",
       %{port: port} do
    c = Client.connect!(port: port)
    assert :ok = Client.create(c, "wire_rep_client", capacity: 100, replicas: 1)
    assert {:ok, %{replicas: 1}} = Ringbus.info("wire_rep_client")
    # Protocol version 4: INFO_OK says how many members, and how many nodes.
    assert {:ok, %{replicas: 1, nodes: nodes}} = Client.info(c, "wire_rep_client")
    assert nodes == length(Node.list()) + 1
    assert {:ok, 0} = Client.push(c, "wire_rep_client", "durable")
    assert {:error, :exists} = Client.create(c, "wire_rep_client", capacity: 100, replicas: 1)

    assert {:error, :node_down} = Client.create(c, "wire_rep_many", capacity: 100, replicas: 3)

    # Values the protocol cannot carry never leave the client.
    for bad <- [0, 256, -1, :three, "3"] do
      assert_raise ArgumentError, ~r/expected :replicas to be an integer in 1..255/, fn ->
        Client.create(c, "wire_rep_bad", capacity: 100, replicas: bad)
      end
    end

    Client.close(c)
  end
end
