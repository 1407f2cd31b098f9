defmodule Ringbus.Release.Files do
  @moduledoc false
  # What the files a configuration names hold, read and checked when the
  # configuration loads (`Ringbus.Release.Config`): the TLS certificate and
  # key, and the tokens file. Each answer is `:ok`, `{:ok, value}` or
  # `{:error, message}`, a message the configuration prefixes with the
  # variable that named the file.

  @doc """
  Checks that `path` holds a PEM entry of `what` that decodes. `:ssl` reads
  the files only at the first handshake, so a bad one would boot and then
  fail every handshake.
  """
  @spec pem(Path.t(), :certificate | :private_key) :: :ok | {:error, String.t()}
  def pem(path, what) do
    entries =
      try do
        :public_key.pem_decode(File.read!(path))
      rescue
        _ -> []
      end

    words = if what == :certificate, do: "certificate", else: "private key"

    case Enum.find(entries, &entry?(what, &1)) do
      nil ->
        {:error, "holds no PEM #{words}: #{inspect(path)}"}

      {_type, _der, :not_encrypted} = entry ->
        try do
          _ = :public_key.pem_entry_decode(entry)
          :ok
        rescue
          _ -> {:error, "holds a #{words} that cannot be decoded: #{inspect(path)}"}
        end

      _encrypted ->
        {:error, "holds an encrypted #{words}, which is not supported: #{inspect(path)}"}
    end
  end

  defp entry?(:certificate, {:Certificate, _der, _}), do: true

  defp entry?(:private_key, {type, _der, _})
       when type in [:RSAPrivateKey, :DSAPrivateKey, :ECPrivateKey, :PrivateKeyInfo],
       do: true

  defp entry?(_what, _entry), do: false

  @doc """
  The tokens of a tokens file: a line per token, `TOKEN [read=PREFIX,...]
  [write=PREFIX,...] [manage=PREFIX,...]` (none: every grant), `#` comments.
  """
  @spec tokens(Path.t()) :: {:ok, %{String.t() => :all | keyword()}} | {:error, String.t()}
  def tokens(path) do
    path
    |> File.read!()
    |> String.split(["\r\n", "\n"])
    |> Enum.with_index(1)
    |> Enum.reduce_while({:ok, %{}}, fn {text, n}, {:ok, acc} ->
      case String.split(text, "#", parts: 2) |> hd() |> String.split() do
        [] ->
          {:cont, {:ok, acc}}

        [token | grants] ->
          case grants(grants, []) do
            {:ok, grants} ->
              {:cont, {:ok, Map.put(acc, token, grants)}}

            :error ->
              {:halt,
               {:error,
                "#{path} line #{n}: expected TOKEN [read=PREFIX,...] [write=PREFIX,...] " <>
                  "[manage=PREFIX,...]"}}
          end
      end
    end)
  end

  defp grants([], []), do: {:ok, :all}

  defp grants([], acc) do
    {:ok,
     [
       read: Keyword.get(acc, :read, []),
       write: Keyword.get(acc, :write, []),
       manage: Keyword.get(acc, :manage, [])
     ]}
  end

  defp grants(["all" | rest], acc), do: grants(rest, acc)

  defp grants([grant | rest], acc) do
    case String.split(grant, "=", parts: 2) do
      [access, prefixes] when access in ["read", "write", "manage"] ->
        prefixes = String.split(prefixes, ",", trim: true)
        prefixes = if "*" in prefixes, do: :all, else: prefixes
        grants(rest, Keyword.put(acc, String.to_existing_atom(access), prefixes))

      _ ->
        :error
    end
  end
end
