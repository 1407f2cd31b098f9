defmodule Ringbus.Cluster.Directory.CoreTest do
  # The directory's protocol as plain functions: no process, no node. A few
  # tests read one core's effects; the others run several cores as a small
  # simulated cluster (below), delivering their messages by hand, to see
  # claims, votes, conflicts and partitions end the way the protocol says.
  use ExUnit.Case, async: true

  alias Ringbus.Cluster.Directory.Core

  @opts [capacity: 8]

  describe "one core" do
    test "a create with no other node creates the channel, then answers" do
      core = Core.new(:i1, 1_000)
      world = world([])

      {core, effects} = Core.handle(core, {:create, "x", @opts, :caller, :id, {10, :a}}, world)
      assert [{:create_channel, "x", @opts, {:commit, _} = purpose}] = effects

      {core, effects} = Core.handle(core, {:created, "x", @opts, purpose, :ok}, world)
      assert effects == [{:reply, :caller, :ok}]
      assert core.own == %{"x" => {@opts, {10, :a}}}
      assert core.claims == %{} and core.pending == %{}
    end

    test "a create asks the nodes whose link is up, not busy or down ones" do
      world = world([{:b, :up}, {:c, :busy}, {:d, :down}, {:e, :up}])
      create = {:create, "x", @opts, :caller, :id, {10, :a}}

      assert {core, effects} = Core.handle(Core.new(:i1, 1_000), create, world)

      assert effects == [
               {:send, :b, {:claim, "x", {10, :a}, :id}},
               {:send, :e, {:claim, "x", {10, :a}, :id}},
               {:start_timer, :id, 1_000}
             ]

      assert core.claims == %{"x" => {:own, {10, :a}, :id}}
    end

    test "once every voter granted, the channel is announced to every linked node" do
      world = world([{:b, :up}, {:c, :busy}])

      {core, _} =
        Core.handle(Core.new(:i1, 1_000), {:create, "x", @opts, :caller, :id, {10, :a}}, world)

      {core, effects} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)
      assert [{:create_channel, "x", @opts, purpose}] = effects

      {core, effects} = Core.handle(core, {:created, "x", @opts, purpose, :ok}, world)

      assert effects == [
               {:send, :b, {:add, "x", @opts, {10, :a}, :i1, :id}},
               {:send, :c, {:add, "x", @opts, {10, :a}, :i1, :id}}
             ]

      # The claim's timer still runs: both rounds share it.
      {_core, effects} = Core.handle(core, {:peer, :b, {:added, :id}}, world)
      assert effects == [{:cancel_timer, :id}, {:reply, :caller, :ok}]
    end

    test "forgetting a node that is gone drops its channels and claims; not while it is up" do
      sync = {:sync, :ib, [{"x", @opts, {5, :b}}, {"y", @opts, {6, :b}}]}
      {core, _} = Core.handle(Core.new(:i1, 1_000), {:peer, :b, sync}, world([{:b, :up}]))
      {core, _} = Core.handle(core, {:peer, :b, {:claim, "z", {7, :b}, :zid}}, world([{:b, :up}]))
      assert Map.keys(core.remote) == ["x", "y"] and Map.has_key?(core.claims, "z")

      for {links, connected?} <- [{[{:b, :up}], false}, {[{:b, :busy}], false}, {[], true}] do
        assert {^core, [{:reply, :op, {:error, :node_up}}]} =
                 Core.handle(core, {:forget, :b, connected?, :op}, world(links))
      end

      {core, effects} = Core.handle(core, {:forget, :b, false, :op}, world([{:b, :down}]))
      assert effects == [{:drop_entry, "x"}, {:drop_entry, "y"}, {:reply, :op, {:ok, 2}}]
      assert core.remote == %{} and core.claims == %{}

      # Its names are free: created here with no one to ask.
      {_core, effects} =
        Core.handle(core, {:create, "x", @opts, :caller, :id, {10, :a}}, world([]))

      assert [{:create_channel, "x", @opts, {:commit, _}}] = effects
    end

    test "a replicated channel's claim is held while its members are made, then announced" do
      world = world([{:b, :up}])
      stamp = {10, :a}
      {core, _} = Core.handle(Core.new(:i1, 1_000), {:claim, "r", :caller, :id, stamp}, world)
      {core, effects} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)
      assert effects == [{:cancel_timer, :id}, {:reply, :caller, {:ok, stamp}}]
      assert core.claims == %{"r" => {:held, stamp, :id}}

      # Held: every other node's claim of the name is refused meanwhile, and
      # a create here waits for it.
      {core, effects} = Core.handle(core, {:peer, :b, {:claim, "r", {1, :b}, :bid}}, world)
      assert effects == [{:send, :b, {:vote, :bid, :exists}}]
      {core, effects} = Core.handle(core, {:create, "r", @opts, :other, :id2, {11, :a}}, world)
      assert effects == [{:start_timer, {:queued, :id2}, 1_000}]

      # Made: the create that waited is answered exists.
      opts = [members: [:a, :c]] ++ @opts
      {core, effects} = Core.handle(core, {:claimed, "r", opts, stamp, :caller, :ok}, world)

      assert [
               {:send, :b, {:add, "r", ^opts, ^stamp, :i1, :id}},
               {:start_timer, :id, _},
               {:cancel_timer, {:queued, :id2}},
               {:reply, :other, {:error, :exists}}
             ] = effects

      assert core.own == %{"r" => {opts, stamp}} and core.claims == %{} and core.queued == %{}

      # Its delete, run by any member, is announced, and the name is free.
      {core, effects} = Core.handle(core, {:deleted, "r", stamp, :caller}, world)
      assert effects == [{:send, :b, {:del, "r", stamp}}, {:reply, :caller, :ok}]
      assert core.own == %{}
    end

    test "a replicated channel's failed members release its claim" do
      world = world([{:b, :up}])
      {core, _} = Core.handle(Core.new(:i1, 1_000), {:claim, "r", :caller, :id, {10, :a}}, world)
      {core, _} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)
      error = {:error, :node_down}

      {core, effects} = Core.handle(core, {:claimed, "r", @opts, {10, :a}, :caller, error}, world)

      assert effects == [{:send, :b, {:release, "r", {10, :a}}}, {:reply, :caller, error}]
      assert core.claims == %{} and core.own == %{}
    end

    test "replicated channels: every member's sync lists them, a delete from any member drops them" do
      opts = [members: [:b, :c]] ++ @opts
      stamp = {10, :b}
      world = world([{:b, :up}, {:c, :up}])

      {core, _} =
        Core.handle(Core.new(:i1, 1_000), {:peer, :b, {:sync, :ib, [{"r", opts, stamp}]}}, world)

      {core, _} = Core.handle(core, {:peer, :c, {:sync, :ic, [{"r", opts, stamp}]}}, world)
      assert %{"r" => {:c, ^opts, ^stamp, :ic}} = core.remote

      # Missing from one member's sync after its restart: kept, never recreated.
      {core, effects} = Core.handle(core, {:peer, :c, {:sync, :ic2, []}}, world)
      assert effects == [] and Map.has_key?(core.remote, "r")

      {core, effects} = Core.handle(core, {:peer, :b, {:del, "r", stamp}}, world)
      assert effects == [{:drop_entry, "r"}] and core.remote == %{}

      # This node's own replicated channels go out in its syncs.
      replicated = fn -> [{"mine", opts, stamp}] end

      {_core, effects} =
        Core.handle(core, {:link_up, :b}, Map.put(world, :replicated, replicated))

      assert effects == [{:send, :b, {:sync, :i1, [{"mine", opts, stamp}]}}]
    end

    test "a replicated channel's new members are announced, and kept by its creator" do
      world = world([{:b, :up}])
      old = [members: [:a]] ++ @opts
      new = [members: [:a, :b]] ++ @opts
      stamp = {10, :a}
      {core, _} = Core.handle(Core.new(:i1, 1_000), {:claim, "r", :caller, :id, stamp}, world)
      {core, _} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)
      {core, _} = Core.handle(core, {:claimed, "r", old, stamp, :caller, :ok}, world)

      {core, effects} = Core.handle(core, {:announce, "r", new, stamp, :op}, world)
      assert effects == [{:send, :b, {:add, "r", new, stamp, :i1, nil}}, {:reply, :op, :ok}]
      assert core.own == %{"r" => {new, stamp}}

      # Announced by another member: the creator's own entry follows.
      newer = [members: [:a, :c]] ++ @opts
      {core, []} = Core.handle(core, {:peer, :b, {:add, "r", newer, stamp, :ib, nil}}, world)
      assert core.own == %{"r" => {newer, stamp}}
    end

    test "the store's refusal is the create's answer" do
      {core, [{:create_channel, _, _, purpose}]} =
        Core.handle(
          Core.new(:i1, 1_000),
          {:create, "x", @opts, :caller, :id, {10, :a}},
          world([])
        )

      {core, effects} =
        Core.handle(core, {:created, "x", @opts, purpose, {:error, :exists}}, world([]))

      assert effects == [{:reply, :caller, {:error, :exists}}]
      assert core.own == %{}
    end

    test "a name held here, in the store or by another node is refused at once" do
      world = world([{:b, :up}], ["stored"])
      core = Core.new(:i1, 1_000)

      {core, _} =
        Core.handle(core, {:peer, :b, {:add, "remote", @opts, {5, :b}, :ib, nil}}, world)

      for name <- ["stored", "remote"] do
        assert {_, [{:reply, :caller, {:error, :exists}}]} =
                 Core.handle(core, {:create, name, @opts, :caller, :id2, {11, :a}}, world)
      end
    end

    test "a create of a name under a claim waits: exists if the claim made it, else it runs" do
      world = world([{:b, :up}])
      core = Core.new(:i1, 1_000)
      {core, _} = Core.handle(core, {:create, "c", @opts, :first, :id1, {10, :a}}, world)

      # Behind our claim in its vote, and behind a claim granted to b.
      {core, effects} = Core.handle(core, {:create, "c", @opts, :second, :id2, {11, :a}}, world)
      assert effects == [{:start_timer, {:queued, :id2}, 1_000}]
      {core, _} = Core.handle(core, {:peer, :b, {:claim, "g", {1, :b}, :bid}}, world)
      {core, effects} = Core.handle(core, {:create, "g", @opts, :third, :id3, {12, :a}}, world)
      assert effects == [{:start_timer, {:queued, :id3}, 1_000}]

      # Our claim is refused: the create behind it does not answer exists
      # for a channel no one made, but runs, and claims in turn.
      {core, effects} = Core.handle(core, {:peer, :b, {:vote, :id1, :exists}}, world)

      assert [
               {:send, :b, {:release, "c", {10, :a}}},
               {:cancel_timer, :id1},
               {:reply, :first, {:error, :exists}},
               {:cancel_timer, {:queued, :id2}},
               {:send, :b, {:claim, "c", {11, :a}, :id2}},
               {:start_timer, :id2, 1_000}
             ] = effects

      # b's channel is made: the create behind its claim is answered exists.
      {core, effects} =
        Core.handle(core, {:peer, :b, {:add, "g", @opts, {1, :b}, :ib, nil}}, world)

      assert [
               {:put_entry, _},
               {:cancel_timer, {:queued, :id3}},
               {:reply, :third, {:error, :exists}}
             ] = effects

      # A create that waits longer than create_timeout answers node_busy.
      {core, _} = Core.handle(core, {:create, "c", @opts, :fourth, :id4, {13, :a}}, world)
      {core, effects} = Core.handle(core, {:timeout, {:queued, :id4}}, world)
      assert effects == [{:reply, :fourth, {:error, :node_busy}}]
      assert core.queued == %{}
    end

    test "a claim whose caller is gone is given up, and what waited on it runs" do
      world = world([])
      stamp = {10, :a}
      {core, _} = Core.handle(Core.new(:i1, 1_000), {:claim, "r", :caller, :id, stamp}, world)
      assert core.claims == %{"r" => {:held, stamp, :id}}
      {core, _} = Core.handle(core, {:create, "r", @opts, :other, :id2, {11, :a}}, world)

      {core, effects} = Core.handle(core, {:abandon, "r", stamp}, world)

      assert [{:cancel_timer, {:queued, :id2}}, {:create_channel, "r", @opts, {:commit, _}}] =
               effects

      assert core.claims == %{} and core.queued == %{}
    end

    test "a voter refuses a name it has or a claim it knows with a smaller stamp, else grants" do
      world = world([{:a, :up}, {:c, :up}], ["stored"])
      core = Core.new(:ib, 1_000)

      assert {core, [{:send, :a, {:vote, 1, :exists}}]} =
               Core.handle(core, {:peer, :a, {:claim, "stored", {10, :a}, 1}}, world)

      assert {core, [{:send, :a, {:vote, 2, :ok}}]} =
               Core.handle(core, {:peer, :a, {:claim, "x", {10, :a}, 2}}, world)

      assert core.claims == %{"x" => {:granted, {10, :a}, :a}}

      # A later claim loses to the granted one; an earlier one takes over.
      assert {_, [{:send, :c, {:vote, 3, :exists}}]} =
               Core.handle(core, {:peer, :c, {:claim, "x", {20, :c}, 3}}, world)

      assert {core, [{:send, :c, {:vote, 4, :ok}}]} =
               Core.handle(core, {:peer, :c, {:claim, "x", {5, :c}, 4}}, world)

      assert core.claims == %{"x" => {:granted, {5, :c}, :c}}

      # A release of a claim no longer granted changes nothing.
      assert {^core, []} = Core.handle(core, {:peer, :a, {:release, "x", {10, :a}}}, world)
      assert {core, []} = Core.handle(core, {:peer, :c, {:release, "x", {5, :c}}}, world)
      assert core.claims == %{}
    end

    test "a claim of ours that an older one reaches is given up, and the older granted" do
      world = world([{:b, :up}, {:c, :up}])

      {core, _} =
        Core.handle(Core.new(:i1, 1_000), {:create, "x", @opts, :caller, :id, {20, :a}}, world)

      {core, effects} = Core.handle(core, {:peer, :c, {:claim, "x", {10, :c}, 7}}, world)

      assert effects == [
               {:send, :b, {:release, "x", {20, :a}}},
               {:send, :c, {:release, "x", {20, :a}}},
               {:cancel_timer, :id},
               {:reply, :caller, {:error, :exists}},
               {:send, :c, {:vote, 7, :ok}}
             ]

      assert core.claims == %{"x" => {:granted, {10, :c}, :c}}
      assert core.pending == %{}
    end

    test "one :exists vote ends the create: the claim is released everywhere" do
      world = world([{:b, :up}, {:c, :up}])

      {core, _} =
        Core.handle(Core.new(:i1, 1_000), {:create, "x", @opts, :caller, :id, {20, :a}}, world)

      {core, []} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)

      {core, effects} = Core.handle(core, {:peer, :c, {:vote, :id, :exists}}, world)

      assert effects == [
               {:send, :b, {:release, "x", {20, :a}}},
               {:send, :c, {:release, "x", {20, :a}}},
               {:cancel_timer, :id},
               {:reply, :caller, {:error, :exists}}
             ]

      assert core.claims == %{} and core.pending == %{}
    end

    test "a claim that times out answers node_busy; an announce that times out, ok" do
      world = world([{:b, :up}])
      create = {:create, "x", @opts, :caller, :id, {20, :a}}
      {core, _} = Core.handle(Core.new(:i1, 1_000), create, world)

      {claim_timed_out, effects} = Core.handle(core, {:timeout, :id}, world)

      assert effects == [
               {:send, :b, {:release, "x", {20, :a}}},
               {:cancel_timer, :id},
               {:reply, :caller, {:error, :node_busy}}
             ]

      assert claim_timed_out.claims == %{}

      {core, [{:create_channel, _, _, purpose}]} =
        Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)

      {core, _} = Core.handle(core, {:created, "x", @opts, purpose, :ok}, world)
      {core, effects} = Core.handle(core, {:timeout, :id}, world)
      assert effects == [{:cancel_timer, :id}, {:reply, :caller, :ok}]
      assert Map.has_key?(core.own, "x")

      # A late timeout or vote finds nothing to do.
      assert {^core, []} = Core.handle(core, {:timeout, :id}, world)
      assert {^core, []} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)
    end

    test "a voter whose link goes down no longer counts, and its grants are forgotten" do
      world = world([{:b, :up}, {:c, :up}])

      {core, _} =
        Core.handle(Core.new(:i1, 1_000), {:create, "x", @opts, :caller, :id, {20, :a}}, world)

      {core, _} = Core.handle(core, {:peer, :c, {:claim, "y", {5, :c}, 9}}, world)
      {core, []} = Core.handle(core, {:peer, :b, {:vote, :id, :ok}}, world)

      {core, effects} = Core.handle(core, {:link_down, :c}, world([{:b, :up}]))
      assert [{:create_channel, "x", @opts, {:commit, _}}] = effects
      assert core.claims == %{}
    end

    test "deleting a channel of ours tells every linked node; its answer is the store's" do
      world = world([{:b, :up}, {:c, :down}])

      {core, [{:create_channel, _, _, purpose}]} =
        Core.handle(Core.new(:i1, 1_000), {:create, "x", @opts, :c1, :id, {20, :a}}, world([]))

      {core, _} = Core.handle(core, {:created, "x", @opts, purpose, :ok}, world([]))

      {core, effects} = Core.handle(core, {:delete, "x", :caller, :ok}, world)

      assert effects == [
               {:send, :b, {:del, "x", {20, :a}}},
               {:send, :c, {:del, "x", {20, :a}}},
               {:reply, :caller, :ok}
             ]

      assert core.own == %{}

      assert {_, [{:reply, :caller, {:error, :no_channel}}]} =
               Core.handle(core, {:delete, "x", :caller, {:error, :no_channel}}, world)
    end

    test "a deletion is heard only from the channel's home, for the stamp it has" do
      world = world([{:a, :up}, {:c, :up}])

      {core, _} =
        Core.handle(
          Core.new(:ib, 1_000),
          {:peer, :a, {:add, "x", @opts, {20, :a}, :ia, nil}},
          world
        )

      assert core.remote == %{"x" => {:a, @opts, {20, :a}, :ia}}

      assert {^core, []} = Core.handle(core, {:peer, :c, {:del, "x", {20, :a}}}, world)
      assert {^core, []} = Core.handle(core, {:peer, :a, {:del, "x", {21, :a}}}, world)

      assert {core, [{:drop_entry, "x"}]} =
               Core.handle(core, {:peer, :a, {:del, "x", {20, :a}}}, world)

      assert core.remote == %{}
    end
  end

  describe "a simulated cluster" do
    test "of two creates of one name at once, the smaller stamp wins everywhere" do
      sim =
        cluster([:a, :b, :c])
        |> step(:a, {:create, "x", @opts, :a_caller, :id_a, {20, :a}})
        |> step(:b, {:create, "x", @opts, :b_caller, :id_b, {10, :b}})
        |> deliver()

      assert sim.replies == %{a_caller: {:error, :exists}, b_caller: :ok}
      assert stores(sim) == %{a: [], b: ["x"], c: []}
      assert homes(sim, "x") == %{a: :b, b: :b, c: :b}
      assert claims(sim) == %{a: %{}, b: %{}, c: %{}}
    end

    test "many creates of one name from every node at once: exactly one wins" do
      nodes = [:a, :b, :c, :d]

      sim =
        Enum.reduce(Enum.with_index(nodes), cluster(nodes), fn {n, i}, sim ->
          step(sim, n, {:create, "x", @opts, n, {:id, n}, {100 - i, n}})
        end)
        |> deliver()

      assert sim.replies == %{
               a: {:error, :exists},
               b: {:error, :exists},
               c: {:error, :exists},
               d: :ok
             }

      assert homes(sim, "x") == Map.new(nodes, &{&1, :d})
    end

    test "a partition heals: of two homes for one name, the smaller stamp stays" do
      sim =
        cluster([:a, :b])
        |> partition([:a], [:b])
        |> step(:a, {:create, "x", @opts, :a_caller, :id_a, {10, :a}})
        |> step(:b, {:create, "x", @opts, :b_caller, :id_b, {20, :b}})
        |> deliver()

      assert sim.replies == %{a_caller: :ok, b_caller: :ok}
      assert stores(sim) == %{a: ["x"], b: ["x"]}

      sim = sim |> heal([:a], [:b]) |> deliver()

      assert stores(sim) == %{a: ["x"], b: []}
      assert homes(sim, "x") == %{a: :a, b: :a}
      assert sim.cores.a.remote == %{} and sim.cores.b.own == %{}
    end

    test "a channel deleted during a partition is dropped when it heals" do
      sim = cluster([:a, :b]) |> step(:a, {:create, "x", @opts, :c1, :id, {10, :a}}) |> deliver()
      assert homes(sim, "x") == %{a: :a, b: :a}

      sim =
        sim
        |> partition([:a], [:b])
        |> store_delete(:a, "x")
        |> deliver()

      assert homes(sim, "x") == %{a: nil, b: :a}

      sim = sim |> heal([:a], [:b]) |> deliver()
      assert homes(sim, "x") == %{a: nil, b: nil}
      assert stores(sim) == %{a: [], b: []}
    end

    test "a node that restarted gets its channels back from the others, empty" do
      sim = cluster([:a, :b]) |> step(:a, {:create, "x", @opts, :c1, :id, {10, :a}}) |> deliver()

      # a restarts: a new incarnation, an empty store, links come up again.
      sim =
        sim
        |> partition([:a], [:b])
        |> put_in([:cores, :a], Core.new({:a, 2}, 1_000))
        |> put_in([:stores, :a], MapSet.new())
        |> heal([:a], [:b])
        |> deliver()

      assert stores(sim) == %{a: ["x"], b: []}
      assert sim.cores.a.own == %{"x" => {@opts, {10, :a}}}
      assert sim.cores.b.remote == %{"x" => {:a, @opts, {10, :a}, {:a, 2}}}
    end

    test "a node that restarted and declares its old channel again at boot gets it back" do
      sim =
        cluster([:a, :b, :c])
        |> step(:a, {:create, "x", @opts, :c1, :id, {10, :a}})
        |> deliver()

      # a restarts; its links come up, and its boot creates "x" again before
      # any answer is in: the others ask it to recreate "x" while its own
      # claim on the name waits for their votes.
      sim =
        sim
        |> partition([:a], [:b, :c])
        |> put_in([:cores, :a], Core.new({:a, 2}, 1_000))
        |> put_in([:stores, :a], MapSet.new())
        |> heal([:a], [:b, :c])
        |> step(:a, {:create, "x", @opts, :boot, :id2, {30, :a}})
        |> deliver()

      assert sim.replies.boot == {:error, :exists}
      assert stores(sim) == %{a: ["x"], b: [], c: []}
      assert homes(sim, "x") == %{a: :a, b: :a, c: :a}
      assert sim.cores.a.own == %{"x" => {@opts, {10, :a}}}
      assert claims(sim) == %{a: %{}, b: %{}, c: %{}}
    end

    test "a name created apart from its home while the home is down: the older create wins" do
      # c homes "x"; c goes down; a restarts cut off from b, and creates
      # "x" again (as a release declaring it at boot does).
      sim =
        cluster([:a, :b, :c])
        |> step(:c, {:create, "x", @opts, :c1, :id1, {10, :c}})
        |> deliver()
        |> partition([:c], [:a, :b])
        |> partition([:a], [:b])
        |> put_in([:cores, :a], Core.new({:a, 2}, 1_000))
        |> put_in([:tables, :a], %{})
        |> step(:a, {:create, "x", @opts, :c2, :id2, {20, :a}})
        |> deliver()

      assert sim.replies.c2 == :ok

      # a meets b, which keeps c's older "x": a must give its copy up,
      # though c, down, cannot tell it.
      sim = sim |> heal([:a], [:b]) |> deliver()
      assert stores(sim) == %{a: [], b: [], c: ["x"]}
      assert homes(sim, "x") == %{a: :c, b: :c, c: :c}

      # A later create of "x" at a is refused: the name is c's.
      sim = sim |> step(:a, {:create, "x", @opts, :c3, :id3, {30, :a}}) |> deliver()
      assert sim.replies.c3 == {:error, :exists}

      sim = sim |> heal([:c], [:a, :b]) |> deliver()
      assert stores(sim) == %{a: [], b: [], c: ["x"]}
      assert homes(sim, "x") == %{a: :c, b: :c, c: :c}
    end

    test "a node that restarted while a home was down learns that home's channels" do
      sim =
        cluster([:a, :b, :c])
        |> step(:c, {:create, "x", @opts, :c1, :id1, {10, :c}})
        |> deliver()
        |> partition([:c], [:a, :b])

      # a restarts while c is down: from b it learns of "x" (node_down, not
      # no_channel), and may not create it.
      sim =
        sim
        |> partition([:a], [:b])
        |> put_in([:cores, :a], Core.new({:a, 2}, 1_000))
        |> put_in([:stores, :a], MapSet.new())
        |> put_in([:tables, :a], %{})
        |> heal([:a], [:b])
        |> deliver()

      assert homes(sim, "x") == %{a: :c, b: :c, c: :c}
      sim = sim |> step(:a, {:create, "x", @opts, :c2, :id2, {20, :a}}) |> deliver()
      assert sim.replies.c2 == {:error, :exists}
      assert stores(sim) == %{a: [], b: [], c: ["x"]}

      # c restarts too, and gets "x" back from both, once.
      sim =
        sim
        |> put_in([:cores, :c], Core.new({:c, 2}, 1_000))
        |> put_in([:stores, :c], MapSet.new())
        |> heal([:c], [:a, :b])
        |> deliver()

      assert stores(sim) == %{a: [], b: [], c: ["x"]}
      assert homes(sim, "x") == %{a: :c, b: :c, c: :c}
    end

    test "what a node relays of other homes yields to a linked home's word and to a forget" do
      linked = world([{:b, :up}, {:c, :up}])
      relay = {:peer, :b, {:homes, [{"x", :c, @opts, {10, :c}, :ic}]}}

      # c is linked here: its own sync decides, not b's word.
      assert {core, []} = Core.handle(Core.new(:i1, 1_000), relay, linked)
      assert core.remote == %{}

      # c is not linked: taken.
      unlinked = world([{:b, :up}, {:c, :down}])

      assert {core, [{:put_entry, {"x", :c, @opts, {10, :c}, :ic}}]} =
               Core.handle(Core.new(:i1, 1_000), relay, unlinked)

      # Forgotten here: ignored until c itself syncs again.
      {core, _} = Core.handle(core, {:forget, :c, false, :op}, unlinked)
      assert {^core, []} = Core.handle(core, relay, unlinked)
      {core, _} = Core.handle(core, {:peer, :c, {:sync, :ic, []}}, linked)
      assert {_core, [{:put_entry, _}]} = Core.handle(core, relay, unlinked)
    end

    test "a node that was only apart keeps its channels as they were" do
      sim =
        cluster([:a, :b])
        |> step(:a, {:create, "x", @opts, :c1, :id1, {10, :a}})
        |> step(:b, {:create, "y", @opts, :c2, :id2, {11, :b}})
        |> deliver()

      before = sim.cores
      sim = sim |> partition([:a], [:b]) |> heal([:a], [:b]) |> deliver()

      assert homes(sim, "x") == %{a: :a, b: :a}
      assert homes(sim, "y") == %{a: :b, b: :b}
      assert sim.cores == before
    end
  end

  defp world(links, stored \\ []), do: %{links: links, stored?: &(&1 in stored)}

  ## The simulated cluster: each node a core, a store (a set of names) and a
  ## directory table (a map), linked to every other; messages wait in one
  ## queue until `deliver/1`, and go only over links that are up.

  defp cluster(nodes) do
    %{
      cores: Map.new(nodes, &{&1, Core.new({&1, 1}, 1_000)}),
      stores: Map.new(nodes, &{&1, MapSet.new()}),
      tables: Map.new(nodes, &{&1, %{}}),
      links: MapSet.new(for a <- nodes, b <- nodes, a != b, do: {a, b}),
      queue: :queue.new(),
      replies: %{}
    }
  end

  # As the directory process runs an event: a created channel's result
  # comes back to the core at once.
  defp step(sim, node, event) do
    links = for {^node, to} <- sim.links, do: {to, :up}
    world = %{links: Enum.sort(links), stored?: &MapSet.member?(sim.stores[node], &1)}
    {core, effects} = Core.handle(sim.cores[node], event, world)
    Enum.reduce(effects, put_in(sim.cores[node], core), &execute(&2, node, &1))
  end

  defp execute(sim, node, {:send, to, message}) do
    if MapSet.member?(sim.links, {node, to}),
      do: %{sim | queue: :queue.in({node, to, message}, sim.queue)},
      else: sim
  end

  defp execute(sim, _node, {:reply, caller, answer}) do
    refute Map.has_key?(sim.replies, caller), "#{inspect(caller)} answered twice"
    put_in(sim.replies[caller], answer)
  end

  defp execute(sim, node, {:create_channel, name, opts, purpose}) do
    if MapSet.member?(sim.stores[node], name) do
      step(sim, node, {:created, name, opts, purpose, {:error, :exists}})
    else
      sim = update_in(sim.stores[node], &MapSet.put(&1, name))
      step(sim, node, {:created, name, opts, purpose, :ok})
    end
  end

  defp execute(sim, node, {:delete_channel, name}),
    do: update_in(sim.stores[node], &MapSet.delete(&1, name))

  defp execute(sim, node, {:put_entry, {name, home, _, _, _}}),
    do: put_in(sim.tables[node][name], home)

  defp execute(sim, node, {:drop_entry, name}),
    do: update_in(sim.tables[node], &Map.delete(&1, name))

  # Timers never fire here: a test sends `{:timeout, id}` itself.
  defp execute(sim, _node, {:start_timer, _id, _ms}), do: sim
  defp execute(sim, _node, {:cancel_timer, _id}), do: sim

  # Delivers every message, and those they cause, in the order sent.
  defp deliver(sim) do
    case :queue.out(sim.queue) do
      {{:value, {from, to, message}}, queue} ->
        sim = %{sim | queue: queue}

        if MapSet.member?(sim.links, {from, to}),
          do: sim |> step(to, {:peer, from, message}) |> deliver(),
          else: deliver(sim)

      {:empty, _} ->
        sim
    end
  end

  defp store_delete(sim, node, name) do
    answer = if MapSet.member?(sim.stores[node], name), do: :ok, else: {:error, :no_channel}
    sim = update_in(sim.stores[node], &MapSet.delete(&1, name))
    step(sim, node, {:delete, name, {:delete, node, name}, answer})
  end

  # Links go down on both sides, as a link does when its peer is gone.
  defp partition(sim, side1, side2) do
    pairs = for a <- side1, b <- side2, pair <- [{a, b}, {b, a}], do: pair
    sim = %{sim | links: MapSet.difference(sim.links, MapSet.new(pairs))}
    Enum.reduce(pairs, sim, fn {a, b}, sim -> step(sim, a, {:link_down, b}) end)
  end

  defp heal(sim, side1, side2) do
    pairs = for a <- side1, b <- side2, pair <- [{a, b}, {b, a}], do: pair
    sim = %{sim | links: MapSet.union(sim.links, MapSet.new(pairs))}
    Enum.reduce(pairs, sim, fn {a, b}, sim -> step(sim, a, {:link_up, b}) end)
  end

  defp stores(sim), do: Map.new(sim.stores, fn {n, names} -> {n, Enum.sort(names)} end)
  defp claims(sim), do: Map.new(sim.cores, fn {n, core} -> {n, core.claims} end)

  # Where each node resolves `name`: itself if its store has it, else its table.
  defp homes(sim, name) do
    Map.new(sim.cores, fn {n, _} ->
      {n, if(MapSet.member?(sim.stores[n], name), do: n, else: sim.tables[n][name])}
    end)
  end
end
