defmodule Ringbus.Replica.Config do
  @moduledoc false
  # Where this node's replicated channels live: the Ra system's name and
  # its data dir, from the application env.

  @system :ringbus

  @doc "The name of Ringbus's Ra system."
  @spec system() :: atom()
  def system, do: @system

  @doc """
  The directory of this node's replicated channels: the application env
  `:data_dir`, else `ringbus_data/NODE` under the current directory.
  """
  @spec data_dir() :: Path.t()
  def data_dir do
    case Application.get_env(:ringbus, :data_dir) do
      nil -> Path.join([File.cwd!(), "ringbus_data", Atom.to_string(node())])
      dir when is_binary(dir) or is_list(dir) -> dir |> to_string() |> Path.expand()
      other -> raise ArgumentError, "expected :data_dir to be a path, got: #{inspect(other)}"
    end
  end

  @doc "The Ra system's configuration, in `dir`."
  @spec ra_system(Path.t()) :: map()
  def ra_system(dir) do
    Map.merge(:ra_system.default_config(), %{
      name: @system,
      names: :ra_system.derive_names(@system),
      data_dir: String.to_charlist(dir),
      wal_data_dir: String.to_charlist(dir)
    })
  end

  @doc "The name the replica layer's supervisor registers."
  @spec supervisor_name() :: atom()
  def supervisor_name, do: :ringbus_replicas

  @doc "The catalogue of this node's replicated channels, in `dir`."
  @spec catalogue_file(Path.t()) :: Path.t()
  def catalogue_file(dir), do: Path.join(dir, "channels.etf")
end
