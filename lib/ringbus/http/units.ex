defmodule Ringbus.HTTP.Units do
  @moduledoc false
  # How the status views write sizes and durations for a person to read.

  @spec bytes(non_neg_integer() | nil) :: String.t()
  def bytes(nil), do: ""
  def bytes(n) when n < 1024, do: "#{n} B"
  def bytes(n) when n < 1024 * 1024, do: "#{Float.round(n / 1024, 1)} KiB"
  def bytes(n) when n < 1024 * 1024 * 1024, do: "#{Float.round(n / 1024 / 1024, 1)} MiB"
  def bytes(n), do: "#{Float.round(n / 1024 / 1024 / 1024, 2)} GiB"

  @doc "A count, exact below 100 000, else to three or four figures: `1.2 M`."
  @spec count(integer() | nil) :: String.t()
  def count(nil), do: ""
  def count(n) when n < 100_000, do: Integer.to_string(n)
  def count(n) when n < 1_000_000, do: "#{Float.round(n / 1000, 1)} k"
  def count(n) when n < 1_000_000_000, do: "#{Float.round(n / 1_000_000, 1)} M"
  def count(n), do: "#{Float.round(n / 1_000_000_000, 1)} G"

  @spec duration(non_neg_integer()) :: String.t()
  def duration(s) when s < 120, do: "#{s} s"
  def duration(s) when s < 7200, do: "#{div(s, 60)} min"
  def duration(s), do: "#{div(s, 3600)} h #{rem(div(s, 60), 60)} min"

  @doc "An idle time in ms, in seconds to a tenth: `2.5 s`."
  @spec idle(non_neg_integer() | nil) :: String.t() | nil
  def idle(nil), do: nil
  def idle(ms), do: "#{Float.round(ms / 1000, 1)} s"

  @doc "What the sparklines span: 60 samples."
  @spec window(pos_integer()) :: String.t()
  def window(interval_ms), do: "last #{duration(div(interval_ms * 60, 1000))}"
end
