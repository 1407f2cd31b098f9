defmodule Ringbus.Release.ChannelSpec do
  @moduledoc false
  # The channel specs of the release's configuration (`Ringbus.Release.Config`):
  # `RINGBUS_CHANNELS`' `NAME:CAPACITY[:OVERFLOW[:MAX_BYTES]][@key=value...]`
  # and `RINGBUS_AUTO_CREATE`'s options. The channels' own option checks
  # run on the result later, where the configuration is built.

  @channel_syntax "NAME:CAPACITY[:OVERFLOW[:MAX_BYTES]][@replicas=N][@max_age=MS]"

  @doc """
  The channels of `RINGBUS_CHANNELS`, comma-separated
  `#{@channel_syntax}`: `{:ok, [{name, options}]}` or `{:error, message}`.
  """
  @spec parse(String.t()) :: {:ok, [{String.t(), keyword()}]} | {:error, String.t()}
  def parse(text) do
    text
    |> String.split([",", " ", "\n", "\t"], trim: true)
    |> Enum.reduce_while({:ok, []}, fn spec, {:ok, acc} ->
      case channel(spec) do
        {:ok, channel} -> {:cont, {:ok, [channel | acc]}}
        {:error, message} -> {:halt, {:error, message}}
      end
    end)
    |> case do
      {:ok, channels} -> duplicates(Enum.reverse(channels))
      error -> error
    end
  end

  @doc "An integer in `range` read from `text`, or an error saying what was `expected`."
  @spec integer(String.t(), Range.t(), String.t()) :: {:ok, integer()} | {:error, String.t()}
  def integer(text, range, expected) do
    case Integer.parse(text) do
      {n, ""} -> if n in range, do: {:ok, n}, else: {:error, "must be #{expected}, got: #{text}"}
      _ -> {:error, "must be #{expected}, got: #{inspect(text)}"}
    end
  end

  defp channel(spec) do
    {spec, suffixes} = suffixes(spec, [])

    case String.split(spec, ":") do
      [name | opts] when name != "" and opts != [] ->
        with {:ok, opts} <- channel_options(opts),
             {:ok, opts} <- suffix_options(opts, suffixes) do
          {:ok, {name, opts}}
        else
          {:error, message} -> {:error, "#{inspect(name)}: #{message}"}
        end

      _ ->
        {:error, "expected #{@channel_syntax}, got: #{inspect(spec)}"}
    end
  end

  # The texts after each trailing `@` that hold no `:`, in order (a name may
  # hold `@`, the options after it always hold the `:` before CAPACITY).
  defp suffixes(spec, acc) do
    case Regex.run(~r/^(.*)@([^@:]*)$/s, spec) do
      [_, spec, suffix] -> suffixes(spec, [suffix | acc])
      nil -> {spec, acc}
    end
  end

  defp suffix_options(opts, suffixes) do
    Enum.reduce_while(suffixes, {:ok, opts}, fn suffix, {:ok, opts} ->
      case suffix_option(suffix) do
        {:ok, {key, value}} ->
          if Keyword.has_key?(opts, key),
            do: {:halt, {:error, "@#{key} given twice"}},
            else: {:cont, {:ok, opts ++ [{key, value}]}}

        error ->
          {:halt, error}
      end
    end)
  end

  defp suffix_option("replicas=" <> n),
    do: positive_option(:replicas, n)

  defp suffix_option("max_age=" <> ms),
    do: positive_option(:max_age, ms)

  defp suffix_option(suffix),
    do:
      {:error,
       "expected @replicas=N or @max_age=MS after the options, got: #{inspect("@" <> suffix)}"}

  defp positive_option(key, text) do
    with {:ok, n} <- option(key, integer(text, 1..(2 ** 62), "a positive integer")),
         do: {:ok, {key, n}}
  end

  @doc "`CAPACITY[:OVERFLOW[:MAX_BYTES]]`, split at `:`, as channel options."
  @spec options([String.t()]) :: {:ok, keyword()} | {:error, String.t()}
  def options(parts), do: channel_options(parts)

  defp channel_options([capacity | rest]) when length(rest) <= 2 do
    with {:ok, capacity} <-
           option(:capacity, integer(capacity, 1..(2 ** 62), "a positive integer")),
         {:ok, overflow} <- overflow(Enum.at(rest, 0, "drop_oldest")),
         {:ok, max_bytes} <- option(:max_bytes, max_bytes(Enum.at(rest, 1))) do
      opts = [capacity: capacity, overflow: overflow]
      {:ok, if(max_bytes, do: opts ++ [max_bytes: max_bytes], else: opts)}
    end
  end

  defp channel_options(parts),
    do:
      {:error, "expected CAPACITY[:OVERFLOW[:MAX_BYTES]], got: #{inspect(Enum.join(parts, ":"))}"}

  defp overflow("drop_oldest"), do: {:ok, :drop_oldest}
  defp overflow("reject"), do: {:ok, :reject}

  defp overflow(other),
    do: {:error, "overflow must be drop_oldest or reject, got: #{inspect(other)}"}

  defp max_bytes(nil), do: {:ok, nil}
  defp max_bytes(text), do: integer(text, 1..(2 ** 62), "a positive integer")

  defp option(_key, {:ok, value}), do: {:ok, value}
  defp option(key, {:error, message}), do: {:error, "#{key} #{message}"}

  defp duplicates(channels) do
    names = Enum.map(channels, &elem(&1, 0))

    case names -- Enum.uniq(names) do
      [] -> {:ok, channels}
      [name | _] -> {:error, "declares #{inspect(name)} twice"}
    end
  end

  ## The boot configuration
end
