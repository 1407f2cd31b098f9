defmodule Ringbus.Server.ConcurrentCreateTest do
  # docs/PROTOCOL.md, section 5, CREATE: creates of one name at once answer
  # truthfully. One makes the channel (`OK`); the others answer `exists`
  # only when the channel exists, and a replicated create that cannot be
  # made answers `node_down`, whatever else is being created meanwhile.
  # (A lone node; replicated channels share its Ra system: async: false.)
  use ExUnit.Case, async: false

  alias Ringbus.Test.RawClient

  @clients 50

  setup do
    server = start_supervised!({Ringbus.Server, port: 0})
    on_exit(fn -> for name <- Ringbus.channels(), is_binary(name), do: Ringbus.delete(name) end)
    port = Ringbus.Server.port(server)
    clients = for _ <- 1..@clients, do: port |> RawClient.hello!() |> elem(0)
    {:ok, clients: clients}
  end

  # Each client sends its CREATE (`replicas` nil: a memory channel), all
  # before any answer is read; returns [{replicas, answer}].
  defp create_all(clients, name, replicas_of) do
    kinds = for {c, i} <- Enum.with_index(clients, 1), do: {c, i, replicas_of.(i)}

    for {c, i, replicas} <- kinds,
        do: RawClient.send_frames(c, [{:create, i, name, 10, :drop_oldest, nil, replicas}])

    for {c, i, replicas} <- kinds do
      {[answer], _c} = RawClient.recv(c, 1, 20_000)

      case answer do
        {:ok, ^i} -> {replicas, :ok}
        {:error, ^i, code, _message} -> {replicas, code}
      end
    end
  end

  # Every answer against what exists afterwards.
  defp check_truthful(answers, name) do
    exists? = match?({:ok, _}, Ringbus.info(name))
    oks = Enum.count(answers, &match?({_, :ok}, &1))

    if exists?,
      do: assert(oks == 1, "#{oks} creates answered OK: #{inspect(answers)}"),
      else:
        assert(oks == 0 and not Enum.any?(answers, &match?({_, :exists}, &1)),
          message: "no channel exists, yet: #{inspect(Enum.frequencies(answers))}"
        )

    exists?
  end

  test "50 memory creates of one name: one OK, 49 exists", %{clients: clients} do
    answers = create_all(clients, "cc-memory", fn _ -> nil end)
    assert check_truthful(answers, "cc-memory")
    assert Enum.frequencies(answers) == %{{nil, :ok} => 1, {nil, :exists} => @clients - 1}
  end

  test "50 creates with replicas 2 on a lone node: node_down, all of them, and no channel",
       %{clients: clients} do
    answers = create_all(clients, "cc-replicated", fn _ -> 2 end)
    refute check_truthful(answers, "cc-replicated")
    assert Enum.frequencies(answers) == %{{2, :node_down} => @clients}
  end

  test "replicated creates that fail, with memory creates among them: a memory create is made",
       %{clients: clients} do
    for round <- 1..5 do
      name = "cc-mixed-#{round}"
      # Every tenth client creates a memory channel, the others replicas 2.
      answers =
        create_all(clients, name, fn i -> if rem(i + round, 10) == 0, do: nil, else: 2 end)

      assert check_truthful(answers, name)

      for {replicas, answer} <- answers do
        case replicas do
          nil -> assert answer in [:ok, :exists]
          2 -> assert answer in [:node_down, :exists]
        end
      end

      assert {nil, :ok} in answers
      assert {:ok, info} = Ringbus.info(name)
      refute Map.has_key?(info, :replicas)
    end
  end
end
