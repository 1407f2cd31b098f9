defmodule Ringbus.OpIdsTest do
  # The operations on Redis stream IDs (`Ringbus.Op`: `:push_id`,
  # `:set_id`, `:ids_of`, `:id_bounds`, `info/1`'s `:last_id`), one path for both kinds of
  # channel: a memory channel's decided where it lives (`GivenIds`), a
  # replicated one's in its log (`Ringbus.Replica.StreamIds`); the same
  # answers from both.
  use ExUnit.Case, async: true

  @trim_to_2 %{strategy: {:maxlen, 2}, approx: false, limit: nil}

  for {kind, opts} <- [memory: [capacity: 10], replicated: [replicas: 1, capacity: 10]] do
    test "push under an ID, XSETID, and the IDs read back (#{kind})" do
      name = "op_ids_#{unquote(kind)}_#{System.unique_integer([:positive])}"
      :ok = Ringbus.create(name, unquote(opts))
      on_exit(fn -> Ringbus.delete(name) end)
      run = &Ringbus.run(name, &1)
      now = System.system_time(:millisecond)
      f = now + 60_000

      assert {:ok, 0, {ms, 0}} = run.({:push_id, "a", :auto})
      assert ms in now..(now + 5_000)
      assert run.({:push_id, "b", {f, 5}}) == {:ok, 1, {f, 5}}
      assert run.({:push_id, "x", {f, 5}}) == {:error, :not_greater}
      assert run.({:push_id, "x", {0, 0}}) == {:error, :zero}
      assert run.({:push_id, "c", {f, :auto}}) == {:ok, 2, {f, 6}}
      assert run.({:push_id, "x", :junk}) == {:error, :badarg}
      assert run.({:set_id, {-1, 0}}) == {:error, :badarg}
      assert run.({:ids_of, [:junk]}) == {:error, :badarg}
      assert run.({:id_bounds, [{:from, {1, :junk}}]}) == {:error, :badarg}
      assert run.({:id_bounds, :junk}) == {:error, :badarg}

      last_id = fn -> with {:ok, info} <- Ringbus.info(name), do: {:ok, info.last_id} end
      assert last_id.() == {:ok, {f, 6}}
      # A seq not held is named 0-<seq + 1> (`Ringbus.Channel.IdReads`).
      assert run.({:ids_of, [1, 99]}) == {:ok, [{f, 5}, {0, 100}]}

      assert run.({:id_bounds, [{:from, {f, 6}}, {:from, {f, 0}}, {:from, {f + 1, 0}}]}) ==
               {:ok, [2, 1, 3]}

      assert run.({:set_id, {f, 5}}) == {:error, :below_top}
      assert run.({:set_id, {f + 10, 0}}) == :ok
      assert last_id.() == {:ok, {f + 10, 0}}
      assert run.({:push_id, "d", :auto}) == {:ok, 3, {f + 10, 1}}

      # XADD with MAXLEN: a push under an ID, then its trim.
      assert run.({:push_trim, {:push_id, "e", {f + 20, 0}}, @trim_to_2}) == {:ok, 4, {f + 20, 0}}
      assert {:ok, [{3, "d"}, {4, "e"}], 3} = Ringbus.read(name, 0, 10)
      assert {:ok, %{rejected: 0}} = Ringbus.info(name)

      # The largest ID: no auto ID after it.
      max = 0xFFFF_FFFF_FFFF_FFFF
      assert run.({:push_id, "m", {max, max}}) == {:ok, 5, {max, max}}
      assert run.({:push_id, "x", :auto}) == {:error, :exhausted}
      assert run.({:push_id, "x", {max, :auto}}) == {:error, :not_greater}
      assert last_id.() == {:ok, {max, max}}
    end
  end
end
