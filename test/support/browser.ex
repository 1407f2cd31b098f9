defmodule Ringbus.Test.Browser do
  @moduledoc """
  Loads a page in headless Chromium (Debian's `chromium`, which `bin/test`
  installs when missing): its DOM after rendering, and a screenshot, with
  enough of PNG decoding to look at the pixels.
  """

  @doc "The rendered DOM of `url`, in a window of `{width, height}` (Chromium's default: 800×600)."
  def dom(url, size \\ nil) do
    window = if size, do: ["--window-size=#{elem(size, 0)},#{elem(size, 1)}"], else: []
    chromium(window ++ ["--dump-dom", url])
  end

  @doc "Takes a `width`×`height` screenshot of `url` into `path`."
  def screenshot(url, path, {width, height}) do
    chromium(["--screenshot=#{path}", "--window-size=#{width},#{height}", url])
    File.read!(path)
  end

  defp chromium(args) do
    chromium = Ringbus.Test.Debian.executable!("chromium", "chromium")

    Ringbus.Test.Debian.with_tmp("ringbus-chromium", fn profile ->
      flags =
        ~w(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run) ++
          ["--user-data-dir=#{profile}"]

      # Bounded: a browser that hangs fails the test instead of the suite.
      # Its stderr (complaints about a missing D-Bus) is dropped.
      command = ~s(exec timeout 120 "$@" 2>/dev/null)
      {out, status} = System.cmd("sh", ["-c", command, "sh", chromium | flags ++ args])
      if status != 0, do: raise("chromium exited with #{status}")
      out
    end)
  end

  @doc """
  Decodes an 8-bit RGB or RGBA PNG: `{width, height, rows}`, each row a
  list of `{r, g, b}`.
  """
  def decode_png(<<137, "PNG\r\n", 26, "\n", chunks::binary>>) do
    {header, data} = chunks(chunks, nil, [])
    <<width::32, height::32, 8, color, 0, 0, 0>> = header
    channels = %{2 => 3, 6 => 4}[color] || raise "unsupported PNG color type #{color}"
    raw = :zlib.uncompress(IO.iodata_to_binary(data))

    rows =
      unfilter(raw, width * channels, channels, height, :binary.copy(<<0>>, width * channels), [])

    {width, height, Enum.map(rows, &pixels(&1, channels))}
  end

  defp chunks(
         <<len::32, type::binary-4, body::binary-size(len), _crc::32, rest::binary>>,
         h,
         data
       ) do
    case type do
      "IHDR" -> chunks(rest, body, data)
      "IDAT" -> chunks(rest, h, [data | body])
      "IEND" -> {h, data}
      _ -> chunks(rest, h, data)
    end
  end

  defp unfilter(_raw, _stride, _bpp, 0, _prev, acc), do: Enum.reverse(acc)

  defp unfilter(<<filter, line::binary>>, stride, bpp, rows, prev, acc) do
    <<line::binary-size(stride), rest::binary>> = line
    row = unfilter_row(filter, line, prev, bpp)
    unfilter(rest, stride, bpp, rows - 1, row, [row | acc])
  end

  defp unfilter_row(filter, line, prev, bpp), do: unfilter_row(filter, line, prev, bpp, 0, <<>>)

  defp unfilter_row(_filter, <<>>, _prev, _bpp, _i, out), do: out

  defp unfilter_row(filter, <<x, rest::binary>>, prev, bpp, i, out) do
    a = if i >= bpp, do: :binary.at(out, i - bpp), else: 0
    b = :binary.at(prev, i)
    c = if i >= bpp, do: :binary.at(prev, i - bpp), else: 0

    value =
      case filter do
        0 -> x
        1 -> x + a
        2 -> x + b
        3 -> x + div(a + b, 2)
        4 -> x + paeth(a, b, c)
      end

    unfilter_row(filter, rest, prev, bpp, i + 1, <<out::binary, rem(value, 256)>>)
  end

  defp paeth(a, b, c) do
    p = a + b - c
    {pa, pb, pc} = {abs(p - a), abs(p - b), abs(p - c)}

    cond do
      pa <= pb and pa <= pc -> a
      pb <= pc -> b
      true -> c
    end
  end

  defp pixels(row, 3), do: for(<<r, g, b <- row>>, do: {r, g, b})
  defp pixels(row, 4), do: for(<<r, g, b, _a <- row>>, do: {r, g, b})
end
