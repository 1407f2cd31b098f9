defmodule Ringbus.Client.InFlightTest do
  use ExUnit.Case, async: true

  alias Ringbus.Client.InFlight

  defp pushed(corrs), do: Enum.reduce(corrs, InFlight.new(), &InFlight.push(&2, &1))

  test "keeps send order across runs, and drops the oldest" do
    in_flight = pushed([5, 6, 7, 9, 10, 2, 0xFFFF_FFFF, 1])
    assert InFlight.to_list(in_flight) == [5, 6, 7, 9, 10, 2, 0xFFFF_FFFF, 1]
    assert InFlight.to_list(InFlight.drop(in_flight, 2)) == [7, 9, 10, 2, 0xFFFF_FFFF, 1]
    assert InFlight.to_list(InFlight.drop(in_flight, 4)) == [10, 2, 0xFFFF_FFFF, 1]
    assert InFlight.to_list(InFlight.drop(in_flight, 8)) == []
    assert InFlight.to_list(InFlight.drop(pushed(1..10), 3)) == Enum.to_list(4..10)
    assert InFlight.to_list(InFlight.drop(pushed(1..10), 10)) == []
    assert InFlight.to_list(InFlight.drop(InFlight.new(), 0)) == []
  end

  test "as one queue would, for any pushes and drops" do
    for _ <- 1..200 do
      ops =
        for _ <- 1..50,
            do:
              if(:rand.uniform(3) == 1,
                do: {:drop, :rand.uniform(4) - 1},
                else: {:push, :rand.uniform(6)}
              )

      {in_flight, model, _next} =
        Enum.reduce(ops, {InFlight.new(), [], 1}, fn
          {:push, step}, {f, m, next} ->
            # Mostly consecutive ids, sometimes a jump.
            corr = if step > 2, do: next, else: next + step
            {InFlight.push(f, corr), m ++ [corr], corr + 1}

          {:drop, n}, {f, m, next} ->
            n = min(n, length(m))
            {InFlight.drop(f, n), Enum.drop(m, n), next}
        end)

      assert InFlight.to_list(in_flight) == model
      assert InFlight.count(in_flight) == length(model)
    end
  end
end
