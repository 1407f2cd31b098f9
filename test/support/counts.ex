defmodule Ringbus.Test.Counts do
  @moduledoc """
  A channel's counts as `Ringbus.info/1` gives them, and the promise they
  keep: every message pushed is pulled, overwritten, expired, deleted or
  still held.
  """

  @doc "`Ringbus.info/1`'s map, or a match error."
  def info!(name) do
    {:ok, info} = Ringbus.info(name)
    info
  end

  @doc "Whether the counts account for every message pushed."
  def balanced?(i), do: i.pushed == i.pulled + i.overwritten + i.expired + i.deleted + i.len
end
