defmodule Ringbus.Client.SessionTest do
  # The client's routing as functions: async pushes in flight are kept in
  # send order, and each still in flight when the connection ends gets an
  # error entry.
  use ExUnit.Case, async: true

  alias Ringbus.Client.Session

  @client :client

  defp owner_acks(effects), do: for({:owner, {:ringbus_acks, @client, acks}} <- effects, do: acks)

  defp pushed(session, corrs),
    do: Enum.reduce(corrs, session, fn {corr, count}, s -> Session.async(s, corr, count) end)

  test "acks shorten the pushes in flight; the connection's end answers the rest" do
    session = pushed(Session.new(@client), [{2, 1}, {3, 1}, {4, 1}, {10, 1}, {11, 5}, {12, 1}])

    {effects, released, session} =
      Session.handle([{:push_acks, 2, [{2, {:ok, 0}}, {3, {:ok, 1}}]}], session)

    assert owner_acks(effects) == [[{2, {:ok, 0}}, {3, {:ok, 1}}]]
    assert released == 2

    assert owner_acks(Session.down(session, true)) == [
             for(corr <- [4, 10, 11, 12], do: {corr, {:error, :closed}})
           ]

    # Closed by its owner: nobody to tell.
    assert Session.down(session, false) == []
  end

  test "single pushes only: a frame of acks drops that many, across runs" do
    session =
      pushed(Session.new(@client), for(corr <- [1, 2, 3, 7, 8, 0xFFFF_FFFF, 1], do: {corr, 1}))

    acks = for corr <- [1, 2, 3, 7], do: {corr, {:ok, corr}}
    {_effects, 4, session} = Session.handle([{:push_acks, 4, acks}], session)

    assert owner_acks(Session.down(session, true)) == [
             [{8, {:error, :closed}}, {0xFFFF_FFFF, {:error, :closed}}, {1, {:error, :closed}}]
           ]
  end

  test "nothing in flight: no error entries" do
    session = pushed(Session.new(@client), [{5, 1}])
    {_, _, session} = Session.handle([{:push_acks, 1, [{5, {:error, :full}}]}], session)
    assert owner_acks(Session.down(session, true)) == []
  end

  test "a coalesced batch's pushes, their ids consecutive or not, get one entry each in send order" do
    # A batch of one goes as a PUSH of its own id, never through here.
    for ids <- [[7, 8, 9, 10], [7, 8, 3, 4, 20], [0xFFFF_FFFF, 1, 2]] do
      batch = 100
      session = Session.coalesced(Session.new(@client), batch, ids, length(ids))
      {effects, released, _} = Session.handle([{:push_acks, 1, [{batch, {:ok, 50}}]}], session)
      assert released == length(ids)

      assert owner_acks(effects) == [
               Enum.with_index(ids, fn corr, i -> {corr, {:ok, 50 + i}} end)
             ]

      session = Session.coalesced(Session.new(@client), batch, ids, length(ids))

      assert owner_acks(Session.down(session, true)) == [
               for(c <- ids, do: {c, {:error, :closed}})
             ]
    end
  end
end
