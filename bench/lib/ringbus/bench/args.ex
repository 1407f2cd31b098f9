defmodule Ringbus.Bench.Args do
  @moduledoc false
  # Command line values the benches share.

  @doc """
  Parses `args` with `switches` (and `aliases`); raises
  `OptionParser.ParseError` on an unknown option and `Mix.Error` on a plain
  argument.
  """
  @spec parse!([String.t()], keyword(), keyword()) :: keyword()
  def parse!(args, switches, aliases \\ []) do
    {opts, rest} = OptionParser.parse!(args, strict: switches, aliases: aliases)
    if rest != [], do: Mix.raise("unexpected arguments: #{Enum.join(rest, " ")}")
    opts
  end

  @doc """
  Parses `--sizes N,N,...` (or the option `flag` names): positive and
  ascending, or `default` when absent.
  """
  @spec sizes!(String.t() | nil, [pos_integer()], String.t()) :: [pos_integer()]
  def sizes!(string, default, flag \\ "--sizes")
  def sizes!(nil, default, _flag), do: default

  def sizes!(string, _default, flag) do
    sizes =
      for part <- String.split(string, ",", trim: true) do
        case Integer.parse(String.trim(part)) do
          {n, ""} when n > 0 -> n
          _ -> Mix.raise("expected #{flag} to be positive integers, got: #{inspect(string)}")
        end
      end

    if sizes == [] or sizes != Enum.sort(sizes),
      do: Mix.raise("expected #{flag} to be ascending, got: #{inspect(string)}")

    sizes
  end

  @doc "The option `key` as a positive integer, or `default`; raises `Mix.Error` otherwise."
  @spec positive!(keyword(), atom(), pos_integer()) :: pos_integer()
  def positive!(opts, key, default) do
    case Keyword.get(opts, key, default) do
      n when is_integer(n) and n > 0 ->
        n

      other ->
        flag = key |> Atom.to_string() |> String.replace("_", "-")
        Mix.raise("expected --#{flag} to be a positive integer, got: #{inspect(other)}")
    end
  end

  @doc """
  The option `key` as a comma-separated list of names from `allowed` (all of
  them when absent), in the order given; raises `Mix.Error` naming the first
  unknown one as a `noun`.
  """
  @spec names!(keyword(), atom(), [String.t()], String.t()) :: [String.t()]
  def names!(opts, key, allowed, noun) do
    given = opts |> Keyword.get(key, Enum.join(allowed, ",")) |> String.split(",", trim: true)

    for name <- given,
        name not in allowed,
        do:
          Mix.raise(
            "unknown #{noun} #{inspect(name)}; expected some of: #{Enum.join(allowed, ",")}"
          )

    given
  end
end
