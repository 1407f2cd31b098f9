defmodule Ringbus.Channel.RingModelTest do
  # Random command sequences run against a channel and against a plain list
  # model; every result, every counter and the bytes held must agree, with
  # and without max_bytes, across deletes and re-creates.
  use ExUnit.Case, async: true

  alias Ringbus.Test.RingModel

  @numtests 1_000

  for overflow <- [:drop_oldest, :reject] do
    test "the ring agrees with the model (#{overflow})" do
      overflow = unquote(overflow)

      property =
        :proper.forall(RingModel.scenario(), fn {capacity, max_bytes, commands} ->
          name = {__MODULE__, make_ref()}
          :ok = Ringbus.create(name, capacity: capacity, overflow: overflow, max_bytes: max_bytes)

          try do
            RingModel.run(name, RingModel.new(capacity, overflow, max_bytes), commands)
          after
            Ringbus.delete(name)
          end
        end)

      assert :proper.quickcheck(property, [{:numtests, @numtests}, {:to_file, :user}]) == true
    end
  end
end
