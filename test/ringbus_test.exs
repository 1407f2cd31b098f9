defmodule RingbusTest do
  use ExUnit.Case, async: true

  doctest Ringbus

  setup do
    name = {__MODULE__, make_ref()}
    on_exit(fn -> Ringbus.delete(name) end)
    {:ok, name: name}
  end

  describe "create/2" do
    test "creates once, then says the channel exists", %{name: name} do
      assert :ok = Ringbus.create(name, capacity: 4)
      assert {:error, :exists} = Ringbus.create(name, capacity: 4)
      assert_raise Ringbus.Error, ~r/exists already/, fn -> Ringbus.create!(name, capacity: 4) end
    end

    test "rejects bad options with a clear message", %{name: name} do
      assert_raise ArgumentError, "expected :capacity to be given", fn ->
        Ringbus.create(name, [])
      end

      assert_raise ArgumentError, "expected :capacity to be a positive integer, got: 0", fn ->
        Ringbus.create(name, capacity: 0)
      end

      assert_raise ArgumentError,
                   ~r/expected :capacity to be a positive integer, got: "10"/,
                   fn ->
                     Ringbus.create(name, capacity: "10")
                   end

      assert_raise ArgumentError,
                   "expected :overflow to be :drop_oldest or :reject, got: :block",
                   fn -> Ringbus.create(name, capacity: 1, overflow: :block) end

      assert_raise ArgumentError, ~r/unknown keys \[:capcity\]/, fn ->
        Ringbus.create(name, capcity: 1)
      end

      assert_raise ArgumentError, ~r/keyword list/, fn -> Ringbus.create(name, 5) end
      assert {:error, :no_channel} = Ringbus.info(name)
    end
  end

  describe "operations on a missing channel" do
    test "return {:error, :no_channel}", %{name: name} do
      assert {:error, :no_channel} = Ringbus.push(name, "x")
      assert {:error, :no_channel} = Ringbus.push_many(name, ["x"])
      assert {:error, :no_channel} = Ringbus.pull(name)
      assert {:error, :no_channel} = Ringbus.read(name, 0, 1)
      assert {:error, :no_channel} = Ringbus.len(name)
      assert {:error, :no_channel} = Ringbus.info(name)
      assert {:error, :no_channel} = Ringbus.subscribe(name)
      assert {:error, :no_channel} = Ringbus.delete(name)
      assert_raise Ringbus.Error, ~r/no such channel/, fn -> Ringbus.push!(name, "x") end
    end

    test "a channel deleted and created again by another process is the new one", %{name: name} do
      :ok = Ringbus.create(name, capacity: 2)
      assert {:ok, 0} = Ringbus.push(name, "old")
      assert :ok = Task.async(fn -> Ringbus.delete(name) end) |> Task.await()
      assert {:error, :no_channel} = Ringbus.pull(name)
      assert {:error, :no_channel} = Ringbus.len(name)

      :ok = Task.async(fn -> Ringbus.create(name, capacity: 5) end) |> Task.await()
      assert :empty = Ringbus.pull(name)
      assert {:ok, 0} = Ringbus.push(name, "new")
      assert {:ok, %{capacity: 5, len: 1}} = Ringbus.info(name)
    end

    test "a deleted channel stops taking pushes", %{name: name} do
      :ok = Ringbus.create(name, capacity: 2)
      assert {:ok, 0} = Ringbus.push(name, "a")
      :ok = Ringbus.delete(name)
      assert {:error, :no_channel} = Ringbus.push(name, "b")
      assert name not in Ringbus.channels()
    end
  end

  describe "push and pull" do
    test "drop_oldest overwrites the oldest and counts it", %{name: name} do
      :ok = Ringbus.create(name, capacity: 2)
      assert [0, 1, 2] = for(p <- ~w(a b c), do: Ringbus.push!(name, p))
      assert {:ok, 1, "b"} = Ringbus.pull(name)
      assert {:ok, 2, "c"} = Ringbus.pull(name)
      assert :empty = Ringbus.pull(name)

      assert {:ok, %{pushed: 3, pulled: 2, overwritten: 1, rejected: 0, len: 0}} =
               Ringbus.info(name)

      # Nothing held now; three bytes pushed in all.
      assert {:ok, %{bytes: 0, bytes_pushed: 3}} = Ringbus.info(name)
    end

    test "reject refuses pushes when full, whole batches included", %{name: name} do
      :ok = Ringbus.create(name, capacity: 2, overflow: :reject)
      assert {:ok, 0} = Ringbus.push_many(name, ["a", "b"])
      assert {:error, :full} = Ringbus.push(name, "c")
      assert {:ok, 0, "a"} = Ringbus.pull(name)
      assert {:error, :full} = Ringbus.push_many(name, ["d", "e"])
      assert {:ok, 2} = Ringbus.push(name, "d")
      assert {:ok, %{rejected: 3, pushed: 3, len: 2}} = Ringbus.info(name)
    end

    test "push_many gives consecutive seqs and an empty batch pushes nothing", %{name: name} do
      :ok = Ringbus.create(name, capacity: 10)
      assert {:ok, 0} = Ringbus.push_many(name, ~w(a b c))
      assert {:ok, 3} = Ringbus.push_many(name, [])
      assert {:ok, 3} = Ringbus.push(name, "d")
      assert {:ok, [{0, "a"}, {1, "b"}, {2, "c"}, {3, "d"}], 0} = Ringbus.read(name, 0, 10)
    end

    test "a batch larger than the ring keeps its newest messages", %{name: name} do
      :ok = Ringbus.create(name, capacity: 2)
      assert {:ok, 0} = Ringbus.push_many(name, ~w(a b c d e))
      assert {:ok, [{3, "d"}, {4, "e"}], 3} = Ringbus.read(name, 0, 10)
      assert {:ok, %{overwritten: 3, len: 2}} = Ringbus.info(name)
    end

    test "a batch of more bytes than max_bytes is refused as one oversized payload is",
         %{name: name} do
      for overflow <- [:drop_oldest, :reject] do
        name = {name, overflow}
        :ok = Ringbus.create(name, capacity: 10, max_bytes: 10, overflow: overflow)
        assert {:error, :too_large} = Ringbus.push(name, :binary.copy("x", 11))
        assert {:error, :too_large} = Ringbus.push_many(name, ["aaaa", "bbbb", "cccc"])
        assert {:ok, [], 0} = Ringbus.read(name, 0, 10)
        assert {:ok, %{rejected: 4, pushed: 0, bytes: 0, next_seq: 0}} = Ringbus.info(name)
        # A batch that fits goes in whole.
        assert {:ok, 0} = Ringbus.push_many(name, ["aaaa", "bbbb"])
        assert {:ok, [{0, "aaaa"}, {1, "bbbb"}], 0} = Ringbus.read(name, 0, 10)
        :ok = Ringbus.delete(name)
      end
    end

    test "messages stored one by one do not keep a larger binary alive", %{name: name} do
      :ok = Ringbus.create(name, capacity: 4, overflow: :reject)
      big = :binary.copy("b", 100_000)
      parts = for i <- 0..1, do: binary_part(big, i * 1000, 1000)
      {:ok, 0} = Ringbus.push_many(name, parts)
      {:ok, messages, 0} = Ringbus.read(name, 0, 2)
      assert Enum.map(messages, fn {_, p} -> :binary.referenced_byte_size(p) end) == [1000, 1000]
    end

    test "push_many refuses non-binary payloads", %{name: name} do
      :ok = Ringbus.create(name, capacity: 2)

      assert_raise ArgumentError, ~r/expected every payload to be a binary, got: 1/, fn ->
        Ringbus.push_many(name, ["a", 1])
      end

      assert Ringbus.len(name) == 0
    end
  end

  describe "read/3" do
    test "counts what is gone before the first message returned", %{name: name} do
      :ok = Ringbus.create(name, capacity: 3)
      for p <- ~w(a b c d e), do: Ringbus.push!(name, p)
      assert {:ok, [{2, "c"}, {3, "d"}], 2} = Ringbus.read(name, 0, 2)
      assert {:ok, 2, "c"} = Ringbus.pull(name)
      assert {:ok, [{3, "d"}, {4, "e"}], 1} = Ringbus.read(name, 2, 5)
      assert {:ok, [], 0} = Ringbus.read(name, 5, 5)
      assert {:ok, [], 0} = Ringbus.read(name, 100, 5)
      assert {:ok, [], 3} = Ringbus.read(name, 0, 0)
    end
  end

  describe "incarnations" do
    test "info/1 shows the incarnation, which a channel created again changes",
         %{name: name} do
      :ok = Ringbus.create(name, capacity: 4)
      {:ok, %{incarnation: first}} = Ringbus.info(name)
      assert is_integer(first) and first > 0
      # Pushes and reads keep it: it names the creation, not the contents.
      {:ok, 0} = Ringbus.push(name, "a")
      assert {:ok, %{incarnation: ^first}} = Ringbus.info(name)

      :ok = Ringbus.delete(name)
      :ok = Ringbus.create(name, capacity: 4)
      {:ok, %{incarnation: second}} = Ringbus.info(name)
      assert second != first
    end

    test "a read or a subscription that names an old incarnation is told, not left waiting",
         %{name: name} do
      :ok = Ringbus.create(name, capacity: 4)
      {:ok, %{incarnation: old}} = Ringbus.info(name)
      {:ok, 0} = Ringbus.push_many(name, ["a", "b"])
      assert {:ok, [{0, "a"}], 0} = Ringbus.read(name, 0, 1, incarnation: old)
      assert {:ok, sub} = Ringbus.subscribe(name, from: 1, incarnation: old)
      assert_receive {:ringbus, ^sub, [{1, "b"}], 0}

      :ok = Ringbus.delete(name)
      assert_receive {:ringbus_closed, ^sub, :channel_deleted}
      :ok = Ringbus.create(name, capacity: 4)
      {:ok, 0} = Ringbus.push(name, "new")

      # The consumer resumes from seq 2 of the old channel.
      assert Ringbus.read(name, 2, 10, incarnation: old) == {:error, :new_incarnation}
      assert Ringbus.subscribe(name, from: 2, incarnation: old) == {:error, :new_incarnation}
      # Without one, as before: nothing at seq 2 of the new channel.
      assert {:ok, [], 0} = Ringbus.read(name, 2, 10)
      assert {:ok, [], 0} = Ringbus.read(name, 2, 10, [])

      {:ok, %{incarnation: new}} = Ringbus.info(name)
      assert {:ok, [{0, "new"}], 0} = Ringbus.read(name, 0, 10, incarnation: new)
      assert {:ok, sub} = Ringbus.subscribe(name, from: 0, incarnation: new)
      assert_receive {:ringbus, ^sub, [{0, "new"}], 0}
    end

    test "a bad incarnation option raises", %{name: name} do
      :ok = Ringbus.create(name, capacity: 4)

      assert_raise ArgumentError, ~r/expected :incarnation to be nil or a positive integer/, fn ->
        Ringbus.read(name, 0, 1, incarnation: "x")
      end

      assert_raise ArgumentError, ~r/expected :incarnation to be nil or a positive integer/, fn ->
        Ringbus.subscribe(name, incarnation: 0)
      end

      assert_raise ArgumentError, fn -> Ringbus.read(name, 0, 1, incarnatoin: 1) end
    end
  end

  describe "memory" do
    # A payload that is a slice of a larger binary (a socket read, say) must
    # not keep that binary alive once stored.
    @big :binary.copy("r", 1_000_000)

    defp kept(payload), do: :binary.referenced_byte_size(payload)

    test "a message stored on its own keeps only its bytes", %{name: name} do
      :ok = Ringbus.create(name, capacity: 10, overflow: :reject)
      {:ok, 0} = Ringbus.push(name, binary_part(@big, 10, 1000))
      {:ok, 1} = Ringbus.push_many(name, [binary_part(@big, 0, 100), binary_part(@big, 5, 100)])
      {:ok, messages, 0} = Ringbus.read(name, 0, 3)
      assert Enum.map(messages, fn {_, p} -> kept(p) end) == [1000, 100, 100]
    end

    test "a batch stored as one unit keeps its own bytes, once", %{name: name} do
      :ok = Ringbus.create(name, capacity: 100)
      payloads = for i <- 0..9, do: binary_part(@big, i * 1000, 100)
      {:ok, 0} = Ringbus.push_many(name, payloads)
      {:ok, messages, 0} = Ringbus.read(name, 0, 10)
      assert Enum.map(messages, &elem(&1, 1)) == payloads
      # All ten share one binary of the batch's 1,000 bytes.
      assert Enum.uniq(Enum.map(messages, fn {_, p} -> kept(p) end)) == [1000]
      assert {:ok, %{bytes: 1000}} = Ringbus.info(name)
    end
  end

  test "len/1 follows pushes and pulls", %{name: name} do
    :ok = Ringbus.create(name, capacity: 1000)
    Ringbus.push_many!(name, List.duplicate("x", 700))
    assert Ringbus.len(name) == 700
    for _ <- 1..200, do: {:ok, _, _} = Ringbus.pull(name)
    assert Ringbus.len(name) == 500
    Ringbus.push_many!(name, List.duplicate("x", 900))
    assert Ringbus.len(name) == 1000
  end
end
