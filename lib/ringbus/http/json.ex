defmodule Ringbus.HTTP.JSON do
  @moduledoc false
  # A JSON encoder for `/status.json` (OTP 25 has none, and nothing may come
  # from hex): maps with atom or string keys, lists, strings, numbers,
  # booleans, nil as null, and other atoms as strings. Pure.

  @spec encode(term()) :: iodata()
  def encode(nil), do: "null"
  def encode(true), do: "true"
  def encode(false), do: "false"
  def encode(atom) when is_atom(atom), do: string(Atom.to_string(atom))
  def encode(n) when is_integer(n), do: Integer.to_string(n)
  def encode(n) when is_float(n), do: Float.to_string(n)
  def encode(text) when is_binary(text), do: string(text)
  def encode(list) when is_list(list), do: ["[", Enum.map_intersperse(list, ",", &encode/1), "]"]

  def encode(map) when is_map(map) do
    pairs =
      map
      |> Enum.map(fn {key, value} -> {to_string(key), value} end)
      |> Enum.sort()
      |> Enum.map_intersperse(",", fn {key, value} -> [string(key), ":", encode(value)] end)

    ["{", pairs, "}"]
  end

  defp string(text), do: [?", escape(text, []), ?"]

  defp escape(<<?", rest::binary>>, acc), do: escape(rest, [acc | "\\\""])
  defp escape(<<?\\, rest::binary>>, acc), do: escape(rest, [acc | "\\\\"])
  defp escape(<<?\n, rest::binary>>, acc), do: escape(rest, [acc | "\\n"])
  defp escape(<<?\r, rest::binary>>, acc), do: escape(rest, [acc | "\\r"])
  defp escape(<<?\t, rest::binary>>, acc), do: escape(rest, [acc | "\\t"])

  defp escape(<<c, rest::binary>>, acc) when c < 0x20,
    do: escape(rest, [acc | "\\u" <> String.pad_leading(Integer.to_string(c, 16), 4, "0")])

  defp escape(<<c::utf8, rest::binary>>, acc), do: escape(rest, [acc | <<c::utf8>>])
  # A byte that is not UTF-8 (labels are UTF-8 already; this keeps the output valid).
  defp escape(<<_byte, rest::binary>>, acc), do: escape(rest, [acc | "\\ufffd"])
  defp escape(<<>>, acc), do: acc
end
