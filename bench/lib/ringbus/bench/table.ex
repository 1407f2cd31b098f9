defmodule Ringbus.Bench.Table do
  @moduledoc """
  Fixed-width text tables for the benches' printed figures.

  A table is a list of columns, `{title, width, :left | :right}`; a line
  gives one value per column, `nil` printed as `-`.

      iex> columns = [{"impl", 8, :left}, {"µs", 6, :right}]
      iex> Ringbus.Bench.Table.header(columns)
      "impl        µs"
      iex> Ringbus.Bench.Table.line(columns, ["ringbus", nil])
      "ringbus      -"
  """

  @type column :: {String.t(), pos_integer(), :left | :right}

  @doc "The line of column titles."
  @spec header([column()]) :: String.t()
  def header(columns), do: line(columns, Enum.map(columns, &elem(&1, 0)))

  @doc "Prints the header, then a line for each of `rows`, whose values `values` gives."
  @spec print([column()], Enumerable.t(), (term() -> [term()])) :: :ok
  def print(columns, rows, values) do
    IO.puts(header(columns))
    Enum.each(rows, &IO.puts(line(columns, values.(&1))))
  end

  @doc "One line of values, one a column, padded to the column widths."
  @spec line([column()], [term()]) :: String.t()
  def line(columns, values) when length(columns) == length(values) do
    Enum.zip_with(columns, values, fn {_title, width, side}, value ->
      text = if value == nil, do: "-", else: to_string(value)

      # a value wider than its column still keeps a space from its neighbour
      case side do
        :left -> String.pad_trailing(text, width) <> gap(text, width)
        :right -> gap(text, width) <> String.pad_leading(text, width)
      end
    end)
    |> Enum.join()
  end

  defp gap(text, width), do: if(String.length(text) > width, do: " ", else: "")
end
