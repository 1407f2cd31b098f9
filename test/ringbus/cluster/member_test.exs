defmodule Ringbus.Cluster.MemberTest do
  # The process standing for this node in the members group does nothing but
  # exist, and answers `:sys`.
  use ExUnit.Case, async: true

  alias Ringbus.Test.Internals

  test ":sys.get_state, :sys.suspend and :sys.resume work on this node's member" do
    member = Internals.cluster_member()
    assert :sys.get_state(member, 1_000) == nil
    assert :ok = :sys.suspend(member, 1_000)
    assert :ok = :sys.resume(member, 1_000)
    assert Internals.cluster_member() == member
  end
end
