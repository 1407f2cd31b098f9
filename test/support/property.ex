defmodule Ringbus.Test.Property do
  @moduledoc "PropEr properties over a channel: each case on a fresh channel, deleted after it."

  @doc "Runs `fun.(name)` on a channel made with `opts` under `name`, and deletes it after."
  @spec on_channel(term(), keyword(), (term() -> result)) :: result when result: term()
  def on_channel(name, opts, fun) do
    :ok = Ringbus.create(name, opts)

    try do
      fun.(name)
    after
      Ringbus.delete(name)
    end
  end

  @doc "Checks `property` `numtests` times; a counterexample is printed."
  @spec check(term(), pos_integer()) :: term()
  def check(property, numtests),
    do: :proper.quickcheck(property, [{:numtests, numtests}, {:to_file, :user}])
end
