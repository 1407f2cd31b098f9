defmodule Ringbus.Resp.Encoder do
  @moduledoc false
  # Encodes replies as RESP2 or RESP3 iodata. Pure.
  #
  # A reply is a term:
  #
  #   binary                   bulk string
  #   integer                  integer
  #   nil                      null (RESP2 `$-1`, RESP3 `_`)
  #   :null_array              null where Redis answers an array (RESP2 `*-1`)
  #   list                     array
  #   {:simple, iodata}        status line, `+OK`
  #   {:error, iodata}         error line, `-ERR ...`; its text must hold no CR or LF
  #   {:map, [{key, value}]}   RESP3 map, a flat array in RESP2
  #   {:pairs, [{key, value}]} RESP3 map, an array of [key, value] arrays in RESP2
  #   {:set, list}             RESP3 set, an array in RESP2
  #   {:verbatim, binary}      RESP3 verbatim text (`=`, format "txt"), a bulk in RESP2
  #   {:push, list}            RESP3 push, an array in RESP2

  @type version :: 2 | 3
  @type reply ::
          binary()
          | integer()
          | nil
          | :null_array
          | [reply()]
          | {:simple, iodata()}
          | {:error, iodata()}
          | {:map, [{reply(), reply()}]}
          | {:pairs, [{reply(), reply()}]}
          | {:set, [reply()]}
          | {:verbatim, binary()}
          | {:push, [reply()]}

  @doc "The RESP bytes of `reply` in protocol `version`."
  @spec encode(reply(), version()) :: iodata()
  def encode(reply, version)

  def encode(bin, _v) when is_binary(bin),
    do: [?$, Integer.to_string(byte_size(bin)), "\r\n", bin, "\r\n"]

  def encode(int, _v) when is_integer(int), do: [?:, Integer.to_string(int), "\r\n"]
  def encode(nil, 2), do: "$-1\r\n"
  def encode(:null_array, 2), do: "*-1\r\n"
  def encode(null, 3) when null in [nil, :null_array], do: "_\r\n"
  def encode(list, v) when is_list(list), do: aggregate(?*, list, v)
  def encode({:simple, text}, _v), do: [?+, text, "\r\n"]
  def encode({:error, text}, _v), do: [?-, text, "\r\n"]
  def encode({:map, pairs}, 2), do: aggregate(?*, flatten(pairs), 2)

  def encode({:pairs, pairs}, 2), do: aggregate(?*, Enum.map(pairs, fn {k, v} -> [k, v] end), 2)
  def encode({:pairs, pairs}, 3), do: encode({:map, pairs}, 3)

  def encode({:map, pairs}, 3) do
    {count, data} =
      Enum.reduce(pairs, {0, []}, fn {k, v}, {n, acc} ->
        {n + 1, [acc, encode(k, 3), encode(v, 3)]}
      end)

    [?%, Integer.to_string(count), "\r\n", data]
  end

  def encode({:set, items}, 2), do: aggregate(?*, items, 2)
  def encode({:set, items}, 3), do: aggregate(?~, items, 3)
  def encode({:verbatim, text}, 2), do: encode(text, 2)

  def encode({:verbatim, text}, 3),
    do: [?=, Integer.to_string(byte_size(text) + 4), "\r\ntxt:", text, "\r\n"]

  def encode({:push, items}, 2), do: aggregate(?*, items, 2)
  def encode({:push, items}, 3), do: aggregate(?>, items, 3)

  defp aggregate(tag, items, v) do
    {count, data} =
      Enum.reduce(items, {0, []}, fn item, {n, acc} -> {n + 1, [acc | encode(item, v)]} end)

    [tag, Integer.to_string(count), "\r\n" | data]
  end

  defp flatten(pairs), do: Enum.flat_map(pairs, fn {k, v} -> [k, v] end)

  @doc """
  An error reply in Redis's shape: `message` starts with its code (`ERR`,
  `NOGROUP`, ...); CR and LF become blanks, as Redis makes them.
  """
  @spec error(iodata()) :: {:error, binary()}
  def error(message) do
    {:error, message |> IO.iodata_to_binary() |> String.replace(["\r", "\n"], " ")}
  end
end
