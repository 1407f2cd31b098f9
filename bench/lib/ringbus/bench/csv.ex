defmodule Ringbus.Bench.CSV do
  @moduledoc """
  Writes bench results as CSV: a header row, then one row per result.

  Integers are written as they are, floats with two decimals, atoms and
  strings as text, quoted when they hold a comma, a quote or a line break.

      iex> Ringbus.Bench.CSV.encode(["impl", "avg_us"], [[:queue, 6.9], ["a,b", 12]])
      ...> |> IO.iodata_to_binary()
      "impl,avg_us\\nqueue,6.90\\n\\"a,b\\",12\\n"
  """

  @type field :: number() | atom() | String.t()

  @doc "Encodes a header and rows as CSV iodata."
  @spec encode([String.t()], [[field()]]) :: iodata()
  def encode(header, rows) do
    Enum.map([header | rows], fn row -> [Enum.map_intersperse(row, ",", &field/1), "\n"] end)
  end

  @doc "Writes a header and rows to `path`, raising `File.Error` on failure."
  @spec write!(Path.t(), [String.t()], [[field()]]) :: :ok
  def write!(path, header, rows), do: File.write!(path, encode(header, rows))

  defp field(value) when is_integer(value), do: Integer.to_string(value)
  defp field(value) when is_float(value), do: :erlang.float_to_binary(value, decimals: 2)
  defp field(nil), do: ""
  defp field(value) when is_atom(value), do: field(Atom.to_string(value))

  defp field(value) when is_binary(value) do
    if String.contains?(value, [",", "\"", "\n", "\r"]),
      do: [?", String.replace(value, "\"", "\"\""), ?"],
      else: value
  end
end
