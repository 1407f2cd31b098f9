defmodule Ringbus.Socket.TLSTest do
  use ExUnit.Case, async: true

  alias Ringbus.Socket.TLS
  alias Ringbus.Wire.FrameGenerators

  describe "slice/2" do
    test "keeps the bytes and their order, in pieces of at most the limit" do
      iodata =
        :proper_types.list(
          :proper_types.frequency([
            {4, :proper_types.binary()},
            {1, :proper_types.integer(0, 255)},
            {1, :proper_types.list(:proper_types.binary())}
          ])
        )

      property =
        FrameGenerators.forall({iodata, :proper_types.integer(1, 40)}, fn {data, limit} ->
          pieces = TLS.slice(data, limit)
          sizes = Enum.map(pieces, &IO.iodata_length/1)

          IO.iodata_to_binary(pieces) == IO.iodata_to_binary(data) and
            Enum.all?(sizes, &(&1 in 1..limit)) and
            Enum.all?(Enum.drop(sizes, -1), &(&1 == limit))
        end)

      assert FrameGenerators.check(property, 500) == true
    end

    test "splits a large binary into sub-binaries of the limit" do
      data = ["head", :binary.copy(<<7>>, 10), ?!]

      assert TLS.slice(data, 4) == [
               ["head"],
               [<<7, 7, 7, 7>>],
               [<<7, 7, 7, 7>>],
               [<<7, 7>>, "!"]
             ]
    end

    test "gives nothing for empty iodata" do
      assert TLS.slice([[], "", []], 8) == []
    end
  end
end
