defmodule Ringbus.Bench.ArgsTest do
  use ExUnit.Case, async: true

  alias Ringbus.Bench.Args

  test "names! gives every allowed name when absent, else the given ones in order" do
    assert Args.names!([], :modes, ~w(a b c), "mode") == ~w(a b c)
    assert Args.names!([modes: "c,a"], :modes, ~w(a b c), "mode") == ~w(c a)
  end

  test "names! refuses an unknown name and says which" do
    assert_raise Mix.Error, ~r/unknown variant "d"; expected some of: a,b,c/, fn ->
      Args.names!([variants: "a,d"], :variants, ~w(a b c), "variant")
    end
  end
end
